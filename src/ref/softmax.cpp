// Reference row softmax: y[i,:] = softmax(scale * x[i,:]). Special values as in
// docs/validation.md ("Special values").
#include <cmath>
#include <limits>

#include "ref/ref.hpp"

namespace attn::ref {
namespace {

const float neg_inf = -std::numeric_limits<float>::infinity();

// A row whose largest fl(scale * x_j) is +-inf: scale * x overflowed float, x holds +-inf, or
// every entry is masked. softmax of the exact products p_j = scale * x_j, computed in double,
// where a product of two floats is exact and cannot overflow: y_j = exp(p_j - P) / sum_k
// exp(p_k - P), P = max_j p_j. An infinite p_j equal to P counts exp(0) = 1 (the limit where
// those entries grow together). Every entry masked: zeros.
void softmax_of_exact_products(int64_t cols, float scale, const float *xr, float *yr) {
    double top = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < cols; ++j)
        if (xr[j] != neg_inf) top = std::fmax(top, double(scale) * double(xr[j]));
    auto unnormalised = [&](int64_t j) {
        if (xr[j] == neg_inf) return 0.0;
        const double p = double(scale) * double(xr[j]);
        return p == top ? 1.0 : std::exp(p - top);
    };
    double sum = 0.0;
    for (int64_t j = 0; j < cols; ++j) sum += unnormalised(j);
    // sum >= 1 unless every entry is masked; yr[j] is written after xr[j] is read.
    for (int64_t j = 0; j < cols; ++j) yr[j] = sum > 0.0 ? float(unnormalised(j) / sum) : 0.0f;
}

}  // namespace

void softmax(int64_t rows, int64_t cols, float scale, const float *x, int64_t ldx, float *y,
             int64_t ldy) {
    for (int64_t i = 0; i < rows; ++i) {
        const float *xr = x + i * ldx;
        float *yr = y + i * ldy;  // may equal xr: each element is read before it is written
        // A -inf entry is "masked": it gets weight 0 whatever the sign of scale.
        // m = max_j scale * x_j over the unmasked entries; NaN in any scale * x_j (a NaN x,
        // or 0 * inf) poisons the row.
        float m = neg_inf;
        bool has_nan = false;
        for (int64_t j = 0; j < cols; ++j) {
            if (xr[j] == neg_inf) continue;
            const float s = scale * xr[j];
            if (std::isnan(s)) has_nan = true;
            if (s > m) m = s;
        }
        if (has_nan) {
            for (int64_t j = 0; j < cols; ++j) yr[j] = std::numeric_limits<float>::quiet_NaN();
            continue;
        }
        if (std::isinf(m)) {  // overflow, +-inf in x, or every entry masked
            softmax_of_exact_products(cols, scale, xr, yr);
            continue;
        }
        // e_j = exp(scale * x_j - m) <= 1, so no overflow even for |x| ~ 1e30.
        float sum = 0.0f;
        for (int64_t j = 0; j < cols; ++j) {
            const float e = xr[j] == neg_inf ? 0.0f : std::exp(scale * xr[j] - m);
            yr[j] = e;
            sum += e;
        }
        for (int64_t j = 0; j < cols; ++j) yr[j] /= sum;
    }
}

}  // namespace attn::ref
