// Reference merge of attention computed over disjoint key sets:
//   lse = log sum_p exp(lses[p]),  out = sum_p exp(lses[p] - lse) * outs[p].
#include <cmath>
#include <limits>

#include "ref/ref.hpp"

namespace attn::ref {

void merge(int64_t parts, int64_t rows, int64_t dim_v, const float *const *outs,
           const float *const *lses, float *out, float *lse) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < rows; ++r) {
        float *out_row = out + r * dim_v;
        // m = max_p lses[p][r], subtracted so the exponentials cannot overflow.
        // A NaN lse (a part whose row is NaN) makes the merged row NaN.
        float m = neg_inf;
        for (int64_t p = 0; p < parts; ++p)
            if (lses[p][r] > m || std::isnan(lses[p][r])) m = lses[p][r];
        if (std::isnan(m)) {
            for (int64_t c = 0; c < dim_v; ++c) out_row[c] = m;
            if (lse) lse[r] = m;
            continue;
        }
        if (m == neg_inf) {  // no part saw an unmasked key
            for (int64_t c = 0; c < dim_v; ++c) out_row[c] = 0.0f;
            if (lse) lse[r] = neg_inf;
            continue;
        }
        // w_p = exp(lses[p][r] - m) / sum_p' exp(lses[p'][r] - m), i.e. exp(lses[p][r] - lse),
        // formed without rounding lse first (lse ~ 100 is only good to 8e-6 in float).
        float sum = 0.0f;
        for (int64_t p = 0; p < parts; ++p) sum += std::exp(lses[p][r] - m);
        for (int64_t c = 0; c < dim_v; ++c) out_row[c] = 0.0f;
        // A -inf part has w_p = 0 and is skipped, so its output row cannot turn into NaN.
        for (int64_t p = 0; p < parts; ++p) {
            if (lses[p][r] == neg_inf) continue;
            const float w = std::exp(lses[p][r] - m) / sum;
            const float *part_row = outs[p] + r * dim_v;
            for (int64_t c = 0; c < dim_v; ++c) out_row[c] += w * part_row[c];
        }
        if (lse) lse[r] = m + std::log(sum);
    }
}

}  // namespace attn::ref
