// Reference row softmax: y[i,:] = softmax(scale * x[i,:]). Special values as in
// docs/validation.md ("Special values").
#include <cmath>
#include <limits>

#include "ref/ref.hpp"

namespace attn::ref {
namespace {

const float neg_inf = -std::numeric_limits<float>::infinity();

// The exact product scale * x_j: a product of two floats is exact in double and cannot
// overflow there, so -inf here means an infinite x_j times a scale of the opposite sign.
double exact_product(float scale, float x) { return double(scale) * double(x); }

// A row whose largest fl(scale * x_j) is +-inf: scale * x overflowed float, x holds +-inf, or
// every product is -inf. softmax of the exact products p_j, computed in double:
// y_j = exp(p_j - P) / sum_k exp(p_k - P), P = max_j p_j. A product of -inf weighs 0; an
// infinite p_j equal to P counts exp(0) = 1 (the limit where those entries grow together).
// Every product -inf: zeros.
void softmax_of_exact_products(int64_t cols, float scale, const float *xr, float *yr) {
    double top = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < cols; ++j) top = std::fmax(top, exact_product(scale, xr[j]));
    auto unnormalised = [&](int64_t j) {
        const double p = exact_product(scale, xr[j]);
        if (p == -std::numeric_limits<double>::infinity()) return 0.0;
        return p == top ? 1.0 : std::exp(p - top);
    };
    double sum = 0.0;
    for (int64_t j = 0; j < cols; ++j) sum += unnormalised(j);
    // sum >= 1 unless every product is -inf; yr[j] is written after xr[j] is read.
    for (int64_t j = 0; j < cols; ++j) yr[j] = sum > 0.0 ? float(unnormalised(j) / sum) : 0.0f;
}

}  // namespace

void softmax(int64_t rows, int64_t cols, float scale, const float *x, int64_t ldx, float *y,
             int64_t ldy) {
    for (int64_t i = 0; i < rows; ++i) {
        const float *xr = x + i * ldx;
        float *yr = y + i * ldy;  // may equal xr: each element is read before it is written
        // The weights are those of the products s_j = scale * x_j, whatever the sign of
        // scale: a product of -inf weighs 0 (x = -inf with scale > 0, x = +inf with
        // scale < 0). m = max_j s_j; a NaN product (a NaN x, or 0 * inf) poisons the row.
        float m = neg_inf;
        bool has_nan = false;
        for (int64_t j = 0; j < cols; ++j) {
            const float s = scale * xr[j];
            if (std::isnan(s)) has_nan = true;
            if (s > m) m = s;
        }
        if (has_nan) {
            for (int64_t j = 0; j < cols; ++j) yr[j] = std::numeric_limits<float>::quiet_NaN();
            continue;
        }
        if (std::isinf(m)) {  // overflow, an infinite product, or every product -inf
            softmax_of_exact_products(cols, scale, xr, yr);
            continue;
        }
        // e_j = exp(scale * x_j - m) <= 1, so no overflow even for |x| ~ 1e30; a product
        // of -inf (exact, or a finite one below the float range) weighs 0.
        float sum = 0.0f;
        for (int64_t j = 0; j < cols; ++j) {
            const float s = scale * xr[j];
            const float e = s == neg_inf ? 0.0f : std::exp(s - m);
            yr[j] = e;
            sum += e;
        }
        for (int64_t j = 0; j < cols; ++j) yr[j] /= sum;
    }
}

}  // namespace attn::ref
