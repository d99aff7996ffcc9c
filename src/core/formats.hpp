// The facts of the element formats, for every layer: how many bytes an element takes. The
// rounding and widening rules are core/convert.hpp. A switch over attn_dtype names every
// format and has no default (the library compiles with -Wswitch-enum), so a format added to
// the enum is an error at each place that must learn it, never read as another one.
#pragma once

#include <cstdint>

#include "attn/attn.h"

namespace attn::core {

// Bytes of one element of type t; 0 for a value outside the enum (rejected by the API's
// checks before any kernel sees it).
constexpr int64_t element_bytes(attn_dtype t) {
    switch (t) {
    case ATTN_DTYPE_F32: return 4;
    case ATTN_DTYPE_BF16: return 2;
    case ATTN_DTYPE_F16: return 2;
    }
    return 0;
}

// Element i of an array of type t at base, as a pointer.
inline const void *element_at(const void *base, attn_dtype t, int64_t i) {
    return static_cast<const char *>(base) + i * element_bytes(t);
}
inline void *element_at(void *base, attn_dtype t, int64_t i) {
    return static_cast<char *>(base) + i * element_bytes(t);
}

}  // namespace attn::core
