// The oracle of attn_quantize for tests/test_quantize.cpp, written from attn.h's rules with
// f32 arithmetic only (the rules are f32 steps) and independently of the library: FP8 codes
// found by searching the table of every FP8 value built from its fields, integers rounded by
// comparing with the halfway point, 4-bit codes packed low nibble first.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attn/attn.h"

namespace attn_test::quantize_oracle {

inline bool is_fp8(attn_dtype t) { return t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2; }
inline bool is_4bit(attn_dtype t) { return t == ATTN_DTYPE_I4 || t == ATTN_DTYPE_U4; }

// The value of an FP8 code from its fields (NaN for the NaN codes, inf for E5M2's infinities).
inline float fp8_value(int code, attn_dtype t) {
    const int m_bits = t == ATTN_DTYPE_FP8_E4M3 ? 3 : 2, bias = t == ATTN_DTYPE_FP8_E4M3 ? 7 : 15;
    const int e_max = (1 << (7 - m_bits)) - 1;
    const int e = (code & 0x7f) >> m_bits, m = code & ((1 << m_bits) - 1);
    const float sign = (code & 0x80) ? -1.0f : 1.0f;
    if (t == ATTN_DTYPE_FP8_E4M3 && e == e_max && m == (1 << m_bits) - 1) return NAN;
    if (t == ATTN_DTYPE_FP8_E5M2 && e == e_max) return m == 0 ? sign * INFINITY : NAN;
    if (e == 0) return sign * std::ldexp(float(m), 1 - bias - m_bits);
    return sign * std::ldexp(float((1 << m_bits) + m), e - bias - m_bits);
}

// The nearest finite FP8 value to v, ties to the even code, saturating; -0 keeps its sign.
// The two neighbours of |v| are close enough that both differences are exact in f32.
inline int fp8_nearest(float v, attn_dtype t) {
    const int sign = std::signbit(v) ? 0x80 : 0;
    const float a = std::fabs(v);
    int below = 0;  // the largest positive finite code with value <= a
    for (int c = 1; c < 0x80; ++c) {
        const float x = fp8_value(c, t);
        if (std::isfinite(x) && x <= a) below = c;
    }
    const float lo = fp8_value(below, t), hi = fp8_value(below + 1, t);
    if (lo == a || !std::isfinite(hi)) return sign | below;  // exact, or saturated at the max
    const float d_lo = a - lo, d_hi = hi - a;
    if (d_lo < d_hi || (d_lo == d_hi && below % 2 == 0)) return sign | below;
    return sign | (below + 1);
}

// x rounded to an integer, ties to even, by comparing with the halfway point.
inline float round_half_even(float x) {
    const float f = std::floor(x), rest = x - f;
    if (rest > 0.5f) return f + 1.0f;
    if (rest < 0.5f) return f;
    return std::fmod(f, 2.0f) == 0.0f ? f : f + 1.0f;
}

struct int_type_range {
    float qmin, qmax;
};
inline int_type_range range_of(attn_dtype t) {
    switch (t) {
    case ATTN_DTYPE_I8: return {-128, 127};
    case ATTN_DTYPE_U8: return {0, 255};
    case ATTN_DTYPE_I4: return {-8, 7};
    case ATTN_DTYPE_U4: return {0, 15};
    case ATTN_DTYPE_FP8_E4M3: return {-448, 448};
    default: return {-57344, 57344};
    }
}

// What attn_quantize writes: one code per element (an int; FP8: the byte), scales, zeros.
struct quantized {
    std::vector<int> codes;  // rows x dim, dense
    std::vector<float> scale, zero;  // rows x groups, dense
};

inline quantized oracle(const std::vector<float> &x, int64_t rows, int64_t dim, attn_dtype t,
                 bool asymmetric, int64_t group) {
    const int64_t g_len = group == 0 ? dim : group, groups = dim / g_len;
    const int_type_range r = range_of(t);
    quantized out{std::vector<int>(size_t(rows * dim)), std::vector<float>(size_t(rows * groups)),
                  std::vector<float>(size_t(rows * groups))};
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t g = 0; g < groups; ++g) {
            const float *v = &x[size_t(i * dim + g * g_len)];
            float lo = v[0], hi = v[0], max_abs = 0.0f;
            for (int64_t c = 0; c < g_len; ++c) {
                lo = std::min(lo, v[c]);
                hi = std::max(hi, v[c]);
                max_abs = std::max(max_abs, std::fabs(v[c]));
            }
            float scale, zero = 0.0f;
            if (!asymmetric) {
                scale = max_abs / r.qmax;
            } else if (lo == hi) {
                scale = std::fabs(lo);
                zero = lo == 0.0f ? 0.0f : r.qmin - (lo > 0.0f ? 1.0f : -1.0f);
            } else {
                scale = (hi - lo) / (r.qmax - r.qmin);
                zero = scale == 0.0f ? 0.0f : r.qmin - lo / scale;
            }
            out.scale[size_t(i * groups + g)] = scale;
            out.zero[size_t(i * groups + g)] = zero;
            for (int64_t c = 0; c < g_len; ++c) {
                int &code = out.codes[size_t(i * dim + g * g_len + c)];
                if (scale == 0.0f) {
                    code = 0;
                } else if (is_fp8(t)) {
                    code = fp8_nearest(v[c] / scale, t);
                } else {
                    const float y = asymmetric ? v[c] / scale + zero : v[c] / scale;
                    const float lo_q = asymmetric ? r.qmin : -r.qmax;
                    code = int(std::min(std::max(round_half_even(y), lo_q), r.qmax));
                }
            }
        }
    return out;
}

// The bytes of a dense row-major array of codes of type t (4-bit: low nibble first).
inline std::vector<uint8_t> pack(const std::vector<int> &codes, attn_dtype t) {
    if (!is_4bit(t)) {
        std::vector<uint8_t> b(codes.size());
        for (size_t i = 0; i < codes.size(); ++i) b[i] = uint8_t(codes[i] & 0xff);
        return b;
    }
    std::vector<uint8_t> b(codes.size() / 2);
    for (size_t i = 0; i < b.size(); ++i)
        b[i] = uint8_t((codes[2 * i] & 0xf) | ((codes[2 * i + 1] & 0xf) << 4));
    return b;
}

}  // namespace attn_test::quantize_oracle
