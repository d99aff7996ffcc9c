// Reference row softmax: y[i,:] = softmax(scale * x[i,:]).
#include <cmath>
#include <limits>

#include "ref/ref.hpp"

namespace attn::ref {

void softmax(int64_t rows, int64_t cols, float scale, const float *x, int64_t ldx, float *y,
             int64_t ldy) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < rows; ++i) {
        const float *xr = x + i * ldx;
        float *yr = y + i * ldy;  // may equal xr: each element is read before it is written
        // A -inf entry is "masked": it gets weight 0 whatever the sign of scale.
        // m = max_j scale * x_j over the unmasked entries; NaN anywhere poisons the row.
        float m = neg_inf;
        bool has_nan = false;
        for (int64_t j = 0; j < cols; ++j) {
            if (std::isnan(xr[j])) has_nan = true;
            if (xr[j] == neg_inf) continue;
            const float s = scale * xr[j];
            if (s > m) m = s;
        }
        if (has_nan) {
            for (int64_t j = 0; j < cols; ++j) yr[j] = std::numeric_limits<float>::quiet_NaN();
            continue;
        }
        if (m == neg_inf) {  // every entry masked: no distribution, all zeros
            for (int64_t j = 0; j < cols; ++j) yr[j] = 0.0f;
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
