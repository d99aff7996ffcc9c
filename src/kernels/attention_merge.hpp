// Merging attention computed over disjoint key sets (attn_merge_f32, split-key decoding),
// templated on the xsimd Arch: vectorised over dim_v, parts summed in index order.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <limits>

#include <xsimd/xsimd.hpp>

ATTN_KERNELS_BEGIN

// Rows [0, rows) of the attention over the union of `parts` disjoint key sets:
//   lse = log sum_p exp(lses[p][first + r]),
//   out[r] = sum_p exp(lses[p][first + r] - lse) outs[p][(first + r) * outs_ld ...]
// parts in index order; a part with lse -inf is skipped; all -inf gives zeros and -inf; a
// NaN lse in any part (its row is NaN) makes the row NaN.
template <class Arch>
void attention_merge_rows(int64_t parts, int64_t first, int64_t rows, int64_t dim_v,
                          const float *const *outs, int64_t outs_ld, const float *const *lses,
                          float *out, int64_t out_ld, float *lse) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = static_cast<int>(fbatch::size);
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = first + r;
        float *out_row = out + r * out_ld;
        float top = neg_inf;
        for (int64_t p = 0; p < parts; ++p)
            if (lses[p][row] > top || lses[p][row] != lses[p][row]) top = lses[p][row];
        if (top != top) {
            for (int64_t c = 0; c < dim_v; ++c) out_row[c] = top;
            if (lse) lse[r] = top;
            continue;
        }
        if (top == neg_inf) {
            for (int64_t c = 0; c < dim_v; ++c) out_row[c] = 0.0f;
            if (lse) lse[r] = neg_inf;
            continue;
        }
        float sum = 0.0f;
        for (int64_t p = 0; p < parts; ++p) sum += __builtin_expf(lses[p][row] - top);
        // w_p = exp(lses[p] - top) / sum = exp(lses[p] - lse), formed without rounding lse
        // first (an lse near 100 is only good to 8e-6 in float).
        int64_t c = 0;
        for (; c + W <= dim_v; c += W) {
            fbatch acc(0.0f);
            for (int64_t p = 0; p < parts; ++p) {
                if (lses[p][row] == neg_inf) continue;
                const fbatch w(__builtin_expf(lses[p][row] - top) / sum);
                acc = xsimd::fma(w, fbatch::load_unaligned(outs[p] + row * outs_ld + c), acc);
            }
            acc.store_unaligned(out_row + c);
        }
        for (; c < dim_v; ++c) {
            float acc = 0.0f;
            for (int64_t p = 0; p < parts; ++p) {
                if (lses[p][row] == neg_inf) continue;
                acc += __builtin_expf(lses[p][row] - top) / sum * outs[p][row * outs_ld + c];
            }
            out_row[c] = acc;
        }
        if (lse) lse[r] = top + __builtin_logf(sum);
    }
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
