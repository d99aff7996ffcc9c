// The K/V storage formats and their facts, for every layer (as ggml's type traits): one
// descriptor per format with its storage, its bits and its scalar widening and rounding (the
// rules of core/convert.hpp), and with_format(), the one switch from an attn_dtype to its
// descriptor. Every reader of a stored row goes through a descriptor: the kernels add the
// vector operations per instruction set (kernels/elements.hpp: widen a vector, a row; the dot
// product, the packing into f32 and bf16-pair panels take the descriptor as a template
// argument), the reference uses widen_one / narrow_one (the kernels use their own per-ISA
// forms of these, so that no copy compiled with one ISA's flags is shared with another). A switch over attn_dtype names every
// format and has no default (the library compiles with -Wswitch-enum), so a format added to
// the enum is an error at each place that must learn it, never read as another one.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "attn/attn.h"
#include "core/convert.hpp"

namespace attn::core {

// Per-row or per-group metadata of a stored format whose element is x = scale * (q - zero)
// (a quantized cache): scale and zero of element c of row j at [j * row_stride + c / group].
// Empty (scale null) for f32, bf16 and f16, which store their values.
struct format_scales {
    const float *scale = nullptr;
    const float *zero = nullptr;  // null: zero points of 0
    int64_t row_stride = 0;       // entries between rows
    int64_t group = 0;            // elements per entry
};

struct f32_format {
    using storage = float;
    static constexpr attn_dtype type = ATTN_DTYPE_F32;
    static constexpr int bits = 32;
    static float widen_one(const storage *p) { return *p; }
    static storage narrow_one(float x) { return x; }
};
struct bf16_format {
    using storage = uint16_t;
    static constexpr attn_dtype type = ATTN_DTYPE_BF16;
    static constexpr int bits = 16;
    static float widen_one(const storage *p) { return convert::bf16_to_f32(*p); }
    static storage narrow_one(float x) { return convert::f32_to_bf16(x); }
};
struct f16_format {
    using storage = uint16_t;
    static constexpr attn_dtype type = ATTN_DTYPE_F16;
    static constexpr int bits = 16;
    static float widen_one(const storage *p) { return convert::f16_to_f32(*p); }
    static storage narrow_one(float x) { return convert::f32_to_f16(x); }
};

// Calls f with the descriptor of format t (f32_format{}, bf16_format{} or f16_format{}) and
// returns what it returns. A quantized type (no descriptor here yet) or a value outside the
// enum (which the API's checks reject before any layer sees it) throws std::invalid_argument
// rather than being read as some other format.
template <class F>
decltype(auto) with_format(attn_dtype t, F &&f) {
    switch (t) {
    case ATTN_DTYPE_F32: return f(f32_format{});
    case ATTN_DTYPE_BF16: return f(bf16_format{});
    case ATTN_DTYPE_F16: return f(f16_format{});
    case ATTN_DTYPE_I8:
    case ATTN_DTYPE_U8:
    case ATTN_DTYPE_I4:
    case ATTN_DTYPE_U4:
    case ATTN_DTYPE_FP8_E4M3:
    case ATTN_DTYPE_FP8_E5M2: break;
    }
    throw std::invalid_argument("attn: element type outside attn_dtype");
}

// Bytes of one element of type t; 0 for a value outside the enum.
constexpr int64_t element_bytes(attn_dtype t) {
    switch (t) {
    case ATTN_DTYPE_F32: return f32_format::bits / 8;
    case ATTN_DTYPE_BF16: return bf16_format::bits / 8;
    case ATTN_DTYPE_F16: return f16_format::bits / 8;
    // The quantized cache types have no descriptor here yet (no reader addresses their
    // elements through this layer; attn_quantize writes them on its own): 0, as outside.
    case ATTN_DTYPE_I8:
    case ATTN_DTYPE_U8:
    case ATTN_DTYPE_I4:
    case ATTN_DTYPE_U4:
    case ATTN_DTYPE_FP8_E4M3:
    case ATTN_DTYPE_FP8_E5M2: return 0;
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
