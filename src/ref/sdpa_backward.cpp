// Reference backward of scaled dot-product attention, one query row at a time. With
// P = softmax(S) (before dropout), z the dropout factors, Pd = P * z and out = Pd V:
//   dV   += Pd^T dO
//   dP    = (dO V^T) * z
//   D_i   = dO_i . out_i               (FlashAttention's delta: sum_j P_ij dP_ij for the true out)
//   dS    = P * (dP - D) * g       g = d s / d (scaled score): 1 - tanh^2 with softcap, else 1
//   dQ    = scale * dS K,   dK += scale * dS^T Q
//   dsink_h += -P_sink D           P_sink = exp(sink_h - lse): the sink has no value, dP = 0
// with P and the score s of src/core/scores.hpp (lse including the sink).
// Grouped-query heads accumulate into their shared dK, dV rows.
#include <vector>

#include "ref/ref.hpp"
#include "core/seq_rows.hpp"
#include "ref/sdpa_row.hpp"

namespace attn::ref {

void sdpa_backward(const attn_sdpa_desc &d, const float *q, const float *k, const float *v,
                   const float *out, const float *dout,
                   const float *lse, float *dq, float *dk, float *dv) {
    const core::seq_rows rows(d);  // each sequence's rows and counts (packed or dense)
    // Zero the rows of dq, dk, dv of every sequence (rows inside its counts only, so a KV
    // cache's unused capacity is left alone).
    for (int64_t b = 0; b < d.batch; ++b) {
        for (int64_t h = 0; h < d.heads_q; ++h)
            for (int64_t i = 0; i < rows.queries(b); ++i)
                for (int64_t c = 0; c < d.dim_qk; ++c) dq[rows.q_at(b, h, i) + c] = 0.0f;
        for (int64_t hk = 0; hk < d.heads_kv; ++hk)
            for (int64_t j = 0; j < rows.keys(b); ++j) {
                for (int64_t c = 0; c < d.dim_qk; ++c) dk[rows.k_at(b, hk, j) + c] = 0.0f;
                for (int64_t c = 0; c < d.dim_v; ++c) dv[rows.v_at(b, hk, j) + c] = 0.0f;
            }
    }

    std::vector<float> p(static_cast<size_t>(d.len_kv));   // scores, then P
    std::vector<float> z(static_cast<size_t>(d.len_kv));   // dropout factors
    std::vector<float> dp(static_cast<size_t>(d.len_kv));  // dP, then dS
    std::vector<float> g(static_cast<size_t>(d.len_kv));   // d s / d (scaled score)
    if (d.dsinks)
        for (int64_t h = 0; h < d.heads_q; ++h) d.dsinks[h] = 0.0f;
    for (int64_t b = 0; b < d.batch; ++b) {
        const int64_t keys = rows.keys(b);
        const core::key_visibility visibility = rows.visibility(b);
        for (int64_t h = 0; h < d.heads_q; ++h) {
            const float sink = core::sink_for(d, h);
            const int64_t hk = sdpa_row::kv_head(d, h);
            for (int64_t i = 0; i < rows.queries(b); ++i) {
                const float *q_row = q + rows.q_at(b, h, i);
                const float *dout_row = dout + rows.out_at(b, h, i);
                float *dq_row = dq + rows.q_at(b, h, i);

                const float m = sdpa_row::scores(rows, q, k, b, h, i, p.data(), g.data());
                if (m == sdpa_row::neg_inf) continue;  // fully masked: no gradient flows
                // P = the softmax recomputed, e^(s_j - m) / sum (the sink in its denominator),
                // whether or not the forward's lse is given: e^(s_j - lse) would carry lse's
                // rounding (ulp(|lse|), large when the scores are) into every weight of the
                // row. A row the forward saw as fully masked (lse -inf) has no gradient.
                if (lse && lse[rows.lse_at(b, h, i)] == sdpa_row::neg_inf) continue;
                const float row_lse = sdpa_row::softmax_in_place(p.data(), keys, m, sink);
                sdpa_row::dropout_factors(d, b, h, i, keys, z.data());

                // D = dO_i . O_i, FlashAttention's delta: sum_j P_j dP_j when out is the
                // forward's output (the API's contract), read from out as every path does
                const float *out_row = out + rows.out_at(b, h, i);
                float big_d = 0.0f;
                for (int64_t c = 0; c < d.dim_v; ++c) big_d += dout_row[c] * out_row[c];
                // dV_j += (P_j z_j) dO_i;  dP_j = z_j (dO_i . V_j)
                const core::key_range seen = visibility.row(i);
                for (int64_t j = 0; j < keys; ++j) {
                    dp[j] = 0.0f;
                    if (sdpa_row::key_hidden(seen, j)) continue;  // never read, as forward
                    const float *v_row = v + rows.v_at(b, hk, j);
                    float *dv_row = dv + rows.v_at(b, hk, j);
                    const float pd = p[j] * z[j];
                    float dot = 0.0f;
                    for (int64_t c = 0; c < d.dim_v; ++c) {
                        dv_row[c] += pd * dout_row[c];
                        dot += dout_row[c] * v_row[c];
                    }
                    dp[j] = dot * z[j];
                }
                // the sink's logit: P_sink (0 - D)
                if (d.dsinks && sink != sdpa_row::neg_inf)
                    d.dsinks[h] -= std::exp(sink - row_lse) * big_d;
                // dS_j = P_j (dP_j - D) g_j; dQ_i += scale dS_j K_j; dK_j += scale dS_j Q_i
                for (int64_t j = 0; j < keys; ++j) {
                    if (sdpa_row::key_hidden(seen, j)) continue;
                    const float ds = d.scale * (p[j] * (dp[j] - big_d) * g[j]);
                    const float *k_row = k + rows.k_at(b, hk, j);
                    float *dk_row = dk + rows.k_at(b, hk, j);
                    for (int64_t c = 0; c < d.dim_qk; ++c) {
                        dq_row[c] += ds * k_row[c];
                        dk_row[c] += ds * q_row[c];
                    }
                }
            }
        }
    }
}

}  // namespace attn::ref
