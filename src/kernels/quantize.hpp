// attn_quantize's kernel: rows of f32, bf16 or f16 into a quantized type, group by group, by
// the rules of attn.h (the scale and zero point of a group and the element codes of
// core/quantized_elements.hpp). Per row: widen it to f32, find each group's range (vector
// min / max, exact in any order), spread each group's scale and zero point over its elements,
// then compute every code with whole vectors (the row's tail padded to a whole vector), so
// that groups of any length vectorise and every element takes the same arithmetic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "attn/attn.h"
#include "kernels/elements.hpp"
#include "core/quantized_elements.hpp"

namespace attn::kernels {

namespace quantize_detail {

// min, max and max |x| of x[0 .. n).
template <class Arch>
inline void group_range(const float *x, int64_t n, float &lo, float &hi, float &max_abs) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int64_t W = fbatch::size;
    lo = hi = x[0];
    max_abs = std::fabs(x[0]);
    int64_t c = 0;
    if (n >= W) {
        fbatch vlo = fbatch::load_unaligned(x), vhi = vlo, vabs = xsimd::abs(vlo);
        for (c = W; c + W <= n; c += W) {
            const fbatch v = fbatch::load_unaligned(x + c);
            vlo = xsimd::min(vlo, v);
            vhi = xsimd::max(vhi, v);
            vabs = xsimd::max(vabs, xsimd::abs(v));
        }
        alignas(64) float l[W], h[W], a[W];
        vlo.store_aligned(l);
        vhi.store_aligned(h);
        vabs.store_aligned(a);
        for (int64_t i = 0; i < W; ++i) {
            lo = std::min(lo, l[i]);
            hi = std::max(hi, h[i]);
            max_abs = std::max(max_abs, a[i]);
        }
    }
    for (; c < n; ++c) {
        lo = std::min(lo, x[c]);
        hi = std::max(hi, x[c]);
        max_abs = std::max(max_abs, std::fabs(x[c]));
    }
}

// The FP8 codes (format F, largest finite max_value) of v, nearest with ties to even and
// saturating: |v| rounded to a multiple of its ulp by adding and removing a power of two C
// (C's ulp in f32 is the FP8 ulp of |v|, so the hardware's round-to-nearest-even rounds), then
// the result's f32 bits rebiased (normal) or scaled to units of the smallest subnormal.
template <class Arch, class F>
inline xsimd::batch<int32_t, Arch> fp8_codes(const xsimd::batch<float, Arch> &v, float max_value) {
    using fbatch = xsimd::batch<float, Arch>;
    using ibatch = xsimd::batch<int32_t, Arch>;
    constexpr int M = F::mantissa_bits, B = F::bias;
    const fbatch a = xsimd::min(xsimd::abs(v), fbatch(max_value));
    const ibatch exponent =
        xsimd::max(xsimd::bitwise_cast<ibatch>(a) & ibatch(0x7f800000), ibatch((128 - B) << 23));
    const fbatch c = xsimd::bitwise_cast<fbatch>(exponent + ibatch((23 - M) << 23));
    const fbatch r = (a + c) - c;
    const ibatch r_bits = xsimd::bitwise_cast<ibatch>(r);  // r >= 0: its bits order as r does
    const ibatch normal = (r_bits >> (23 - M)) - ibatch((127 - B) << M);
    const ibatch subnormal = xsimd::to_int(r * fbatch(std::ldexp(1.0f, B - 1 + M)));
    const ibatch code = xsimd::select(r_bits < ibatch((128 - B) << 23), subnormal, normal);
    return code | ((xsimd::bitwise_cast<ibatch>(v) >> 24) & ibatch(0x80));
}

// codes[0 .. n) of the row x with per-element scales s and zero points z (n a multiple of the
// vector length): a scale of 0 gives code 0.
template <class Arch>
inline void row_codes(const float *x, const float *s, const float *z, int64_t n, attn_dtype t,
                      bool asymmetric, int32_t *codes) {
    using fbatch = xsimd::batch<float, Arch>;
    using ibatch = xsimd::batch<int32_t, Arch>;
    constexpr int64_t W = fbatch::size;
    const bool fp8 = t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2;
    const quant::int_range range = fp8 ? quant::int_range{0, 0} : quant::integer_range(t);
    const fbatch qlo(asymmetric ? float(range.qmin) : -float(range.qmax));
    const fbatch qhi(float(range.qmax));
    const fbatch round_even(12582912.0f);  // 1.5 * 2^23: its ulp is 1
    for (int64_t c = 0; c < n; c += W) {
        const fbatch scale = fbatch::load_unaligned(s + c);
        fbatch v = fbatch::load_unaligned(x + c) / scale;
        if (asymmetric) v = v + fbatch::load_unaligned(z + c);
        ibatch code;
        if (t == ATTN_DTYPE_FP8_E4M3) {
            code = fp8_codes<Arch, quant::e4m3>(v, quant::fp8_e4m3_max);
        } else if (t == ATTN_DTYPE_FP8_E5M2) {
            code = fp8_codes<Arch, quant::e5m2>(v, quant::fp8_e5m2_max);
        } else {  // clamp, then round to an integer (the two commute: the bounds are integers)
            const fbatch w = xsimd::min(xsimd::max(v, qlo), qhi);
            code = xsimd::to_int((w + round_even) - round_even);
        }
        // scales are never -0: a scale of 0 has the bits 0
        const ibatch scale_bits = xsimd::bitwise_cast<ibatch>(scale);
        xsimd::select(scale_bits == ibatch(0), ibatch(0), code).store_unaligned(codes + c);
    }
}

// Stores codes[0 .. n) as elements 0 .. n - 1 of a row of type t (4-bit: n even, the row
// starting on a whole byte).
inline void store_codes(const int32_t *codes, int64_t n, attn_dtype t, void *row) {
    uint8_t *out = static_cast<uint8_t *>(row);
    if (t == ATTN_DTYPE_I4 || t == ATTN_DTYPE_U4) {
        for (int64_t c = 0; c < n; c += 2)
            out[c / 2] = uint8_t((codes[c] & 0xf) | ((codes[c + 1] & 0xf) << 4));
    } else {
        for (int64_t c = 0; c < n; ++c) out[c] = uint8_t(codes[c]);  // I8: two's complement
    }
}

}  // namespace quantize_detail

// attn_quantize over rows 0 .. rows - 1 (arguments validated, every value finite, every
// group's max - min finite). scratch, codes: quantize_scratch_floats / _codes(dim, W).
template <class Arch>
void quantize_rows(int64_t rows, int64_t dim, const void *src, attn_dtype src_type,
                   int64_t src_stride, void *dst, attn_dtype dst_type, int64_t dst_stride,
                   float *scale, float *zero, int64_t scale_stride, int64_t group,
                   float *scratch, int32_t *codes) {
    using namespace quantize_detail;
    constexpr int64_t W = xsimd::batch<float, Arch>::size;
    const int64_t g_len = group == 0 ? dim : group;
    const int64_t padded = (dim + W - 1) / W * W;
    float *x = scratch, *s = x + padded, *z = s + padded;
    const bool asymmetric = zero != nullptr;
    std::fill(x + dim, x + padded, 0.0f);  // the padding: x 0, scale 0 -> code 0, never stored
    std::fill(s + dim, s + padded, 0.0f);
    std::fill(z + dim, z + padded, 0.0f);
    const int64_t src_bytes = element_bytes(src_type);
    const int64_t dst_bits = (dst_type == ATTN_DTYPE_I4 || dst_type == ATTN_DTYPE_U4) ? 4 : 8;
    for (int64_t r = 0; r < rows; ++r) {
        widen_row<Arch>(static_cast<const char *>(src) + r * src_stride * src_bytes, src_type,
                        dim, x);
        for (int64_t g = 0; g * g_len < dim; ++g) {
            const int64_t c0 = g * g_len;
            float lo, hi, max_abs;
            group_range<Arch>(x + c0, g_len, lo, hi, max_abs);
            const quant::group_params p = asymmetric
                                              ? quant::asymmetric_params(lo, hi, dst_type)
                                              : quant::symmetric_params(max_abs, dst_type);
            std::fill(s + c0, s + c0 + g_len, p.scale);
            std::fill(z + c0, z + c0 + g_len, p.zero);
            scale[r * scale_stride + g] = p.scale;
            if (asymmetric) zero[r * scale_stride + g] = p.zero;
        }
        row_codes<Arch>(x, s, z, padded, dst_type, asymmetric, codes);
        store_codes(codes, dim, dst_type,
                    static_cast<char *>(dst) + r * dst_stride * dst_bits / 8);
    }
}

}  // namespace attn::kernels
