// Multi-head attention on the library's fast pieces: the projections are ops::gemm
// (x W^T, W in nn.Linear [out, in] layout), the attention is the fused ops::sdpa reading the
// projections in place through BSHD strides ([batch, len, heads*head_dim]: no transposes),
// the backward is ops::gemm around the fused ops::sdpa_backward, given the forward's row
// statistics (max and sum, not only lse).
//
//   Q = x_q W_q^T + b_q    [batch*len_q,  heads*head_dim]
//   K = x_kv W_k^T + b_k   [batch*len_kv, heads_kv*head_dim], V likewise
//   C = SDPA(Q, K, V)      [batch*len_q,  heads*head_dim], scale 1/sqrt(head_dim)
//   y = C W_o^T + b_o      [batch*len_q,  d_model]
//
// Every intermediate is allocated before the first output is written; the backward computes
// every gradient into scratch and copies them out at the end.
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "ref/ref.hpp"

namespace attn::ops {
namespace {

using floats = std::vector<float>;

// x[rows, cols] += bias[cols] for every row (nothing when bias is null).
void add_bias(const exec &ex, float *x, int64_t rows, int64_t cols, const float *bias) {
    if (!bias) return;
    const int64_t grain = cols >= 4096 ? 1 : 4096 / cols;
    parallel_for(ex, rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
            for (int64_t c = 0; c < cols; ++c) x[r * cols + c] += bias[c];
    });
}

// db[cols] = sum over rows of dx[rows, cols], rows in order (nothing when db is null).
void column_sums(const exec &ex, const float *dx, int64_t rows, int64_t cols, float *db) {
    if (!db) return;
    parallel_for(ex, cols, 256, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) db[c] = 0.0f;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = begin; c < end; ++c) db[c] += dx[r * cols + c];
    });
}

// out[rows, n] = x[rows, d_model] W^T + b, W is [n, d_model].
void linear(const exec &ex, const float *x, int64_t rows, int64_t d_model, const float *w,
            const float *b, int64_t n, float *out) {
    gemm(ex, ATTN_NO_TRANS, ATTN_TRANS, rows, n, d_model, 1.0f, x, d_model, w, d_model, 0.0f,
         out, n);
    add_bias(ex, out, rows, n, b);
}

struct projections {
    floats q, k, v, context;
    projections(const attn_mha_desc &d)
        : q(size_t(d.batch * d.len_q * d.heads * d.head_dim)),
          k(size_t(d.batch * d.len_kv * d.heads_kv * d.head_dim)),
          v(k.size()),
          context(q.size()) {}
};

// Q, K, V projections and the attention C; lse [batch, heads, len_q] when given.
void attend(const exec &ex, const attn_mha_desc &d, const float *x_q, const float *x_kv,
            projections &p, float *lse, const row_stats *stats = nullptr) {
    const int64_t wq = d.heads * d.head_dim, wkv = d.heads_kv * d.head_dim;
    linear(ex, x_q, d.batch * d.len_q, d.d_model, d.w_q, d.b_q, wq, p.q.data());
    linear(ex, x_kv, d.batch * d.len_kv, d.d_model, d.w_k, d.b_k, wkv, p.k.data());
    linear(ex, x_kv, d.batch * d.len_kv, d.d_model, d.w_v, d.b_v, wkv, p.v.data());
    attn_sdpa_desc s = ref::mha_attention_desc(d);
    s.lse = lse;
    sdpa(ex, s, p.q.data(), p.k.data(), p.v.data(), p.context.data(), stats);
}

void copy_out(const floats &from, float *to) {
    if (to) std::memcpy(to, from.data(), from.size() * sizeof(float));
}

}  // namespace

void mha_forward(const exec &ex, const attn_mha_desc &d, const float *x_q, const float *x_kv,
                 float *y) {
    if (ex.reference) {
        ref::mha_forward(d, x_q, x_kv, y);
        return;
    }
    projections p(d);
    attend(ex, d, x_q, x_kv, p, nullptr);
    // y is written by this last product only (it allocates before it writes).
    linear(ex, p.context.data(), d.batch * d.len_q, d.heads * d.head_dim, d.w_o, d.b_o,
           d.d_model, y);
}

void mha_backward(const exec &ex, const attn_mha_desc &d, const float *x_q, const float *x_kv,
                  const float *dy, float *dx_q, float *dx_kv, const attn_mha_grads &g) {
    if (ex.reference) {
        ref::mha_backward(d, x_q, x_kv, dy, dx_q, dx_kv, g);
        return;
    }
    const int64_t rows_q = d.batch * d.len_q, rows_kv = d.batch * d.len_kv;
    const int64_t wq = d.heads * d.head_dim, wkv = d.heads_kv * d.head_dim;
    const int64_t dm = d.d_model;
    // For self-attention without dx_kv, the key/value contribution goes into dx_q.
    const bool kv_into_q = !dx_kv && dx_q && x_kv == x_q && d.len_kv == d.len_q;

    projections p(d);
    floats lse(size_t(d.batch * d.heads * d.len_q));
    // the forward's row max and sum, so the backward's P carries no rounding of lse
    floats row_max(lse.size()), row_sum(lse.size());
    const row_stats stats{row_max.data(), row_sum.data()};
    floats dcontext(size_t(rows_q * wq)), dq(size_t(rows_q * wq));
    floats dk(size_t(rows_kv * wkv)), dv(size_t(rows_kv * wkv));
    floats dw_o(g.dw_o ? size_t(dm * wq) : 0), db_o(g.db_o ? size_t(dm) : 0);
    floats dw_q(g.dw_q ? size_t(wq * dm) : 0), db_q(g.db_q ? size_t(wq) : 0);
    floats dw_k(g.dw_k ? size_t(wkv * dm) : 0), db_k(g.db_k ? size_t(wkv) : 0);
    floats dw_v(g.dw_v ? size_t(wkv * dm) : 0), db_v(g.db_v ? size_t(wkv) : 0);
    floats dxq(dx_q ? size_t(rows_q * dm) : 0), dxkv(dx_kv ? size_t(rows_kv * dm) : 0);

    attend(ex, d, x_q, x_kv, p, lse.data(), &stats);

    // Output projection: dC = dy W_o, dW_o = dy^T C, db_o = column sums of dy.
    gemm(ex, ATTN_NO_TRANS, ATTN_NO_TRANS, rows_q, wq, dm, 1.0f, dy, dm, d.w_o, wq, 0.0f,
         dcontext.data(), wq);
    if (g.dw_o)
        gemm(ex, ATTN_TRANS, ATTN_NO_TRANS, dm, wq, rows_q, 1.0f, dy, dm, p.context.data(), wq,
             0.0f, dw_o.data(), wq);
    column_sums(ex, dy, rows_q, dm, g.db_o ? db_o.data() : nullptr);

    // Attention: dQ, dK, dV from dC.
    sdpa_backward(ex, ref::mha_attention_desc(d), p.q.data(), p.k.data(), p.v.data(), p.context.data(),
                  dcontext.data(), lse.data(), dq.data(), dk.data(), dv.data(), &stats);

    // Input projections: dW = dProj^T x, db = column sums of dProj.
    if (g.dw_q)
        gemm(ex, ATTN_TRANS, ATTN_NO_TRANS, wq, dm, rows_q, 1.0f, dq.data(), wq, x_q, dm, 0.0f,
             dw_q.data(), dm);
    if (g.dw_k)
        gemm(ex, ATTN_TRANS, ATTN_NO_TRANS, wkv, dm, rows_kv, 1.0f, dk.data(), wkv, x_kv, dm,
             0.0f, dw_k.data(), dm);
    if (g.dw_v)
        gemm(ex, ATTN_TRANS, ATTN_NO_TRANS, wkv, dm, rows_kv, 1.0f, dv.data(), wkv, x_kv, dm,
             0.0f, dw_v.data(), dm);
    column_sums(ex, dq.data(), rows_q, wq, g.db_q ? db_q.data() : nullptr);
    column_sums(ex, dk.data(), rows_kv, wkv, g.db_k ? db_k.data() : nullptr);
    column_sums(ex, dv.data(), rows_kv, wkv, g.db_v ? db_v.data() : nullptr);

    // Inputs: dx_q = dQ W_q; dx_kv = dK W_k + dV W_v.
    if (dx_q)
        gemm(ex, ATTN_NO_TRANS, ATTN_NO_TRANS, rows_q, dm, wq, 1.0f, dq.data(), wq, d.w_q, dm,
             0.0f, dxq.data(), dm);
    float *dkv_into = kv_into_q ? dxq.data() : (dx_kv ? dxkv.data() : nullptr);
    if (dkv_into) {
        gemm(ex, ATTN_NO_TRANS, ATTN_NO_TRANS, rows_kv, dm, wkv, 1.0f, dk.data(), wkv, d.w_k, dm,
             kv_into_q ? 1.0f : 0.0f, dkv_into, dm);
        gemm(ex, ATTN_NO_TRANS, ATTN_NO_TRANS, rows_kv, dm, wkv, 1.0f, dv.data(), wkv, d.w_v, dm,
             1.0f, dkv_into, dm);
    }

    // Every gradient is complete: only now are the outputs written.
    copy_out(dw_o, g.dw_o);
    copy_out(db_o, g.db_o);
    copy_out(dw_q, g.dw_q);
    copy_out(db_q, g.db_q);
    copy_out(dw_k, g.dw_k);
    copy_out(db_k, g.db_k);
    copy_out(dw_v, g.dw_v);
    copy_out(db_v, g.db_v);
    copy_out(dxq, dx_q);
    copy_out(dxkv, dx_kv);
}

}  // namespace attn::ops
