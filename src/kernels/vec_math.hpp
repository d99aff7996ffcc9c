// Vector math for the kernels, templated on the xsimd Arch: a fast exp, horizontal
// reductions, and the few places where xsimd versions differ (kept here, and only here).
//
// Everything in this header is a template on Arch: it is compiled once per ISA inside
// src/kernels/arch/<isa>.cpp with that ISA's flags. A non-template inline function here
// would be compiled with several different flag sets under one name, and the linker could
// keep the AVX-512 copy for the whole program (ODR); so none are allowed, nor calls to
// out-of-line std:: functions.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

// The exponentials and their helpers are inlined into every kernel: left to the compiler, a
// kernel with many instantiations beside it may get a call instead, which spills the vector
// arguments through memory (softmax on avx2 ran 1.35x slower so).
#ifndef ATTN_ALWAYS_INLINE
#define ATTN_ALWAYS_INLINE __attribute__((always_inline)) inline
#endif

ATTN_KERNELS_BEGIN

// ---- xsimd compat ----------------------------------------------------------------------
// xsimd 8.1 (Debian 12) calls the horizontal sum `hadd`; 9.0 renamed it `reduce_add`.
// Neither 8.1 nor 9.0 has a horizontal max.

template <class Arch>
inline float reduce_add(const xsimd::batch<float, Arch> &x) {
#if XSIMD_VERSION_MAJOR >= 9
    return xsimd::reduce_add(x);
#else
    return xsimd::hadd(x);
#endif
}

namespace detail {
// Lane i reads lane i ^ Step: one step of a butterfly reduction across the lanes.
template <unsigned Step>
struct xor_lanes {
    static constexpr unsigned get(unsigned i, unsigned) { return i ^ Step; }
};

template <class Arch, unsigned Step>
inline xsimd::batch<float, Arch> butterfly_max(xsimd::batch<float, Arch> x) {
    using index_batch = xsimd::batch<uint32_t, Arch>;
    if constexpr (Step == 0) {
        return x;
    } else {
        auto partner =
            xsimd::swizzle(x, xsimd::make_batch_constant<index_batch, xor_lanes<Step>>());
        return butterfly_max<Arch, Step / 2>(xsimd::max(x, partner));
    }
}
}  // namespace detail

// Every lane holds max_i x[i]. NaN lanes may or may not win (x86 max semantics); callers
// that must propagate NaN do so through their sums, not through the max.
template <class Arch>
inline xsimd::batch<float, Arch> reduce_max_broadcast(const xsimd::batch<float, Arch> &x) {
    constexpr unsigned lanes = static_cast<unsigned>(xsimd::batch<float, Arch>::size);
    return detail::butterfly_max<Arch, lanes / 2>(x);
}

template <class Arch>
inline float reduce_max(const xsimd::batch<float, Arch> &x) {
    return reduce_max_broadcast(x).get(0);
}

// The W lane sums of W vectors at once: element n of the result is the sum of a[n]'s lanes
// (W = lanes of the batch). A transposing reduction: pairs, then quads within each 128-bit
// lane, then across the lanes, 15 adds and 30 shuffles on AVX-512 where 16 separate
// horizontal sums cost several times that. The order of the additions is fixed per ISA.
// (transpose_sum_inlined: the same, always inlined, for callers whose accumulators must stay
// in registers; transpose_sum leaves the choice to the compiler.)
template <class Arch>
__attribute__((always_inline)) inline xsimd::batch<float, Arch> transpose_sum_inlined(
    const xsimd::batch<float, Arch> *a) {
    using fbatch = xsimd::batch<float, Arch>;
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
        __m512 t[8], u[4], v[2];
        for (int k = 0; k < 8; ++k)  // per 128-bit lane: [a2k, a2k+1, a2k, a2k+1] halves
            t[k] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]),
                                 _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]));
        for (int k = 0; k < 4; ++k)  // per 128-bit lane q: the lane-q sums of a4k .. a4k+3
            u[k] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0x44),
                                 _mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0xEE));
        for (int j = 0; j < 2; ++j)  // lanes (0+1, 2+3) of u[2j], then of u[2j+1]
            v[j] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * j], u[2 * j + 1], 0x88),
                                 _mm512_shuffle_f32x4(u[2 * j], u[2 * j + 1], 0xDD));
        return _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x88),
                             _mm512_shuffle_f32x4(v[0], v[1], 0xDD));
    } else if constexpr (std::is_base_of_v<xsimd::avx, Arch>) {
        __m256 u[2];
        for (int k = 0; k < 2; ++k)  // per 128-bit lane q: the lane-q sums of a4k .. a4k+3
            u[k] = _mm256_hadd_ps(_mm256_hadd_ps(a[4 * k], a[4 * k + 1]),
                                  _mm256_hadd_ps(a[4 * k + 2], a[4 * k + 3]));
        return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20),
                             _mm256_permute2f128_ps(u[0], u[1], 0x31));
    } else if constexpr (fbatch::size == 4) {
        return _mm_hadd_ps(_mm_hadd_ps(a[0], a[1]), _mm_hadd_ps(a[2], a[3]));
    } else {
        alignas(64) float sums[fbatch::size];
        for (size_t n = 0; n < fbatch::size; ++n) sums[n] = reduce_add<Arch>(a[n]);
        return fbatch::load_aligned(sums);
    }
}

template <class Arch>
inline xsimd::batch<float, Arch> transpose_sum(const xsimd::batch<float, Arch> *a) {
    return transpose_sum_inlined<Arch>(a);
}

// max(lo, min(hi, x)), and NaN when x is NaN: x86 min/max return their second operand when
// either is NaN, and xsimd passes its arguments through in order.
template <class Arch>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> clamp_keep_nan(const xsimd::batch<float, Arch> &x,
                                                            float lo, float hi) {
    using fbatch = xsimd::batch<float, Arch>;
    return xsimd::max(fbatch(lo), xsimd::min(fbatch(hi), x));
}

// ---- exp ----------------------------------------------------------------------------------
// exp(x) = 2^n * exp(r), x = n ln2 + r, n = round(x / ln2), |r| <= ln2/2.
// ln2 is split into a part with 9 significant bits (n * ln2_hi is exact for |n| < 2^15,
// even without FMA) and the remainder, so r is accurate to a few units of 2^-24 |r|.
// exp(r) = 1 + r + r^2 g(r), g of degree 4 the Chebyshev fit of (exp(r) - 1 - r) / r^2 on
// [-ln2/2, ln2/2] (max error 6.5e-8 on g, under 0.1 ulp of exp(r)), all in one Horner
// chain of six multiply-adds.
// 2^n is applied so that subnormal results are rounded once (not flushed) and large ones
// overflow to +inf; x is clamped to [-104, 89] for that: exp(-104) < 2^-150 rounds to +0,
// exp(89) > FLT_MAX. NaN propagates; -inf gives +0, +inf gives +inf.
namespace detail {
// exp(r) for x = n ln2 + r; n is returned through `n`.
template <class Arch>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> exp_of_remainder(const xsimd::batch<float, Arch> &x,
                                                              xsimd::batch<float, Arch> &n) {
    using fbatch = xsimd::batch<float, Arch>;
    n = xsimd::nearbyint(x * fbatch(1.44269504088896341f));
    fbatch r = xsimd::fnma(n, fbatch(0.693359375f), x);
    r = xsimd::fnma(n, fbatch(-2.12194440e-4f), r);
    fbatch p(1.3926176e-3f);
    p = xsimd::fma(p, r, fbatch(8.3631731e-3f));
    p = xsimd::fma(p, r, fbatch(4.1666555e-2f));
    p = xsimd::fma(p, r, fbatch(1.6666577e-1f));
    p = xsimd::fma(p, r, fbatch(0.5f));
    p = xsimd::fma(p, r, fbatch(1.0f));
    return xsimd::fma(p, r, fbatch(1.0f));
}
// y * 2^n for integral n with |n| <= 126: 2^n is a normal float, built from its exponent bits.
template <class Arch>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> times_pow2_normal(const xsimd::batch<float, Arch> &y,
                                                               const xsimd::batch<float, Arch> &n) {
    using ibatch = xsimd::batch<int32_t, Arch>;
    return y * xsimd::bitwise_cast<xsimd::batch<float, Arch>>(
                   (xsimd::batch_cast<int32_t>(n) + ibatch(127)) << 23);
}

// y * 2^n for integral n in [-152, 129]: 2^n = 2^h * 2^(n-h), h = floor(n/2), both factors
// normal floats, so the first product is exact and only the second rounds (a subnormal
// result is rounded once, not flushed; a large one overflows to +inf).
template <class Arch>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> times_pow2_wide(const xsimd::batch<float, Arch> &y,
                                                             const xsimd::batch<float, Arch> &n) {
    using fbatch = xsimd::batch<float, Arch>;
    using ibatch = xsimd::batch<int32_t, Arch>;
    const ibatch n_int = xsimd::batch_cast<int32_t>(n);
    const ibatch h = n_int >> 1;
    const fbatch scale_h = xsimd::bitwise_cast<fbatch>((h + ibatch(127)) << 23);
    const fbatch scale_rest = xsimd::bitwise_cast<fbatch>((n_int - h + ibatch(127)) << 23);
    return (y * scale_h) * scale_rest;
}
}  // namespace detail

template <class Arch>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> exp(const xsimd::batch<float, Arch> &x) {
    using fbatch = xsimd::batch<float, Arch>;
    fbatch n;
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
        // scalef computes y * 2^n with one rounding over the whole range.
        const fbatch y = detail::exp_of_remainder(clamp_keep_nan(x, -104.0f, 89.0f), n);
        return fbatch(_mm512_scalef_ps(y, n));
    } else {
        // Common case, |x| <= 87 so |n| <= 126: 2^n is a normal float, built from its
        // exponent bits. (NaN takes this path too and stays NaN.)
        if (!xsimd::any(xsimd::abs(x) > fbatch(87.0f))) {
            return detail::times_pow2_normal(detail::exp_of_remainder(x, n), n);
        }
        // n in [-150, 128] here
        const fbatch y = detail::exp_of_remainder(clamp_keep_nan(x, -104.0f, 89.0f), n);
        return detail::times_pow2_wide(y, n);
    }
}

// ---- exp2 --------------------------------------------------------------------------------
// 2^x = 2^floor(x) * 2^f, f = x - floor(x) in [0, 1] (1 only by rounding, for tiny negative x),
// 2^f by a degree-6 polynomial fitted for relative error on [0, 1] (1.9e-9, about 1.5 ulp
// after float evaluation). Cheaper than exp by the range reduction: x needs no split of ln 2,
// and on AVX-512 one instruction (vreduceps) gives f and another (vscalefps) applies
// 2^floor(x), rounding subnormal results once. NaN propagates; -inf gives +0; x > 128, +inf.
// The fused attention's softmax uses it as e^y = 2^(y log2 e): at most ~1 ulp of y is lost to
// the product, the same order as rounding y = s - m itself.
namespace detail {
template <class Arch>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> exp2_fraction(const xsimd::batch<float, Arch> &f) {
    using fbatch = xsimd::batch<float, Arch>;
    fbatch p(2.17022534e-4f);
    p = xsimd::fma(p, f, fbatch(1.24396884e-3f));
    p = xsimd::fma(p, f, fbatch(9.67884064e-3f));
    p = xsimd::fma(p, f, fbatch(5.54833412e-2f));
    p = xsimd::fma(p, f, fbatch(2.40229830e-1f));
    p = xsimd::fma(p, f, fbatch(6.93147004e-1f));
    return xsimd::fma(p, f, fbatch(1.0f));
}
}  // namespace detail

namespace detail {
// 2^x on AVX-512 from 2^f, f = x - floor(x), given by `fraction`: f by vreduceps (imm 0x09:
// round down, no precision exception; f = 0 for +-inf, so -inf yields p(0) * 2^-inf = +0),
// 2^floor(x) applied by vscalefps with one rounding.
template <class Arch, class Fraction>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> exp2_by_parts(const xsimd::batch<float, Arch> &x,
                                                           Fraction fraction) {
    using fbatch = xsimd::batch<float, Arch>;
    const fbatch f(_mm512_reduce_ps(x, 0x09));
    return fbatch(_mm512_scalef_ps(fraction(f), x));
}
}  // namespace detail

template <class Arch>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> exp2(const xsimd::batch<float, Arch> &x) {
    using fbatch = xsimd::batch<float, Arch>;
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
        return detail::exp2_by_parts<Arch>(x, [](const fbatch &f) { return detail::exp2_fraction<Arch>(f); });
    } else {
        // Common case, -126 <= x <= 126: 2^floor(x) is a normal float built from its exponent
        // bits. (NaN takes this path too and stays NaN.)
        if (!xsimd::any(xsimd::abs(x) > fbatch(126.0f))) {
            const fbatch n = xsimd::floor(x);
            return detail::times_pow2_normal(detail::exp2_fraction<Arch>(x - n), n);
        }
        const fbatch y = clamp_keep_nan(x, -152.0f, 129.0f);
        const fbatch n = xsimd::floor(y);
        return detail::times_pow2_wide(detail::exp2_fraction<Arch>(y - n), n);
    }
}

// ---- exp for P rounded to bf16 -------------------------------------------------------------
// e^x = 2^(x log2 e) to within 3.0e-6 + 7.5e-8 |x| relative (the polynomial's error, and the
// rounding of x log2 e and of log2 e itself: 4.5e-6 at |x| = 20, where P is already below
// 2^-28), for the pair paths' P, which is rounded to bf16 (a relative half unit of 2^-9) before
// P V: several hundred times finer than that rounding, and the row sums formed from the same
// values carry it unchanged. exp2's way (exp2_by_parts) with 2^f on [0, 1) a degree-4
// polynomial with p(0) = 1 (fitted for relative error; 2.98e-6 in float evaluation), so e^0 = 1
// exactly: the row's largest score gives P = 1. Four multiply-adds fewer than exp's, and no
// clamping (subnormal results rounded, not flushed; -inf gives +0, NaN stays NaN). Without
// AVX-512 (no pair path there) it is exp itself.
// exp2_for_bf16(y): the same 2^y, for callers that form y = x log2 e themselves (AVX-512 only).
template <class Arch>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> exp2_for_bf16(const xsimd::batch<float, Arch> &y) {
    using fbatch = xsimd::batch<float, Arch>;
    static_assert(std::is_base_of_v<xsimd::avx512f, Arch>, "vreduceps and vscalefps");
    return detail::exp2_by_parts<Arch>(y, [](const fbatch &f) {
        fbatch p(1.3426385e-2f);
        p = xsimd::fma(p, f, fbatch(5.2242957e-2f));
        p = xsimd::fma(p, f, fbatch(2.4127997e-1f));
        p = xsimd::fma(p, f, fbatch(6.9304490e-1f));
        return xsimd::fma(p, f, fbatch(1.0f));
    });
}

template <class Arch>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> exp_for_bf16(const xsimd::batch<float, Arch> &x) {
    using fbatch = xsimd::batch<float, Arch>;
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
        return exp2_for_bf16<Arch>(x * fbatch(1.44269504088896341f));
    } else {
        return exp<Arch>(x);
    }
}

// ---- tanh ---------------------------------------------------------------------------------
// The score softcap, c tanh(s / c). Two pieces, split at |x| = 0.625:
//   |x| <  0.625: tanh x = x + x^3 g(x^2), g of degree 4 the weighted least-squares fit of
//                 (tanh x - x) / x^3 on [0, 0.39] (0.25 ulp of tanh before rounding); x^3 g is
//                 at most 0.14 x, so its rounding errors weigh little. Odd in x: -0 stays -0,
//                 a subnormal x gives x.
//   |x| >= 0.625: tanh |x| = 1 - 2 / (e^(2|x|) + 1): tanh >= 0.55 there, so the cancellation
//                 costs at most a factor 0.45/0.55 on exp's 2 ulp; e^(2|x|) = +inf (|x| > 44,
//                 +-inf included) gives exactly +-1.
// Bound: 3 ulp everywhere (tests/test_vec_math.cpp measures it against std::tanh in double on
// every ISA, special values included); NaN propagates.
template <class Arch>
inline xsimd::batch<float, Arch> tanh(const xsimd::batch<float, Arch> &x) {
    using fbatch = xsimd::batch<float, Arch>;
    const fbatch ax = xsimd::abs(x);
    const fbatch y = x * x;
    fbatch g(-0.005720844026654959f);
    g = xsimd::fma(g, y, fbatch(0.020646171644330025f));
    g = xsimd::fma(g, y, fbatch(-0.053738947957754135f));
    g = xsimd::fma(g, y, fbatch(0.13331381976604462f));
    g = xsimd::fma(g, y, fbatch(-0.33333277702331543f));
    // x + x^3 g, and x itself at +-0 (the sum would turn -0 into +0)
    const fbatch small = xsimd::select(x == fbatch(0.0f), x, xsimd::fma(x * y, g, x));
    // softcapped scores mostly stay below 0.625 softcap: then exp and the division are not needed
    if (!xsimd::any(ax >= fbatch(0.625f)) && !xsimd::any(xsimd::isnan(x))) return small;
    const fbatch big = fbatch(1.0f) - fbatch(2.0f) / (exp<Arch>(ax + ax) + fbatch(1.0f));
    const fbatch signed_big = xsimd::select(x < fbatch(0.0f), -big, big);
    return xsimd::select(ax < fbatch(0.625f), small, signed_big);
}

// y[i] = f(x[i]) for i < count, f a batch function; the tail is handled with a partial
// load/store. x == y is allowed.
template <class Arch, class F>
void map_array(const float *x, float *y, int64_t count, F f) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int64_t lanes = fbatch::size;
    int64_t i = 0;
    for (; i + lanes <= count; i += lanes) f(fbatch::load_unaligned(x + i)).store_unaligned(y + i);
    if (i < count) {
        alignas(64) float tail[lanes] = {};
        for (int64_t j = 0; j < count - i; ++j) tail[j] = x[i + j];
        f(fbatch::load_aligned(tail)).store_aligned(tail);
        for (int64_t j = 0; j < count - i; ++j) y[i + j] = tail[j];
    }
}

// y = exp(x), 2^x and exp_for_bf16(x) elementwise: the backward's exp, and the tests' window
// on the functions on every ISA through the kernel table.
template <class Arch>
void exp_array(const float *x, float *y, int64_t count) {
    map_array<Arch>(x, y, count, [](const xsimd::batch<float, Arch> &v) { return exp<Arch>(v); });
}

template <class Arch>
void exp2_array(const float *x, float *y, int64_t count) {
    map_array<Arch>(x, y, count, [](const xsimd::batch<float, Arch> &v) { return exp2<Arch>(v); });
}

template <class Arch>
void exp_for_bf16_array(const float *x, float *y, int64_t count) {
    map_array<Arch>(x, y, count,
                    [](const xsimd::batch<float, Arch> &v) { return exp_for_bf16<Arch>(v); });
}

// y = tanh(x) elementwise: the softcap's tanh, for the tests (and the backward's softcap).
template <class Arch>
void tanh_array(const float *x, float *y, int64_t count) {
    map_array<Arch>(x, y, count, [](const xsimd::batch<float, Arch> &v) { return tanh<Arch>(v); });
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
