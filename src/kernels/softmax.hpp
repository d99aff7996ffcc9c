// Row softmax, templated on the xsimd Arch: y[i,:] = softmax(scale * x[i,:]) for a block of
// rows, with the semantics of the reference (src/ref/softmax.cpp): a -inf entry is masked
// (weight 0, whatever the sign of scale); a row with every entry masked becomes zeros; a NaN
// anywhere in a row makes the whole row NaN; no overflow for any finite magnitude, because
// every exponent is scale * x - max <= 0.
//
// Layout: row i of x starts at x + i*ldx, row i of y at y + i*ldy, `cols` floats each.
// x == y with ldx == ldy (in place) is allowed: each element is read before it is written.
//
// Three passes per row: scale*x stored in y, and its max; then exp(y - max) in place, and
// the sum; then y times 1/sum. (A one-pass "online" max and sum, rescaling the running sum
// whenever the max grows, needs exp twice per element; on rows that stay in cache the exp
// dominates, so the three-pass form is the faster one: 2.2-2.8x in our measurements.)
#pragma once

#include <cstdint>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "kernels/vec_math.hpp"

namespace attn::kernels {

namespace softmax_detail {

// Loads cols - j (< lanes) floats of a row tail, filling the rest with -inf (masked).
template <class Arch>
inline xsimd::batch<float, Arch> load_tail(const float *row, int64_t j, int64_t cols) {
    using fbatch = xsimd::batch<float, Arch>;
    alignas(64) float tail[fbatch::size];
    for (int64_t t = 0; t < int64_t(fbatch::size); ++t)
        tail[t] = j + t < cols ? row[j + t] : -std::numeric_limits<float>::infinity();
    return fbatch::load_aligned(tail);
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

}  // namespace softmax_detail

// softmax of one row (see the header comment).
template <class Arch>
void softmax_row(int64_t cols, float scale, const float *x, float *y) {
    using fbatch = xsimd::batch<float, Arch>;
    using namespace softmax_detail;
    constexpr int64_t W = fbatch::size;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const fbatch neg_inf_v(neg_inf), scale_v(scale);
    const int64_t full = cols - cols % W;

    // Pass 1: s_j = scale*x_j (-inf when masked), rounded and stored in y; m = max_j s_j;
    // NaN anywhere is remembered. Pass 2 then reads s_j back rather than recomputing
    // scale*x_j - m: the compiler may fuse that into one multiply-add (GCC contracts by
    // default in C++), whose exact product differs from the rounded one that gave m, so
    // the maximum's exponent would be a rounding error of scale*x instead of 0; for
    // |scale*x| ~ 1e30 that is +-1e23, and exp turns the row into inf or 0 (then NaN).
    fbatch max_v(neg_inf);
    xsimd::batch_bool<float, Arch> has_nan(false);
    auto scaled = [&](const fbatch &xv) {
        // xsimd::isnan, not xv != xv: xsimd 8.1 compiles != to an ordered compare on AVX and
        // AVX-512, which is false for NaN.
        has_nan = has_nan | xsimd::isnan(xv);
        const fbatch sv = xsimd::select(xv == neg_inf_v, neg_inf_v, scale_v * xv);
        max_v = xsimd::max(max_v, sv);
        return sv;
    };
    int64_t j = 0;
    for (; j < full; j += W) scaled(fbatch::load_unaligned(x + j)).store_unaligned(y + j);
    if (j < cols) store_tail<Arch>(scaled(load_tail<Arch>(x, j, cols)), y, j, cols);
    if (xsimd::any(has_nan)) {
        fill_row<Arch>(y, cols, std::numeric_limits<float>::quiet_NaN());
        return;
    }
    const float m = reduce_max(max_v);
    if (m == neg_inf) {  // every entry masked
        fill_row<Arch>(y, cols, 0.0f);
        return;
    }

    // Pass 2: e_j = exp(s_j - m) (0 when masked), in place in y; sum_j e_j.
    const fbatch m_v(m);
    fbatch sum_v(0.0f);
    auto exp_step = [&](const fbatch &sv) {
        const fbatch e = xsimd::select(sv == neg_inf_v, fbatch(0.0f), exp<Arch>(sv - m_v));
        sum_v += e;
        return e;
    };
    for (j = 0; j < full; j += W) exp_step(fbatch::load_unaligned(y + j)).store_unaligned(y + j);
    if (j < cols) {
        const fbatch e = exp_step(load_tail<Arch>(y, j, cols));  // tail lanes are -inf: e = 0
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
    for (int64_t i = 0; i < rows; ++i) softmax_row<Arch>(cols, scale, x + i * ldx, y + i * ldy);
}

}  // namespace attn::kernels
