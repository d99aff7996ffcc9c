// Steps 1 and 3 of the fused backward (sdpa_backward_rows.hpp): what is computed row by row.
#include "ops/sdpa_backward_rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/convert.hpp"
#include "core/dropout.hpp"
#include "core/scores.hpp"
#include "kernels/attention_args.hpp"

namespace attn::ops {
namespace {

const float neg_inf = -std::numeric_limits<float>::infinity();

// The forward entry with bf16 products whose scores the bf16 backward's match (the tiles
// pack K and V themselves when not given them packed), or null.
const kernels::attention_impl *pair_entry(const kernels::kernel_table &kt) {
    const kernels::attention_impl_list &l = kt.attention_impls;
    for (int i = 0; i < l.count; ++i)
        if (l.entries[i].pair_products && l.entries[i].packs()) return &l.entries[i];
    return nullptr;
}

// sum_c a[c] b[c] over n elements of type t (widened exactly), in order, in f32.
float dot_row(const void *a, const void *b, attn_dtype t, int64_t n) {
    float sum = 0.0f;
    if (t == ATTN_DTYPE_F32) {
        const float *x = static_cast<const float *>(a), *y = static_cast<const float *>(b);
        for (int64_t c = 0; c < n; ++c) sum += x[c] * y[c];
        return sum;
    }
    const uint16_t *x = static_cast<const uint16_t *>(a), *y = static_cast<const uint16_t *>(b);
    const bool bf16 = t == ATTN_DTYPE_BF16;
    for (int64_t c = 0; c < n; ++c)
        sum += (bf16 ? convert::bf16_to_f32(x[c]) : convert::f16_to_f32(x[c])) *
               (bf16 ? convert::bf16_to_f32(y[c]) : convert::f16_to_f32(y[c]));
    return sum;
}

}  // namespace

row_place place_of_row(const seq_rows &seqs, int64_t row) {
    const attn_sdpa_desc &d = seqs.desc();
    if (!d.q_start) {
        const int64_t bh = row / d.len_q;
        return {bh / d.heads_q, bh % d.heads_q, row % d.len_q};
    }
    // rows of sequence b: [q_start[b] heads_q, q_start[b + 1] heads_q), so the sequence is the
    // last whose first query is at most row / heads_q (one with no queries is never found)
    const int64_t query = row / d.heads_q;
    const int64_t b = std::upper_bound(d.q_start, d.q_start + d.batch + 1, query) - d.q_start - 1;
    const int64_t n = seqs.queries(b), in_seq = row - int64_t(d.q_start[b]) * d.heads_q;
    return {b, in_seq / n, in_seq % n};
}

void recompute_statistics(const exec &ex, const kernels::kernel_table &kt, const seq_rows &seqs,
                          bool pairs, const void *q, const void *k, const void *v, float *row_max,
                          float *row_sum) {
    const attn_sdpa_desc &d = seqs.desc();
    const int slots = worker_slots(ex);
    const kernels::attention_impl *tiles = pairs ? pair_entry(kt) : nullptr;
    const int64_t br = tiles ? tiles->br : kt.attention_br;
    const int64_t bc = tiles ? tiles->bc : kt.attention_bc;
    const int64_t group = d.heads_q / d.heads_kv;
    const int64_t tile_floats =
        ceil_div(tiles ? tiles->scratch_floats(d.dim_qk, d.dim_v)
                       : kt.attention_scratch_floats(d.dim_qk, d.dim_v), 16) * 16;
    aligned_floats scratch(size_t(tile_floats * slots));
    std::vector<float> out(size_t(slots * br * d.dim_v)), lse(size_t(slots * br));
    // tasks: each sequence's (head, query tile) pairs, the sequences in order
    std::vector<int64_t> first_task(size_t(d.batch + 1), 0);
    for (int64_t b = 0; b < d.batch; ++b)
        first_task[size_t(b + 1)] = first_task[size_t(b)] + d.heads_q * ceil_div(seqs.queries(b), br);
    parallel_tasks(ex, first_task.back(), [&](int64_t task) {
        const int64_t b =
            std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin() - 1;
        const int64_t q_tiles = ceil_div(seqs.queries(b), br), pair = task - first_task[size_t(b)];
        const int64_t h = pair / q_tiles, i0 = (pair % q_tiles) * br, hk = h / group;
        const int s = worker_slot(ex);
        kernels::attention_tile t{};
        t.rows = std::min(br, seqs.queries(b) - i0);
        t.q = element_at(q, d.q_type, seqs.q_at(b, h, i0));
        t.q_type = d.q_type;
        t.out_type = ATTN_DTYPE_F32;
        t.q_ld = d.q.seq;
        t.dim_qk = d.dim_qk;
        t.dim_v = d.dim_v;
        t.scale = d.scale;
        t.k = seqs.k_rows(k, b, hk);
        t.len_kv = seqs.visible_keys(b);
        t.v = seqs.v_rows(v, b, hk);
        // the keys the forward visits for this tile, as ops::sdpa does
        kernels::place_tile_rows(t, d, seqs.visibility(b), b, h, i0, bc);
        t.scratch = scratch.get() + s * tile_floats;
        t.out = out.data() + s * br * d.dim_v;
        t.out_ld = d.dim_v;
        t.lse = lse.data() + s * br;
        t.row_max = row_max + seqs.row(b, h, i0);
        t.row_sum = row_sum + seqs.row(b, h, i0);
        // the scores the forward computed: with bf16 products when the backward's are
        if (tiles) tiles->forward_tile(t);
        else kt.attention_forward_tile(t);
    });
}

void row_statistics(const exec &ex, const seq_rows &seqs, const void *out, const void *dout,
                    const float *lse, const row_stats *stats, const float *fwd_sum,
                    row_terms &rows) {
    const attn_sdpa_desc &d = seqs.desc();
    parallel_rows(ex, seqs, [&](const row_place &at, int64_t row) {
        float m, l;
        if (stats) m = stats->max[row], l = stats->sum[row];
        else if (lse) m = lse[seqs.lse_at(at.b, at.h, at.i)], l = 1.0f;
        else m = rows.max[size_t(row)], l = fwd_sum[row];
        if (l == 0.0f) m = neg_inf;
        // a row that sees no key (no keys, window, causal limit, kv_len) takes no gradient:
        // its output, 0, depends on nothing, the sink included, whatever lse says (a sink
        // gives such a row a finite lse) and whatever out holds
        const auto seen = seqs.visibility(at.b).row(at.i);
        if (seen.hi <= seen.lo) m = neg_inf;
        rows.max[size_t(row)] = m;
        rows.inv_sum[size_t(row)] = 1.0f / l;
        // delta_i = dO_i . O_i = sum_j P_ij z_ij dP_ij, as O = (P z) V
        const int64_t o = seqs.out_at(at.b, at.h, at.i);
        const float delta =
            m != neg_inf ? dot_row(element_at(dout, d.out_type, o), element_at(out, d.out_type, o),
                                   d.out_type, d.dim_v)
                         : 0.0f;
        rows.delta[size_t(row)] = delta;
        // the forward's key of the row: (sequence, head, query within the sequence)
        if (!rows.dropout_keys.empty())
            rows.dropout_keys[size_t(row)] = dropout::row_key(d.dropout_seed, at.b, at.h, at.i);
        // the sink takes part in the softmax with no value: d loss / d sink = -P_sink delta
        if (!rows.dsink.empty()) {
            const float sink = sink_for(d, at.h);
            rows.dsink[size_t(row)] =
                m == neg_inf || sink == neg_inf
                    ? 0.0
                    : -(std::exp(double(sink) - double(m)) / double(l)) * double(delta);
        }
    });
}

void finish_gradients(const exec &ex, const kernels::kernel_table &kt, const seq_rows &seqs,
                      const row_terms &rows, const dq_partials &parts, const backward_tensors &io) {
    const attn_sdpa_desc &d = seqs.desc();
    parallel_rows(ex, seqs, [&](const row_place &at, int64_t row) {
        const int64_t dim = d.dim_qk, q_row = seqs.q_at(at.b, at.h, at.i);
        float *dst = io.dq_acc ? io.dq_acc + row * dim : static_cast<float *>(io.dq) + q_row;
        const auto rounded = [&] {  // dQ accumulated apart: rounded once into dq
            if (io.dq_acc) kt.narrow_row(dst, dim, element_at(io.dq, d.q_type, q_row), d.q_type);
        };
        if (rows.max[size_t(row)] == neg_inf) {
            std::fill_n(dst, dim, 0.0f);
            rounded();
            return;
        }
        // each element summed in chunk order, then scaled: elementwise, so the loops vectorize
        const int64_t chunks = parts.chunks[size_t(at.b)];
        const int64_t chunk_floats = seqs.queries(at.b) * d.heads_q * dim;
        // the row in chunk 1's partial (indexed, not a pointer: without chunks there are none)
        const int64_t part = parts.first[size_t(at.b)] + (row - seqs.row(at.b, 0, 0)) * dim;
        for (int64_t p = 1; p < chunks; ++p) {
            const float *from = parts.partials + part + (p - 1) * chunk_floats;
            for (int64_t c = 0; c < dim; ++c) dst[c] += from[c];
        }
        for (int64_t c = 0; c < dim; ++c) dst[c] *= d.scale;
        rounded();
    });
    if (d.dsinks)
        for (int64_t h = 0; h < d.heads_q; ++h) {
            double sum = 0.0;
            for (int64_t b = 0; b < d.batch; ++b)
                for (int64_t i = 0; i < seqs.queries(b); ++i)
                    sum += rows.dsink[size_t(seqs.row(b, h, i))];
            d.dsinks[h] = static_cast<float>(sum);
        }
}

}  // namespace attn::ops
