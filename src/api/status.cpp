// Version, status text and the thread-local last error.
#include <cstdarg>
#include <cstdio>

#include "api/error.hpp"
#include "api/validate.hpp"

#define ATTN_STRINGIFY_(x) #x
#define ATTN_STRINGIFY(x) ATTN_STRINGIFY_(x)

namespace attn::api {
namespace {

// Sized for the longest message the checks write (a function, two tensor names and their
// byte ranges) with room to spare; vsnprintf truncates anything longer.
constexpr size_t kMessageCapacity = 512;
thread_local char last_error_text[kMessageCapacity] = "";

}  // namespace

void set_last_error(const char *format, ...) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(last_error_text, kMessageCapacity, format, args);
    va_end(args);
}

}  // namespace attn::api

extern "C" {

const char *attn_version(void) {
    return ATTN_STRINGIFY(ATTN_VERSION_MAJOR) "." ATTN_STRINGIFY(
        ATTN_VERSION_MINOR) "." ATTN_STRINGIFY(ATTN_VERSION_PATCH);
}

const char *attn_status_string(attn_status s) {
    switch (attn::api::enum_int(s)) {  // any int a C caller passes
    case ATTN_OK: return "ATTN_OK: success";
    case ATTN_INVALID_ARGUMENT: return "ATTN_INVALID_ARGUMENT: an argument is invalid";
    case ATTN_OUT_OF_MEMORY: return "ATTN_OUT_OF_MEMORY: scratch memory could not be allocated";
    case ATTN_UNSUPPORTED: return "ATTN_UNSUPPORTED: not available on this CPU or build";
    case ATTN_INTERNAL_ERROR: return "ATTN_INTERNAL_ERROR: an unexpected internal failure";
    }
    return "unknown attn_status value";
}

const char *attn_last_error(void) { return attn::api::last_error_text; }

}  // extern "C"
