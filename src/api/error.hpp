// The C boundary's error channel: a thread-local message for the last failed call, and
// the wrapper that keeps C++ exceptions from crossing into C.
#pragma once

#include <new>
#include <stdexcept>

#include "attn/attn.h"

namespace attn::api {

// Replaces this thread's last error with a printf-formatted message. Never throws and never
// allocates: the text lives in a fixed thread-local buffer (long messages are truncated).
void set_last_error(const char *format, ...) __attribute__((format(printf, 1, 2)));

// Runs body() (which returns an attn_status) and turns any exception it throws into a status
// and a message naming `function`: std::bad_alloc -> ATTN_OUT_OF_MEMORY, anything else ->
// ATTN_INTERNAL_ERROR. Every entry point of the C API runs its whole body inside this.
template <class Body>
attn_status guarded(const char *function, Body &&body) noexcept {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        set_last_error("%s: out of memory", function);
        return ATTN_OUT_OF_MEMORY;
    } catch (const std::exception &e) {
        set_last_error("%s: internal error: %s", function, e.what());
        return ATTN_INTERNAL_ERROR;
    } catch (...) {
        set_last_error("%s: internal error: unknown exception", function);
        return ATTN_INTERNAL_ERROR;
    }
}

}  // namespace attn::api
