// Row softmax, templated on the xsimd Arch: y[i,:] = softmax(scale * x[i,:]) for a block of
// rows, with the semantics of the reference (src/ref/softmax.cpp; docs/validation.md, "Special
// values"): the weights are those of the products scale * x, whatever the sign of scale: a
// product of -inf weighs 0 and a row of them becomes zeros; a NaN product (a NaN in x, or
// 0 * inf) makes the whole row NaN; no overflow
// for any finite magnitude, because every exponent is scale * x - max <= 0; and when
// scale * x overflows float, the weights are those of the exact products (overflow_row).
//
// Layout: row i of x starts at x + i*ldx, row i of y at y + i*ldy, `cols` floats each.
// x == y with ldx == ldy (in place) is allowed: each element is read before it is written,
// and x is not written before the max is known, so a row that overflows still has its x.
//
// Three passes per row: s = scale*x (stored in y unless in place) and its max; then
// exp(s - max) into y, and the sum; then y times 1/sum. (A one-pass "online" max and sum,
// rescaling the running sum whenever the max grows, needs exp twice per element; on rows
// that stay in cache the exp dominates, so the three-pass form is the faster one: 2.2-2.8x
// in our measurements.)
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "kernels/vec_math.hpp"

ATTN_KERNELS_BEGIN

namespace softmax_detail {

// scale * x rounded to float, and kept rounded: the empty asm statement hides the product
// from the optimiser, which would otherwise fuse it with the subtraction of the max that
// follows into one multiply-add (GCC contracts by default in C++). The fused form uses the
// exact product, while the max came from rounded ones, so at the maximum the exponent would
// be the product's rounding error instead of 0; for |scale*x| ~ 1e30 that is +-1e23, and
// exp turns the row into inf or 0 (then NaN). The statement emits no instruction.
template <class Arch>
inline xsimd::batch<float, Arch> rounded_product(const xsimd::batch<float, Arch> &scale,
                                                 const xsimd::batch<float, Arch> &x) {
    typename xsimd::batch<float, Arch>::register_type p = scale * x;
    asm("" : "+x"(p));
    return p;
}

// Loads cols - j (< lanes) floats of a row tail, filling the rest with `fill`.
template <class Arch>
inline xsimd::batch<float, Arch> load_tail(const float *row, int64_t j, int64_t cols,
                                           float fill) {
    using fbatch = xsimd::batch<float, Arch>;
    alignas(64) float tail[fbatch::size];
    for (int64_t t = 0; t < int64_t(fbatch::size); ++t) tail[t] = j + t < cols ? row[j + t] : fill;
    return fbatch::load_aligned(tail);
}

// The products fl(scale * x) of a row tail, -inf (weight 0) in the lanes past the row: the
// fill is applied to the products, since scale * (-inf) is +inf or NaN for scale <= 0.
template <class Arch>
inline xsimd::batch<float, Arch> tail_products(const xsimd::batch<float, Arch> &scale,
                                               const float *row, int64_t j, int64_t cols) {
    using fbatch = xsimd::batch<float, Arch>;
    alignas(64) float live[fbatch::size];
    for (int64_t t = 0; t < int64_t(fbatch::size); ++t) live[t] = j + t < cols ? 1.0f : 0.0f;
    return xsimd::select(fbatch::load_aligned(live) != fbatch(0.0f),
                         rounded_product(scale, load_tail<Arch>(row, j, cols, 0.0f)),
                         fbatch(-std::numeric_limits<float>::infinity()));
}

template <class Arch>
inline void store_tail(const xsimd::batch<float, Arch> &v, float *row, int64_t j, int64_t cols) {
    alignas(64) float tail[xsimd::batch<float, Arch>::size];
    v.store_aligned(tail);
    for (int64_t t = 0; j + t < cols; ++t) row[j + t] = tail[t];
}

// Writes `value` to cols floats of a row.
template <class Arch>
inline void fill_row(float *row, int64_t cols, float value) {
    for (int64_t j = 0; j < cols; ++j) row[j] = value;
}

// Weights of a row whose largest fl(scale * x_j) is +inf or -inf (NaN rows excluded):
// some product overflowed float, x holds +-inf, or every product is -inf. The exact products
// p_j = scale * x_j decide, and a product of two floats is exact in double. Two distinct x
// give products that differ by more than 2^-24 of the smaller magnitude, which for an
// overflowing product (|p| >= 2^128 - 2^103) is more than 2^103, so exp(p_j - max p) is
// 0 in float for every p_j below the max: the entries tied at the max share the weight
// equally (1/count), all others get 0. An infinite p_j ties only with equal infinities
// (the limit where they grow together). Every exact product -inf: zeros.
template <class Arch>
void overflow_row(int64_t cols, float scale, const float *x, float *y) {
    const double minus_inf = -std::numeric_limits<double>::infinity();
    double top = minus_inf;
    int64_t ties = 0;
    for (int64_t j = 0; j < cols; ++j) {
        const double p = double(scale) * double(x[j]);
        if (p == minus_inf) continue;
        if (p > top) {
            top = p;
            ties = 1;
        } else if (p == top) {
            ++ties;
        }
    }
    const float weight = ties > 0 ? 1.0f / float(ties) : 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
        const double p = double(scale) * double(x[j]);
        y[j] = ties > 0 && p == top ? weight : 0.0f;  // x[j] is read before y[j] is written
    }
}

}  // namespace softmax_detail

// softmax of one row (see the header comment). InPlace: x == y.
template <class Arch, bool InPlace>
void softmax_row(int64_t cols, float scale, const float *x, float *y) {
    using fbatch = xsimd::batch<float, Arch>;
    using namespace softmax_detail;
    constexpr int64_t W = fbatch::size;
    const float inf = std::numeric_limits<float>::infinity();
    const fbatch scale_v(scale);
    const int64_t full = cols - cols % W;

    // s_j = fl(scale*x_j); -inf (an infinite x times a scale of the other sign, or a product
    // below the float range) weighs 0. (No multiply-add can absorb this product: only the
    // max and the store read it.)
    auto scaled = [&](const fbatch &xv) { return rounded_product(scale_v, xv); };

    // Pass 1: m = max_j s_j; NaN in any s_j (a NaN x, or 0 * inf) is remembered. Out of
    // place, s_j is also stored in y for pass 2, and x stays intact for overflow_row. In
    // place, x is only read (a row that turns out to overflow needs it) and pass 2
    // recomputes s_j from x instead.
    fbatch max_v(-inf);
    xsimd::batch_bool<float, Arch> has_nan(false);
    auto max_step = [&](const fbatch &sv) {
        // xsimd::isnan, not sv != sv: xsimd 8.1 compiles != to an ordered compare on AVX and
        // AVX-512, which is false for NaN.
        has_nan = has_nan | xsimd::isnan(sv);
        max_v = xsimd::max(max_v, sv);
    };
    int64_t j = 0;
    for (; j < full; j += W) {
        const fbatch sv = scaled(fbatch::load_unaligned(x + j));
        max_step(sv);
        if constexpr (!InPlace) sv.store_unaligned(y + j);
    }
    if (j < cols) {
        const fbatch sv = tail_products<Arch>(scale_v, x, j, cols);
        max_step(sv);
        if constexpr (!InPlace) store_tail<Arch>(sv, y, j, cols);
    }
    if (xsimd::any(has_nan)) {
        fill_row<Arch>(y, cols, std::numeric_limits<float>::quiet_NaN());
        return;
    }
    const float m = reduce_max(max_v);
    if (m == inf || m == -inf) {  // overflow, an infinite product, or every product -inf
        overflow_row<Arch>(cols, scale, x, y);
        return;
    }

    // Pass 2: e_j = exp(s_j - m) (0 for a product of -inf), into y; sum_j e_j. s_j is the
    // same rounded product that gave m, so the exponent at the maximum is exactly 0.
    const fbatch m_v(m);
    fbatch sum_v(0.0f);
    const float *src = InPlace ? x : y;  // x, or s as pass 1 stored it
    auto exp_step = [&](const fbatch &v) {
        const fbatch sv = InPlace ? rounded_product(scale_v, v) : v;
        const fbatch e = exp<Arch>(sv - m_v);  // exp(-inf) is +0: a product of -inf weighs 0
        sum_v += e;
        return e;
    };
    for (j = 0; j < full; j += W) exp_step(fbatch::load_unaligned(src + j)).store_unaligned(y + j);
    if (j < cols) {
        // lanes past the row: products of -inf, e = 0 (in place, s is recomputed from x)
        const fbatch sv = InPlace ? tail_products<Arch>(scale_v, x, j, cols)
                                  : load_tail<Arch>(y, j, cols, -inf);
        const fbatch e = exp<Arch>(sv - m_v);
        sum_v += e;
        store_tail<Arch>(e, y, j, cols);
    }

    // Pass 3: y_j = e_j / sum, as a product with the reciprocal.
    const fbatch inv_sum(1.0f / reduce_add(sum_v));
    for (j = 0; j < full; j += W) (fbatch::load_unaligned(y + j) * inv_sum).store_unaligned(y + j);
    for (; j < cols; ++j) y[j] *= inv_sum.get(0);
}

// softmax of rows [0, rows): the entry point in the kernel table.
template <class Arch>
void softmax_rows(int64_t rows, int64_t cols, float scale, const float *x, int64_t ldx, float *y,
                  int64_t ldy) {
    // The API allows x and y to overlap only as x == y with ldx == ldy.
    if (x == y) {
        for (int64_t i = 0; i < rows; ++i)
            softmax_row<Arch, true>(cols, scale, x + i * ldx, y + i * ldx);
    } else {
        for (int64_t i = 0; i < rows; ++i)
            softmax_row<Arch, false>(cols, scale, x + i * ldx, y + i * ldy);
    }
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
