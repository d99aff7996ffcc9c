// Reference multi-head attention, PyTorch nn.MultiheadAttention (batch_first) semantics with
// nn.Linear [out, in] weights. Rows are tokens: x_q is [batch*len_q, d_model].
//   Q = x_q W_q^T + b_q   [batch*len_q,  heads*head_dim],    head h = columns h*head_dim..
//   K = x_kv W_k^T + b_k  [batch*len_kv, heads_kv*head_dim], V likewise
//   C = SDPA(Q, K, V)     [batch*len_q,  heads*head_dim]     (BSHD strides, no copies)
//   y = C W_o^T + b_o     [batch*len_q,  d_model]
#include <cmath>
#include <vector>

#include "ref/ref.hpp"

namespace attn::ref {

namespace {

using floats = std::vector<float>;

// x[rows, cols] += bias[cols] for every row (bias may be null).
void add_bias(float *x, int64_t rows, int64_t cols, const float *bias) {
    if (!bias) return;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) x[r * cols + c] += bias[c];
}

// db[cols] = sum over rows of dx[rows, cols] (db may be null).
void column_sums(const float *dx, int64_t rows, int64_t cols, float *db) {
    if (!db) return;
    for (int64_t c = 0; c < cols; ++c) db[c] = 0.0f;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) db[c] += dx[r * cols + c];
}

// The forward's intermediates, kept for the backward.
struct projections {
    floats q, k, v, context;
};

// out[rows, n] = x[rows, d_model] W^T + b, W is [n, d_model].
void linear(const float *x, int64_t rows, int64_t d_model, const float *w, const float *b,
            int64_t n, float *out) {
    gemm(ATTN_NO_TRANS, ATTN_TRANS, rows, n, d_model, 1.0f, x, d_model, w, d_model, 0.0f, out, n);
    add_bias(out, rows, n, b);
}

projections attend(const attn_mha_desc &d, const float *x_q, const float *x_kv, float *lse) {
    const int64_t rows_q = d.batch * d.len_q, rows_kv = d.batch * d.len_kv;
    const int64_t wq = d.heads * d.head_dim, wkv = d.heads_kv * d.head_dim;
    projections p{floats(rows_q * wq), floats(rows_kv * wkv), floats(rows_kv * wkv),
                  floats(rows_q * wq)};
    linear(x_q, rows_q, d.d_model, d.w_q, d.b_q, wq, p.q.data());
    linear(x_kv, rows_kv, d.d_model, d.w_k, d.b_k, wkv, p.k.data());
    linear(x_kv, rows_kv, d.d_model, d.w_v, d.b_v, wkv, p.v.data());
    attn_sdpa_desc s = mha_attention_desc(d);
    s.lse = lse;
    sdpa(s, p.q.data(), p.k.data(), p.v.data(), p.context.data());
    return p;
}

}  // namespace

attn_sdpa_desc mha_attention_desc(const attn_mha_desc &d) {
    const int64_t wq = d.heads * d.head_dim, wkv = d.heads_kv * d.head_dim;
    attn_sdpa_desc s{};
    s.batch = d.batch;
    s.heads_q = d.heads;
    s.heads_kv = d.heads_kv;
    s.len_q = d.len_q;
    s.len_kv = d.len_kv;
    s.dim_qk = s.dim_v = d.head_dim;
    s.q = s.out = attn_layout{d.len_q * wq, d.head_dim, wq};
    s.k = s.v = attn_layout{d.len_kv * wkv, d.head_dim, wkv};
    s.scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim));
    s.causal = d.causal;
    s.kv_len = d.kv_len;
    s.dropout_p = d.dropout_p;
    s.dropout_seed = d.dropout_seed;
    s.window_left = s.window_right = -1;  // no sliding window (0 would be the diagonal only)
    return s;
}

void mha_forward(const attn_mha_desc &d, const float *x_q, const float *x_kv, float *y) {
    const projections p = attend(d, x_q, x_kv, nullptr);
    linear(p.context.data(), d.batch * d.len_q, d.heads * d.head_dim, d.w_o, d.b_o, d.d_model, y);
}

void mha_backward(const attn_mha_desc &d, const float *x_q, const float *x_kv, const float *dy,
                  float *dx_q, float *dx_kv, const attn_mha_grads &g) {
    const int64_t rows_q = d.batch * d.len_q, rows_kv = d.batch * d.len_kv;
    const int64_t wq = d.heads * d.head_dim, wkv = d.heads_kv * d.head_dim;
    const int64_t dm = d.d_model;

    floats lse(static_cast<size_t>(d.batch * d.heads * d.len_q));
    const projections p = attend(d, x_q, x_kv, lse.data());

    // Output projection: dC = dy W_o, dW_o = dy^T C, db_o = column sums of dy.
    floats dcontext(rows_q * wq);
    gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, rows_q, wq, dm, 1.0f, dy, dm, d.w_o, wq, 0.0f,
         dcontext.data(), wq);
    if (g.dw_o)
        gemm(ATTN_TRANS, ATTN_NO_TRANS, dm, wq, rows_q, 1.0f, dy, dm, p.context.data(), wq, 0.0f,
             g.dw_o, wq);
    column_sums(dy, rows_q, dm, g.db_o);

    // Attention: dQ, dK, dV from dC.
    floats dq(rows_q * wq), dk(rows_kv * wkv), dv(rows_kv * wkv);
    sdpa_backward(mha_attention_desc(d), p.q.data(), p.k.data(), p.v.data(), p.context.data(),
                  dcontext.data(), lse.data(), dq.data(), dk.data(), dv.data());

    // Input projections: dW = dProj^T x, db = column sums of dProj.
    if (g.dw_q)
        gemm(ATTN_TRANS, ATTN_NO_TRANS, wq, dm, rows_q, 1.0f, dq.data(), wq, x_q, dm, 0.0f, g.dw_q,
             dm);
    if (g.dw_k)
        gemm(ATTN_TRANS, ATTN_NO_TRANS, wkv, dm, rows_kv, 1.0f, dk.data(), wkv, x_kv, dm, 0.0f,
             g.dw_k, dm);
    if (g.dw_v)
        gemm(ATTN_TRANS, ATTN_NO_TRANS, wkv, dm, rows_kv, 1.0f, dv.data(), wkv, x_kv, dm, 0.0f,
             g.dw_v, dm);
    column_sums(dq.data(), rows_q, wq, g.db_q);
    column_sums(dk.data(), rows_kv, wkv, g.db_k);
    column_sums(dv.data(), rows_kv, wkv, g.db_v);

    // Inputs: dx_q = dQ W_q; dx_kv = dK W_k + dV W_v. For self-attention without dx_kv the
    // key/value contribution is added into dx_q, which then holds the whole gradient.
    if (dx_q)
        gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, rows_q, dm, wq, 1.0f, dq.data(), wq, d.w_q, dm, 0.0f,
             dx_q, dm);
    float *dx_into = dx_kv;
    float beta = 0.0f;
    if (!dx_kv && dx_q && x_kv == x_q && d.len_kv == d.len_q) {
        dx_into = dx_q;
        beta = 1.0f;
    }
    if (dx_into) {
        gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, rows_kv, dm, wkv, 1.0f, dk.data(), wkv, d.w_k, dm, beta,
             dx_into, dm);
        gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, rows_kv, dm, wkv, 1.0f, dv.data(), wkv, d.w_v, dm, 1.0f,
             dx_into, dm);
    }
}

}  // namespace attn::ref
