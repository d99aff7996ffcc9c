// The K/V storage formats and their facts, for every layer (as ggml's type traits): one
// descriptor per format with its storage and its bits. The value formats (f32, bf16, f16: Q,
// outputs, gemm and convert operands, and K/V) carry their scalar widening and rounding (the
// rules of core/convert.hpp); the quantized formats (I8, U8, I4, U4, FP8 E4M3 and E5M2: K and
// V only) carry the raw value of a code, which a scale (and zero point) found through
// format_scales turns into x = scale * (q - zero). with_format() is the one switch from an
// attn_dtype to a value format's descriptor, with_kv_format() to any K/V format's. Every
// reader of a stored row goes through a descriptor: the kernels add the vector operations per
// instruction set (kernels/elements.hpp and kernels/row_reader.hpp: widen or dequantize a
// vector, a row; the dot product, the packing into f32 and bf16-pair panels take the
// descriptor as a template argument), the reference uses the scalar forms (the kernels use
// their own per-ISA forms of these, so that no copy compiled with one ISA's flags is shared
// with another). A switch over attn_dtype names every format and has no default (the library
// compiles with -Wswitch-enum), so a format added to the enum is an error at each place that
// must learn it, never read as another one.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "attn/attn.h"
#include "core/convert.hpp"
#include "core/quantized_elements.hpp"

namespace attn::core {

// Where the scale (and zero point) of a quantized row lives, for one (batch, kv head): element
// c of row j has scale scale[at(j) + c / group], at(j) = j * row_stride (contiguous rows) or
// page(j) * page_stride + (j % page_size) * row_stride (paged, as the rows themselves), and
// its zero point at the same index of zero. A stride of 0 broadcasts. Empty (scale null) for
// f32, bf16 and f16, which store their values.
struct format_scales {
    const float *scale = nullptr;
    const float *zero = nullptr;  // null: zero points of 0
    int64_t row_stride = 0;       // entries between rows of a page
    int64_t page_stride = 0;      // entries between pages (paged caches)
    int64_t group = 0;            // elements per entry (dim when one scale per row)
};

struct f32_format {
    static constexpr bool quantized = false;
    using storage = float;
    static constexpr attn_dtype type = ATTN_DTYPE_F32;
    static constexpr int bits = 32;
    static float widen_one(const storage *p) { return *p; }
    static storage narrow_one(float x) { return x; }
};
struct bf16_format {
    static constexpr bool quantized = false;
    using storage = uint16_t;
    static constexpr attn_dtype type = ATTN_DTYPE_BF16;
    static constexpr int bits = 16;
    static float widen_one(const storage *p) { return convert::bf16_to_f32(*p); }
    static storage narrow_one(float x) { return convert::f32_to_bf16(x); }
};
struct f16_format {
    static constexpr bool quantized = false;
    using storage = uint16_t;
    static constexpr attn_dtype type = ATTN_DTYPE_F16;
    static constexpr int bits = 16;
    static float widen_one(const storage *p) { return convert::f16_to_f32(*p); }
    static storage narrow_one(float x) { return convert::f32_to_f16(x); }
};

// The quantized formats (K and V only): x = scale * (q - zero) for the integer ones, x = scale *
// fp8(q) for FP8. raw_one(row, e) is element e of a row as f32 before its scale: q (integers)
// or fp8(q); element e of a 4-bit row is nibble e % 2 (low first) of byte e / 2. has_zero:
// whether zero points apply (integer types).
struct i8_format {
    static constexpr bool quantized = true, has_zero = true;
    using storage = uint8_t;
    static constexpr attn_dtype type = ATTN_DTYPE_I8;
    static constexpr int bits = 8;
    static float raw_one(const uint8_t *row, int64_t e) { return float(int8_t(row[e])); }
};
struct u8_format {
    static constexpr bool quantized = true, has_zero = true;
    using storage = uint8_t;
    static constexpr attn_dtype type = ATTN_DTYPE_U8;
    static constexpr int bits = 8;
    static float raw_one(const uint8_t *row, int64_t e) { return float(row[e]); }
};
struct i4_format {
    static constexpr bool quantized = true, has_zero = true;
    using storage = uint8_t;
    static constexpr attn_dtype type = ATTN_DTYPE_I4;
    static constexpr int bits = 4;
    static float raw_one(const uint8_t *row, int64_t e) { return float(quant::int4_get(row, e)); }
};
struct u4_format {
    static constexpr bool quantized = true, has_zero = true;
    using storage = uint8_t;
    static constexpr attn_dtype type = ATTN_DTYPE_U4;
    static constexpr int bits = 4;
    static float raw_one(const uint8_t *row, int64_t e) { return float(quant::uint4_get(row, e)); }
};
struct fp8_e4m3_format {
    static constexpr bool quantized = true, has_zero = false;
    using storage = uint8_t;
    static constexpr attn_dtype type = ATTN_DTYPE_FP8_E4M3;
    static constexpr int bits = 8;
    static float raw_one(const uint8_t *row, int64_t e) { return quant::fp8_e4m3_to_f32(row[e]); }
};
struct fp8_e5m2_format {
    static constexpr bool quantized = true, has_zero = false;
    using storage = uint8_t;
    static constexpr attn_dtype type = ATTN_DTYPE_FP8_E5M2;
    static constexpr int bits = 8;
    static float raw_one(const uint8_t *row, int64_t e) { return quant::fp8_e5m2_to_f32(row[e]); }
};

// Element c of a quantized row of format E, its scales at sc (sc[c / group]; zero points at
// ze, null = 0): scale * (raw - zero), in f32.
template <class E>
inline float dequantized_one(const uint8_t *row, int64_t c, const float *sc, const float *ze,
                             int64_t group) {
    const float raw = E::raw_one(row, c);
    const float z = ze ? ze[c / group] : 0.0f;
    return sc[c / group] * (raw - z);
}

// Calls f with the descriptor of value format t (f32_format{}, bf16_format{} or
// f16_format{}: the types of Q, outputs, gemm and convert operands) and returns what it
// returns. A quantized type, or a value outside the enum (which the API's checks reject before
// any layer sees them here), throws std::invalid_argument rather than being read as another.
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
    throw std::invalid_argument("attn: element type outside the value formats");
}

// The same over every K/V format: the value formats and the quantized ones. The readers of
// K and V rows (reference, decoding, packing, padding) dispatch through this one.
template <class F>
decltype(auto) with_kv_format(attn_dtype t, F &&f) {
    switch (t) {
    case ATTN_DTYPE_F32: return f(f32_format{});
    case ATTN_DTYPE_BF16: return f(bf16_format{});
    case ATTN_DTYPE_F16: return f(f16_format{});
    case ATTN_DTYPE_I8: return f(i8_format{});
    case ATTN_DTYPE_U8: return f(u8_format{});
    case ATTN_DTYPE_I4: return f(i4_format{});
    case ATTN_DTYPE_U4: return f(u4_format{});
    case ATTN_DTYPE_FP8_E4M3: return f(fp8_e4m3_format{});
    case ATTN_DTYPE_FP8_E5M2: return f(fp8_e5m2_format{});
    }
    throw std::invalid_argument("attn: element type outside attn_dtype");
}

// Whether t is one of the quantized formats.
inline bool is_quantized(attn_dtype t) {
    return with_kv_format(t, [](auto format) { return decltype(format)::quantized; });
}

// Bits of one element of type t; 0 for a value outside the enum.
constexpr int64_t element_bits(attn_dtype t) {
    switch (t) {
    case ATTN_DTYPE_F32: return f32_format::bits;
    case ATTN_DTYPE_BF16: return bf16_format::bits;
    case ATTN_DTYPE_F16: return f16_format::bits;
    case ATTN_DTYPE_I8: return i8_format::bits;
    case ATTN_DTYPE_U8: return u8_format::bits;
    case ATTN_DTYPE_I4: return i4_format::bits;
    case ATTN_DTYPE_U4: return u4_format::bits;
    case ATTN_DTYPE_FP8_E4M3: return fp8_e4m3_format::bits;
    case ATTN_DTYPE_FP8_E5M2: return fp8_e5m2_format::bits;
    }
    return 0;
}

// Bytes of one element of type t: 0 for the 4-bit types (not a whole byte) and for a value
// outside the enum.
constexpr int64_t element_bytes(attn_dtype t) { return element_bits(t) / 8; }

// Bytes before element i of an array of type t (i even for the 4-bit types).
constexpr int64_t element_offset_bytes(attn_dtype t, int64_t i) { return i * element_bits(t) / 8; }

// Element i of an array of type t at base, as a pointer.
inline const void *element_at(const void *base, attn_dtype t, int64_t i) {
    return static_cast<const char *>(base) + element_offset_bytes(t, i);
}
inline void *element_at(void *base, attn_dtype t, int64_t i) {
    return static_cast<char *>(base) + element_offset_bytes(t, i);
}

}  // namespace attn::core
