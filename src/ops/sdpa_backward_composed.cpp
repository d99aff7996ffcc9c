// The composed backward of scaled dot-product attention (the SIMD path before the fused one in
// sdpa_backward.cpp, dense or packed, q_start / kv_start, every row through core/seq_rows.hpp;
// kept for comparison — tests and benchmarks — and reached through ops/backward_switch.hpp
// only), composed from the GEMM
// (ops::gemm) and the kernels' vector exp. One task per (batch, kv head): its query heads,
// in order, and their query rows in blocks of block_rows (so scratch stays O(rows x len_kv)):
//   S   = the scores of core/scores.hpp from scale Q_blk K^T (softcap, + mask,
//         - ALiBi), hidden keys (window, causal, kv_len) -> P = 0; the block's keys are
//         those between its first row's window and its last row's limit
//   P   = exp(S - lse)                              lse from the forward, or recomputed
//   dPz = (dO_blk V^T) * z                          z = dropout factors (1 without dropout)
//   D_i = sum_j P_ij dPz_ij
//   dS  = P * (dPz - D) * g                         g = d s / d (scaled score) (softcap)
//   dsink_h -= P_sink D                             P_sink = exp(sink_h - lse)
//   dV += (P * z)^T dO_blk,  dK += scale dS^T Q_blk,  dQ_blk = scale dS K
// as the reference (src/ref/sdpa_backward.cpp). dK and dV of a head are accumulated by one
// task in a fixed order, and the GEMM's results do not depend on its thread count: the
// gradients are the same for every thread count. They go to scratch first and are copied
// out at the end, so a failed allocation leaves dq, dk, dv untouched.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "core/scores.hpp"
#include "core/dropout.hpp"
#include "core/seq_rows.hpp"
#include "ref/ref.hpp"

namespace attn::ops {
namespace {

constexpr int64_t block_rows = 64;
const float neg_inf = -std::numeric_limits<float>::infinity();

// Copies the rows of every sequence from the dense scratch (at from_at(b, h, i)) into the
// strided or packed tensor (at to_at(b, h, i)); `heads` heads, count(b) rows a sequence.
template <class From, class To, class Count>
void copy_rows(const exec &ex, const float *from, float *to, int64_t batch, int64_t heads,
               int64_t dim, const From &from_at, const To &to_at, const Count &count) {
    parallel_for(ex, batch * heads, 1, [&](int64_t begin, int64_t end) {
        for (int64_t bh = begin; bh < end; ++bh) {
            const int64_t b = bh / heads, h = bh % heads;
            for (int64_t j = 0; j < count(b); ++j)
                std::memcpy(to + to_at(b, h, j), from + from_at(b, h, j) * dim,
                            sizeof(float) * size_t(dim));
        }
    });
}

// Rows [i0, i0 + rows) of (b, h) over the block's keys [k0, k0 + keys) (column j is key
// k0 + j, rows len_kv apart): S in p becomes P z and dP in dp becomes dS, as above; g holds
// d s / d (scaled score) with softcap (null without); the sink's gradient joins *dsink_part
// (null: not wanted).
void block_gradients(const kernels::kernel_table *kt, const seq_rows &seqs, const float *out,
                     const float *dout, const float *lse, int64_t b, int64_t h, int64_t i0,
                     int64_t rows, int64_t k0, int64_t keys, float *p, float *dp, float *g,
                     float *dsink_part) {
    const attn_sdpa_desc &d = seqs.desc();
    const int64_t len_kv = d.len_kv;
    const bool dropout = d.dropout_p > 0.0f;
    const uint32_t threshold = dropout ? dropout::threshold(d.dropout_p) : 0;
    const float keep = dropout ? dropout::keep_scale(d.dropout_p) : 1.0f;
    const kernels::key_visibility visibility = seqs.visibility(b);
    const kernels::score_terms terms = score_terms_for(d, h);
    const float sink = sink_for(d, h);
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = i0 + r;
            float *p_row = p + r * len_kv, *dp_row = dp + r * len_kv;
            float *g_row = g ? g + r * len_kv : nullptr;
            // this row's keys [lo, hi) as columns
            const kernels::key_range seen = visibility.row(i);
            const int64_t lo = seen.lo - k0 < 0 ? 0 : seen.lo - k0;
            int64_t hi = seen.hi - k0 > keys ? keys : seen.hi - k0;
            if (hi < lo) hi = lo;
            const float *mask_row = d.mask ? d.mask + b * d.mask_strides.batch +
                                                 h * d.mask_strides.head +
                                                 i * d.mask_strides.seq + k0
                                           : nullptr;
            // the score definition on the scaled scores; g = its slope (softcap)
            const int64_t at = i + visibility.offset;
            for (int64_t j = lo; j < hi; ++j) {
                if (g_row) g_row[j] = kernels::score_slope(terms, p_row[j]);
                p_row[j] = kernels::finish_score(terms, p_row[j],
                                                 mask_row ? mask_row[j] : 0.0f, at, k0 + j);
            }
            for (int64_t j = 0; j < lo; ++j) p_row[j] = neg_inf;
            for (int64_t j = hi; j < keys; ++j) p_row[j] = neg_inf;
            // fully masked (no finite score): no gradient flows, as in the reference
            float m = neg_inf;
            for (int64_t j = lo; j < hi; ++j) m = p_row[j] > m ? p_row[j] : m;
            if (m == neg_inf) {
                std::memset(p_row, 0, sizeof(float) * size_t(keys));
                std::memset(dp_row, 0, sizeof(float) * size_t(keys));
                continue;
            }
            // the row's lse: the forward's, or log sum exp recomputed (with the sink)
            float row_lse = lse ? lse[seqs.lse_at(b, h, i)] : 0.0f;
            if (!lse) {
                const float top = sink > m ? sink : m;
                float sum = sink == neg_inf ? 0.0f : std::exp(sink - top);
                for (int64_t j = lo; j < hi; ++j) sum += std::exp(p_row[j] - top);
                row_lse = top + std::log(sum);
            }
            // P = exp(S - lse)
            for (int64_t j = 0; j < keys; ++j) p_row[j] -= row_lse;
            kt->exp_array(p_row, p_row, keys);
            // a hidden key's dO . V (NaN if its V row is) must not reach D
            for (int64_t j = 0; j < lo; ++j) dp_row[j] = 0.0f;
            for (int64_t j = hi; j < keys; ++j) dp_row[j] = 0.0f;
            // dPz = dP z, dS = P (dPz - D), then P z for dV
            if (dropout) {
                const uint32_t key = dropout::row_key(d.dropout_seed, b, h, i);
                for (int64_t j = 0; j < keys; ++j)
                    dp_row[j] *= dropout::dropped(key, k0 + j, threshold) ? 0.0f : keep;
            }
            // D = dO . O (FlashAttention's delta: sum_j P_j dP_j when out is the
            // forward's output), from out as every path takes it
            const int64_t at_row = seqs.out_at(b, h, i);
            float big_d = 0.0f;
            for (int64_t c = 0; c < d.dim_v; ++c) big_d += dout[at_row + c] * out[at_row + c];
            for (int64_t j = 0; j < keys; ++j) dp_row[j] = p_row[j] * (dp_row[j] - big_d);
            if (g_row)
                for (int64_t j = lo; j < hi; ++j) dp_row[j] *= g_row[j];
            if (dsink_part && sink != neg_inf) *dsink_part -= std::exp(sink - row_lse) * big_d;
            if (dropout) {
                const uint32_t key = dropout::row_key(d.dropout_seed, b, h, i);
                for (int64_t j = 0; j < keys; ++j)
                    p_row[j] *= dropout::dropped(key, k0 + j, threshold) ? 0.0f : keep;
            }
        }

}

// Row j of kv head hk of sequence b in the gathered dK and dV: [heads_kv, K_b] blocks of each
// sequence, in sequence order.
int64_t key_block_row(const seq_rows &seqs, int64_t b, int64_t hk, int64_t j) {
    return seqs.key_row0(b) * seqs.desc().heads_kv + hk * seqs.keys(b) + j;
}

// Every gradient is complete: only now are dq, dk, dv (and dsinks, summed over the batch in
// order) written, from the gathered rows to the caller's layout.
void write_gradients(const exec &ex, const seq_rows &seqs, const std::vector<float> &dsink_parts,
                     const std::vector<float> &dq_all, const std::vector<float> &dk_all,
                     const std::vector<float> &dv_all, float *dq, float *dk, float *dv) {
    const attn_sdpa_desc &d = seqs.desc();
    if (d.dsinks)
        for (int64_t h = 0; h < d.heads_q; ++h) {
            float sum = 0.0f;
            for (int64_t b = 0; b < d.batch; ++b) sum += dsink_parts[size_t(b * d.heads_q + h)];
            d.dsinks[h] = sum;
        }
    auto key_row = [&](int64_t b, int64_t hk, int64_t j) { return key_block_row(seqs, b, hk, j); };
    auto queries = [&](int64_t b) { return seqs.queries(b); };
    auto keys = [&](int64_t b) { return seqs.keys(b); };
    auto q_row = [&](int64_t b, int64_t h, int64_t i) { return seqs.row(b, h, i); };
    auto q_at = [&](int64_t b, int64_t h, int64_t i) { return seqs.q_at(b, h, i); };
    auto k_at = [&](int64_t b, int64_t hk, int64_t j) { return seqs.k_at(b, hk, j); };
    auto v_at = [&](int64_t b, int64_t hk, int64_t j) { return seqs.v_at(b, hk, j); };
    copy_rows(ex, dq_all.data(), dq, d.batch, d.heads_q, d.dim_qk, q_row, q_at, queries);
    copy_rows(ex, dk_all.data(), dk, d.batch, d.heads_kv, d.dim_qk, key_row, k_at, keys);
    copy_rows(ex, dv_all.data(), dv, d.batch, d.heads_kv, d.dim_v, key_row, v_at, keys);
}

}  // namespace

void sdpa_backward_composed(const exec &ex, const attn_sdpa_desc &d, const float *q,
                            const float *k, const float *v, const float *out, const float *dout,
                            const float *lse, float *dq, float *dk, float *dv) {
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (!kt) {
        ref::sdpa_backward(d, q, k, v, out, dout, lse, dq, dk, dv);
        return;
    }
    const seq_rows seqs(d);  // each sequence's rows and counts (packed or dense)
    const int64_t group = d.heads_q / d.heads_kv, len_kv = d.len_kv;

    // ---- scratch, all before any output is written ----
    const int slots = worker_slots(ex);
    const bool softcap = d.softcap > 0.0f;
    const int64_t slot_floats = (softcap ? 3 : 2) * block_rows * len_kv;
    // d loss / d sink of (b, h), summed over b in order at the end (tasks own a b each)
    std::vector<float> dsink_parts(d.dsinks ? size_t(d.batch * d.heads_q) : 0, 0.0f);
    std::vector<float> slot_scratch(size_t(slot_floats * slots));
    // dq in seqs.row() order; dk, dv as [heads_kv, K_b] blocks of each sequence, in order
    std::vector<float> dq_all(size_t(seqs.rows_total() * d.dim_qk), 0.0f);
    std::vector<float> dk_all(size_t(d.heads_kv * seqs.key_rows_total() * d.dim_qk), 0.0f);
    std::vector<float> dv_all(size_t(d.heads_kv * seqs.key_rows_total() * d.dim_v), 0.0f);
    auto key_row = [&](int64_t b, int64_t hk, int64_t j) { return key_block_row(seqs, b, hk, j); };
    // With at least as many heads as threads, the heads run in parallel and each GEMM on its
    // head's thread; with fewer, the heads run one after the other and each GEMM uses every
    // thread. Either way every GEMM computes the same bits.
    const int64_t heads = d.batch * d.heads_kv;
    const bool across_heads = heads >= slots;
    exec serial = ex;
    serial.arena = nullptr;
    serial.num_threads = 1;
    const exec &inner = across_heads ? serial : ex;

    auto head_backward = [&](int64_t head, int slot) {
        const int64_t b = head / d.heads_kv, hk = head % d.heads_kv;
        float *p = slot_scratch.data() + slot * slot_floats;  // S, then P, then P z
        float *dp = p + block_rows * len_kv;                              // dP z, then dS
        float *g = dp + block_rows * len_kv;                              // d s / d scaled
        const kernels::key_visibility visibility = seqs.visibility(b);
        const int64_t len_q = seqs.queries(b);

        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
            for (int64_t i0 = 0; i0 < len_q; i0 += block_rows) {
                const int64_t rows = len_q - i0 < block_rows ? len_q - i0 : block_rows;
                // Keys [k0, k0 + keys): left of the first row's window and past the last
                // row's limit (window, causal, kv_len) are skipped. Column j is key k0 + j.
                const int64_t k0 = visibility.row(i0).lo;
                const int64_t keys = visibility.row(i0 + rows - 1).hi - k0;
                if (keys <= 0) continue;
                const float *k_head = k + seqs.k_at(b, hk, k0);
                const float *v_head = v + seqs.v_at(b, hk, k0);
                float *dk_head = dk_all.data() + key_row(b, hk, k0) * d.dim_qk;
                float *dv_head = dv_all.data() + key_row(b, hk, k0) * d.dim_v;
                const float *q_blk = q + seqs.q_at(b, h, i0);
                const float *do_blk = dout + seqs.out_at(b, h, i0);
                const int64_t row0 = seqs.row(b, h, i0);  // rows of (b, h) are consecutive

                // S = scale Q K^T; dP = dO V^T
                gemm(inner, ATTN_NO_TRANS, ATTN_TRANS, rows, keys, d.dim_qk, d.scale, q_blk,
                     d.q.seq, k_head, d.k.seq, 0.0f, p, len_kv);
                gemm(inner, ATTN_NO_TRANS, ATTN_TRANS, rows, keys, d.dim_v, 1.0f, do_blk,
                     d.out.seq, v_head, d.v.seq, 0.0f, dp, len_kv);

                block_gradients(kt, seqs, out, dout, lse, b, h, i0, rows, k0, keys, p, dp,
                                softcap ? g : nullptr,
                                dsink_parts.empty() ? nullptr
                                                    : &dsink_parts[size_t(b * d.heads_q + h)]);

                // dV += (P z)^T dO; dK += scale dS^T Q; dQ = scale dS K
                gemm(inner, ATTN_TRANS, ATTN_NO_TRANS, keys, d.dim_v, rows, 1.0f, p, len_kv,
                     do_blk, d.out.seq, 1.0f, dv_head, d.dim_v);
                gemm(inner, ATTN_TRANS, ATTN_NO_TRANS, keys, d.dim_qk, rows, d.scale, dp, len_kv,
                     q_blk, d.q.seq, 1.0f, dk_head, d.dim_qk);
                gemm(inner, ATTN_NO_TRANS, ATTN_NO_TRANS, rows, d.dim_qk, keys, d.scale, dp,
                     len_kv, k_head, d.k.seq, 0.0f, dq_all.data() + row0 * d.dim_qk, d.dim_qk);
            }
        }
    };
    if (across_heads)
        parallel_tasks(ex, heads, [&](int64_t head) { head_backward(head, worker_slot(ex)); });
    else
        for (int64_t head = 0; head < heads; ++head) head_backward(head, 0);

    write_gradients(ex, seqs, dsink_parts, dq_all, dk_all, dv_all, dq, dk, dv);
}

}  // namespace attn::ops
