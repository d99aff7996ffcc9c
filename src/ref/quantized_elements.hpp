// The quantized element types as scalar facts: FP8 (E4M3, E5M2) <-> f32, 4-bit nibbles, the
// integer ranges, and the scale and zero point of a group (attn_quantize's rules, attn.h).
// Plain integer code on bit patterns, shared by the reference and the kernels of every ISA so
// that both read and write elements the same way (static, like ref/convert.hpp: each ISA's
// translation unit gets its own copy).
//   FP8 E4M3 ("e4m3fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits; subnormals m * 2^-9;
//     no infinities; S.1111.111 is NaN; largest finite 448 (S.1111.110).
//   FP8 E5M2: sign, 5 exponent bits (bias 15), 2 mantissa bits: the top byte of an f16, with
//     its subnormals (m * 2^-16), infinities and NaNs; largest finite 57344.
//   4-bit: element e of an array is in byte e / 2, the low nibble for even e; I4 is a two's
//     complement nibble (-8 .. 7), U4 unsigned (0 .. 15).
#pragma once

#include <cmath>
#include <cstdint>

#include "attn/attn.h"
#include "ref/convert.hpp"

namespace attn::quant {

// ---- FP8 ---------------------------------------------------------------------------------

// The parameters of an FP8 format with M mantissa bits and exponent bias B.
template <int M, int B>
struct fp8_format {
    static constexpr int mantissa_bits = M;
    static constexpr int bias = B;
};
using e4m3 = fp8_format<3, 7>;
using e5m2 = fp8_format<2, 15>;

static inline float fp8_e4m3_to_f32(uint8_t c) {
    const uint32_t sign = uint32_t(c & 0x80u) << 24;
    const uint32_t exp = (c >> 3) & 0xfu, man = c & 0x7u;
    if (exp == 0xf && man == 0x7) return convert::f32_from_bits(sign | 0x7fc00000u);  // NaN
    if (exp == 0) {  // zero or subnormal: man * 2^-9, exact
        const float v = float(man) * 0x1p-9f;
        return sign ? -v : v;
    }
    return convert::f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}

// E5M2 is the top byte of an f16: widening is exact through f16.
static inline float fp8_e5m2_to_f32(uint8_t c) { return convert::f16_to_f32(uint16_t(c) << 8); }

// The largest finite value of each format, and its code without the sign.
static constexpr float fp8_e4m3_max = 448.0f, fp8_e5m2_max = 57344.0f;
static constexpr uint8_t fp8_e4m3_max_code = 0x7e, fp8_e5m2_max_code = 0x7b;

// The nearest value of the format to x, ties to even, saturating: finite values and
// infinities beyond the largest finite value give +-largest; NaN gives the NaN 0x7f (with
// x's sign). Subnormal results are kept; -0 stays -0.
template <class F>
static inline uint8_t f32_to_fp8_saturating(float x, float max_value, uint8_t max_code) {
    constexpr int M = F::mantissa_bits, B = F::bias;
    const uint32_t u = convert::f32_bits(x);
    const uint8_t sign = uint8_t((u >> 24) & 0x80u);
    const uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return uint8_t(sign | 0x7fu);
    const float a = convert::f32_from_bits(mag);
    if (a >= max_value) return uint8_t(sign | max_code);
    const uint32_t min_normal_bits = uint32_t(128 - B) << 23;  // 2^(1 - B)
    if (mag < min_normal_bits) {
        // subnormal range: units of 2^(1 - B - M); scaling by a power of two is exact, and the
        // integer 2^M (a rounding up) is the code of the smallest normal value
        const float units = a * std::ldexp(1.0f, B - 1 + M);
        float q = std::floor(units);
        const float rest = units - q;
        if (rest > 0.5f || (rest == 0.5f && std::fmod(q, 2.0f) == 1.0f)) q += 1.0f;
        return uint8_t(sign | uint8_t(q));
    }
    // normal: round f32's 23 mantissa bits to M, ties to even (a carry moves to the next
    // binade), then rebias the exponent from 127 to B
    const uint32_t drop = 23 - M;
    const uint32_t rounded = mag + ((1u << (drop - 1)) - 1u) + ((mag >> drop) & 1u);
    uint32_t code = (rounded >> drop) - (uint32_t(127 - B) << M);
    if (code > max_code) code = max_code;
    return uint8_t(sign | code);
}

static inline uint8_t f32_to_fp8_e4m3(float x) {
    return f32_to_fp8_saturating<e4m3>(x, fp8_e4m3_max, fp8_e4m3_max_code);
}
static inline uint8_t f32_to_fp8_e5m2(float x) {
    return f32_to_fp8_saturating<e5m2>(x, fp8_e5m2_max, fp8_e5m2_max_code);
}

// ---- 4-bit nibbles -----------------------------------------------------------------------

// Element e of a 4-bit array: its nibble, 0 .. 15.
static inline unsigned nibble_get(const uint8_t *base, int64_t e) {
    const uint8_t byte = base[e / 2];
    return (e % 2 == 0) ? (byte & 0xfu) : unsigned(byte >> 4);
}
static inline int int4_get(const uint8_t *base, int64_t e) {
    const int n = int(nibble_get(base, e));
    return n >= 8 ? n - 16 : n;
}
static inline int uint4_get(const uint8_t *base, int64_t e) { return int(nibble_get(base, e)); }

// Writes the low 4 bits of v (a U4 value, or an I4 value in two's complement) as element e,
// keeping the other nibble of its byte.
static inline void nibble_set(uint8_t *base, int64_t e, int v) {
    uint8_t &byte = base[e / 2];
    const uint8_t n = uint8_t(unsigned(v) & 0xfu);
    byte = (e % 2 == 0) ? uint8_t((byte & 0xf0u) | n) : uint8_t((byte & 0x0fu) | (n << 4));
}

// ---- integer ranges and the parameters of a group ----------------------------------------

// [qmin, qmax] of an integer type (I8, U8, I4, U4).
struct int_range {
    int qmin, qmax;
};
static inline int_range integer_range(attn_dtype t) {
    switch (t) {
    case ATTN_DTYPE_I8: return {-128, 127};
    case ATTN_DTYPE_U8: return {0, 255};
    case ATTN_DTYPE_I4: return {-8, 7};
    case ATTN_DTYPE_U4:
    // not integer types; never asked (every value named: -Wswitch-enum)
    case ATTN_DTYPE_F32:
    case ATTN_DTYPE_BF16:
    case ATTN_DTYPE_F16:
    case ATTN_DTYPE_FP8_E4M3:
    case ATTN_DTYPE_FP8_E5M2: break;
    }
    return {0, 15};  // ATTN_DTYPE_U4
}

// qmax of the symmetric rule: 127 (I8), 7 (I4), 448 (E4M3), 57344 (E5M2).
static inline float symmetric_qmax(attn_dtype t) {
    switch (t) {
    case ATTN_DTYPE_I8: return 127.0f;
    case ATTN_DTYPE_I4: return 7.0f;
    case ATTN_DTYPE_FP8_E4M3: return fp8_e4m3_max;
    case ATTN_DTYPE_FP8_E5M2:
    // no symmetric rule; never asked (every value named: -Wswitch-enum)
    case ATTN_DTYPE_F32:
    case ATTN_DTYPE_BF16:
    case ATTN_DTYPE_F16:
    case ATTN_DTYPE_U8:
    case ATTN_DTYPE_U4: break;
    }
    return fp8_e5m2_max;  // ATTN_DTYPE_FP8_E5M2
}

// The scale and zero point of a group. With scale == 0 every element of the group is q = 0.
// Otherwise an integer element is q = clamp(round_even(x / scale + zero)) (symmetric: zero = 0
// and the clamp is [-qmax, qmax]), an FP8 element the nearest code of x / scale.
struct group_params {
    float scale, zero;
};

// Symmetric: scale = max|x| / qmax (0 if that underflows or the group is zeros).
static inline group_params symmetric_params(float max_abs, attn_dtype t) {
    return {max_abs / symmetric_qmax(t), 0.0f};
}

// Asymmetric over [lo, hi] (hi - lo finite, checked before): [lo, hi] onto [qmin, qmax].
// All equal to c != 0: scale |c|, zero qmin - sign(c), so that x / scale + zero = qmin exactly.
static inline group_params asymmetric_params(float lo, float hi, attn_dtype t) {
    const int_range r = integer_range(t);
    if (lo == hi) {
        if (lo == 0.0f) return {0.0f, 0.0f};
        return {std::fabs(lo), float(r.qmin) - (lo > 0.0f ? 1.0f : -1.0f)};
    }
    const float scale = (hi - lo) / float(r.qmax - r.qmin);
    if (scale == 0.0f) return {0.0f, 0.0f};  // hi - lo underflows once divided
    return {scale, float(r.qmin) - lo / scale};
}

}  // namespace attn::quant
