// Reference scaled dot-product attention, one query row at a time:
//   A[b,h,i,:] = softmax_j(scale * q_i . k_j + mask) with causal and kv_len masking,
//   out[b,h,i,:] = sum_j dropout(A)[j] * v_j.
// Scratch is O(len_kv) per row; the len_q x len_kv matrix is only written when asked for.
#include <vector>

#include "ref/ref.hpp"
#include "ref/sdpa_row.hpp"

namespace attn::ref {

void sdpa(const attn_sdpa_desc &d, const float *q, const float *k, const float *v, float *out) {
    std::vector<float> s(static_cast<size_t>(d.len_kv));  // scores, then weights
    std::vector<float> z(static_cast<size_t>(d.len_kv));  // dropout factors
    for (int64_t b = 0; b < d.batch; ++b) {
        for (int64_t h = 0; h < d.heads_q; ++h) {
            const float *v_head = v + b * d.v.batch + sdpa_row::kv_head(d, h) * d.v.head;
            for (int64_t i = 0; i < d.len_q; ++i) {
                const int64_t row = (b * d.heads_q + h) * d.len_q + i;  // dense [b,h,i] index
                float *out_row = out + b * d.out.batch + h * d.out.head + i * d.out.seq;
                float *weights_row = d.weights ? d.weights + row * d.len_kv : nullptr;

                const float m = sdpa_row::scores(d, q, k, b, h, i, s.data());
                for (int64_t c = 0; c < d.dim_v; ++c) out_row[c] = 0.0f;
                if (m == sdpa_row::neg_inf) {  // every key masked: zeros, never NaN
                    if (d.lse) d.lse[row] = sdpa_row::neg_inf;
                    if (weights_row)
                        for (int64_t j = 0; j < d.len_kv; ++j) weights_row[j] = 0.0f;
                    continue;
                }
                // A_j = softmax_j(s), before dropout.
                const float lse = sdpa_row::softmax_in_place(s.data(), d.len_kv, m);
                if (d.lse) d.lse[row] = lse;
                if (weights_row)
                    for (int64_t j = 0; j < d.len_kv; ++j) weights_row[j] = s[j];
                // out_i = sum_j (A_j * z_j) v_j, z = dropout factors (all 1 without dropout).
                sdpa_row::dropout_factors(d, b, h, i, z.data());
                // A hidden key is never read; every other key contributes, even with weight
                // 0 (masked by -inf, dropped): a NaN in its V row reaches the output.
                for (int64_t j = 0; j < d.len_kv; ++j) {
                    if (sdpa_row::key_hidden(d, b, i, j)) continue;
                    const float p = s[j] * z[j];
                    const float *v_row = v_head + j * d.v.seq;
                    for (int64_t c = 0; c < d.dim_v; ++c) out_row[c] += p * v_row[c];
                }
            }
        }
    }
}

}  // namespace attn::ref
