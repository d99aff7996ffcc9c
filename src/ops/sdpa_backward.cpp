// The fused backward of scaled dot-product attention on the SIMD path (FlashAttention-2's
// algorithm; the tile kernel is kernels/attention_backward.hpp).
//   1. per query row: the forward's statistics m, 1/l (given, from lse, or recomputed by the
//      forward kernel with its output discarded), delta = rowsum(dO o O), the dropout key;
//   2. tasks over (batch, kv head, key chunk): each key tile of the chunk keeps its dK, dV in
//      the scratch while the query rows of every query head of the group stream past, in head
//      order (GQA sums in a fixed order), and writes them once; dS K is accumulated into the
//      chunk's dQ (chunk 0: dq itself; others: dense partials), key tile after key tile;
//   3. dq = scale (dq + partial_1 + ... ), in chunk order; rows without gradient are zeros.
// The chunks depend on the shape only, and every sum has a fixed order: the gradients are the
// same bits for every thread count. S and dP exist only as br x bk tiles: memory beyond the
// inputs and outputs is O(rows) plus the partials, which are capped (none when the heads alone
// give enough tasks). Every buffer is allocated before an output is written.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention_args.hpp"
#include "kernels/kernels.hpp"
#include "ops/backward_switch.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "ops/sdpa_masking.hpp"
#include "ops/sdpa_paging.hpp"
#include "ops/seq_rows.hpp"
#include "ref/dropout.hpp"
#include "ref/ref.hpp"

namespace attn::ops {
namespace {

const float neg_inf = -std::numeric_limits<float>::infinity();
// Key chunks per head are added until (batch x kv heads x chunks) reaches this many tasks,
// while the dQ partials they need stay within max_partial_floats (32 MB).
constexpr int64_t target_tasks = 8;
constexpr int64_t max_partial_floats = int64_t(8) << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::atomic<int> &composed_flag() {
    static std::atomic<int> flag{[] {
        const char *e = std::getenv("ATTN_BACKWARD_COMPOSED");
        return e && e[0] == '1' ? 1 : 0;
    }()};
    return flag;
}

// The score features the fused kernel does not take yet (sliding windows, softcap, ALiBi,
// sinks, per-sequence causal alignment) go through the composed backward, which follows the
// one score definition (kernels/attention_scores.hpp).
// The causal limit of the alignments the fused kernel takes: keys j <= i + offset.
int64_t causal_offset(const attn_sdpa_desc &d) { return is_causal(d) ? query_offset(d, 0) : no_causal; }

bool needs_composed(const attn_sdpa_desc &d) {
    // packed sequences (q_start, kv_start): each sequence its own counts and alignment
    return d.q_start || d.kv_start || d.window_left >= 0 || d.window_right >= 0 ||
           d.softcap > 0.0f || d.alibi_slopes || d.sinks ||
           d.causal == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
}

}  // namespace

void set_backward_composed(bool composed) { composed_flag().store(composed ? 1 : 0); }
bool backward_composed() { return composed_flag().load() != 0; }

void sdpa_backward(const exec &ex, const attn_sdpa_desc &d, const float *q, const float *k,
                   const float *v, const float *out, const float *dout, const float *lse,
                   float *dq, float *dk, float *dv, const row_stats *stats) {
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (!kt) {
        ref::sdpa_backward(d, q, k, v, out, dout, lse, dq, dk, dv);
        return;
    }
    if (backward_composed() || needs_composed(d)) {
        sdpa_backward_composed(ex, d, q, k, v, out, dout, lse, dq, dk, dv);
        return;
    }
    const seq_rows seqs(d);  // dense here: packed sequences take the composed backward
    const int64_t bk = kt->attention_backward_bk;
    const int64_t group = d.heads_q / d.heads_kv;
    const int64_t offset = causal_offset(d);
    const bool dropout = d.dropout_p > 0.0f;
    const int64_t rows_total = d.batch * d.heads_q * d.len_q;
    const int64_t key_tiles = ceil_div(d.len_kv, bk);
    const int64_t heads = d.batch * d.heads_kv;
    const int64_t dq_floats = rows_total * d.dim_qk;
    int64_t chunks = std::min(key_tiles, ceil_div(target_tasks, heads));
    if (chunks > 1 && (chunks - 1) * dq_floats > max_partial_floats)
        chunks = std::max<int64_t>(1, 1 + max_partial_floats / dq_floats);
    const int64_t chunk_tiles = ceil_div(key_tiles, chunks);
    chunks = ceil_div(key_tiles, chunk_tiles);

    // ---- scratch, all before any output is written ----
    const int slots = worker_slots(ex);
    const int64_t slot_floats =
        ceil_div(kt->attention_backward_scratch_floats(d.dim_qk, d.dim_v), 16) * 16;
    aligned_floats scratch(size_t(slot_floats * slots));
    const size_t n_rows = static_cast<size_t>(rows_total);
    std::vector<float> row_max(n_rows), row_inv(n_rows), row_delta(n_rows);
    std::vector<uint32_t> row_keys(dropout ? size_t(rows_total) : 0);
    std::vector<float> partials(size_t((chunks - 1) * dq_floats), 0.0f);
    // Recomputed statistics: the forward kernel per query tile, its output into the scratch.
    const bool recompute = !stats && !lse;
    const int64_t br_f = kt->attention_br;
    const int64_t fwd_floats = ceil_div(kt->attention_scratch_floats(d.dim_qk, d.dim_v), 16) * 16;
    std::unique_ptr<aligned_floats> fwd_scratch;
    std::vector<float> fwd_out(recompute ? size_t(slots * br_f * d.dim_v) : 0),
        fwd_lse(recompute ? size_t(slots * br_f) : 0), fwd_sum(recompute ? size_t(rows_total) : 0);
    if (recompute) fwd_scratch = std::make_unique<aligned_floats>(size_t(fwd_floats * slots));

    // ---- 1. per-row statistics, delta, dropout keys ----
    if (recompute) {
        const int64_t q_tiles = ceil_div(d.len_q, br_f);
        parallel_tasks(ex, d.batch * d.heads_q * q_tiles, [&](int64_t task) {
            const int64_t bh = task / q_tiles, i0 = (task % q_tiles) * br_f;
            const int64_t b = bh / d.heads_q, h = bh % d.heads_q, hk = h / group;
            const int s = worker_slot(ex);
            kernels::attention_tile t{};
            t.rows = std::min(br_f, d.len_q - i0);
            t.q = q + seqs.q_at(b, h, i0);
            t.q_type = t.out_type = ATTN_DTYPE_F32;
            t.q_ld = d.q.seq;
            t.dim_qk = d.dim_qk;
            t.dim_v = d.dim_v;
            t.scale = d.scale;
            t.k = seqs.k_rows(k, b, hk);
            t.len_kv = seqs.visible_keys(b);
            t.v = seqs.v_rows(v, b, hk);
            t.visibility = seqs.visibility(b);
            t.key_end = t.visibility.row(i0 + t.rows - 1).hi;
            t.first_row = i0;
            if (d.mask) {
                t.mask = d.mask + b * d.mask_strides.batch + h * d.mask_strides.head +
                         i0 * d.mask_strides.seq;
                t.mask_ld = d.mask_strides.seq;
            }
            t.scratch = fwd_scratch->get() + s * fwd_floats;
            t.out = fwd_out.data() + s * br_f * d.dim_v;
            t.out_ld = d.dim_v;
            t.lse = fwd_lse.data() + s * br_f;
            t.row_max = row_max.data() + seqs.row(b, h, i0);
            t.row_sum = fwd_sum.data() + seqs.row(b, h, i0);
            kt->attention_forward_tile(t);
        });
    }
    parallel_for(ex, rows_total, 256, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t i = row % d.len_q, bh = row / d.len_q;
            const int64_t b = bh / d.heads_q, h = bh % d.heads_q;
            float m, l;
            if (stats) m = stats->max[row], l = stats->sum[row];
            else if (lse) m = lse[row], l = 1.0f;
            else m = row_max[size_t(row)], l = fwd_sum[size_t(row)];
            if (l == 0.0f) m = neg_inf;
            row_max[size_t(row)] = m;
            row_inv[size_t(row)] = 1.0f / l;
            // delta_i = dO_i . O_i = sum_j P_ij z_ij dP_ij, as O = (P z) V
            const float *o = out + seqs.out_at(b, h, i);
            const float *g = dout + seqs.out_at(b, h, i);
            float delta = 0.0f;
            if (m != neg_inf)
                for (int64_t c = 0; c < d.dim_v; ++c) delta += g[c] * o[c];
            row_delta[size_t(row)] = delta;
            if (dropout) row_keys[size_t(row)] = dropout::row_key(d.dropout_seed, b, h, i);
        }
    });

    // ---- 2. key tiles; dq (chunk 0) starts from zero ----
    parallel_for(ex, rows_total, 256, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t i = row % d.len_q, bh = row / d.len_q;
            float *dst = dq + seqs.q_at(bh / d.heads_q, bh % d.heads_q, i);
            std::memset(dst, 0, sizeof(float) * size_t(d.dim_qk));
        }
    });
    parallel_tasks(ex, heads * chunks, [&](int64_t task) {
        const int64_t head = task / chunks, chunk = task % chunks;
        const int64_t b = head / d.heads_kv, hk = head % d.heads_kv;
        const int64_t keys_b = keys_in_batch(d, b);
        kernels::attention_backward_tile t{};
        t.dim_qk = d.dim_qk;
        t.dim_v = d.dim_v;
        t.scale = d.scale;
        t.k_ld = d.k.seq;
        t.v_ld = d.v.seq;
        t.dk_ld = d.k.seq;
        t.dv_ld = d.v.seq;
        t.q_ld = d.q.seq;
        t.dout_ld = d.out.seq;
        t.causal_offset = offset;
        t.mask_ld = d.mask_strides.seq;
        t.dropout_threshold = dropout ? dropout::threshold(d.dropout_p) : 0;
        t.dropout_keep = dropout ? dropout::keep_scale(d.dropout_p) : 1.0f;
        t.scratch = scratch.get() + worker_slot(ex) * slot_floats;
        const int64_t tile_end = std::min(key_tiles, (chunk + 1) * chunk_tiles);
        for (int64_t kt_i = chunk * chunk_tiles; kt_i < tile_end; ++kt_i) {
            const int64_t key0 = kt_i * bk;
            const int64_t tile_keys = std::min(bk, d.len_kv - key0);
            t.key0 = key0;
            t.keys = std::max<int64_t>(0, std::min(tile_keys, keys_b - key0));
            t.k = k + seqs.k_at(b, hk, key0);
            t.v = v + seqs.v_at(b, hk, key0);
            t.dk = dk + seqs.k_at(b, hk, key0);
            t.dv = dv + seqs.v_at(b, hk, key0);
            // keys past the batch's length get no gradient
            for (int64_t c = t.keys; c < tile_keys; ++c) {
                std::memset(t.dk + c * d.k.seq, 0, sizeof(float) * size_t(d.dim_qk));
                std::memset(t.dv + c * d.v.seq, 0, sizeof(float) * size_t(d.dim_v));
            }
            if (t.keys == 0) continue;
            // queries before key0 - offset see none of the tile's keys
            const int64_t row_begin = std::clamp<int64_t>(key0 - offset, 0, d.len_q);
            for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
                const int64_t bh = b * d.heads_q + h;
                t.first_head = h == hk * group;
                t.last_head = h == (hk + 1) * group - 1;
                t.q = q + seqs.q_at(b, h, 0);
                t.dout = dout + seqs.out_at(b, h, 0);
                if (chunk == 0) {
                    t.dq = dq + seqs.q_at(b, h, 0);
                    t.dq_ld = d.q.seq;
                } else {
                    t.dq = partials.data() + (chunk - 1) * dq_floats + bh * d.len_q * d.dim_qk;
                    t.dq_ld = d.dim_qk;
                }
                t.row_max = row_max.data() + bh * d.len_q;
                t.row_inv_sum = row_inv.data() + bh * d.len_q;
                t.row_delta = row_delta.data() + bh * d.len_q;
                t.dropout_keys = dropout ? row_keys.data() + bh * d.len_q : nullptr;
                t.mask = d.mask ? d.mask + b * d.mask_strides.batch + h * d.mask_strides.head
                                : nullptr;
                t.row_begin = row_begin;
                t.row_end = d.len_q;
                kt->attention_backward_tile(t);
            }
        }
    });

    // ---- 3. dq = scale * (sum of the chunks, in order) ----
    parallel_for(ex, rows_total, 256, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t i = row % d.len_q, bh = row / d.len_q;
            float *dst = dq + seqs.q_at(bh / d.heads_q, bh % d.heads_q, i);
            const bool none = row_max[size_t(row)] == neg_inf;
            for (int64_t c = 0; c < d.dim_qk; ++c) {
                float sum = dst[c];
                for (int64_t p = 1; p < chunks; ++p) sum += partials[size_t((p - 1) * dq_floats + row * d.dim_qk + c)];
                dst[c] = none ? 0.0f : d.scale * sum;
            }
        }
    });
}

}  // namespace attn::ops
