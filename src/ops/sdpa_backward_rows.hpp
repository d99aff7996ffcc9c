// The per-row steps of the fused backward (sdpa_backward.cpp): step 1, the statistics of every
// query row, and step 3, dq from its key chunks. Rows are those of core/seq_rows.hpp, dense or
// packed (q_start, kv_start): per-row arrays in seq_rows::row order, the caller's tensors at
// q_at / out_at / lse_at.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/attn.h"
#include "core/seq_rows.hpp"
#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"

namespace attn::ops {

// The tensors of one backward call as stored: q, dq of d.q_type; k, v, dk, dv of d.kv_type;
// out, dout of d.out_type (16-bit ones only for the kernel with bf16 products). dQ is
// accumulated in f32: in dq itself when q is f32 (dq_acc null), else in dq_acc (a row of
// dim_qk floats per query row, seq_rows::row order) and rounded once into dq.
struct backward_tensors {
    const void *q, *k, *v, *out, *dout;
    void *dq, *dk, *dv;
    float *dq_acc;
    // for the kernel with bf16 products: Q and dO of head b * heads_q + h transposed, at
    // q_t + (b * heads_q + h) * q_t_head, rows padded to t_rows (dense batches)
    const uint16_t *q_t, *dout_t;
    int64_t q_t_head, dout_t_head, t_rows;
};

// What step 1 leaves for steps 2 and 3, per query row (seq_rows::row order).
struct row_terms {
    std::vector<float> max, inv_sum, delta;
    std::vector<double> dsink;  // in double: the sum over rows cancels (delta has either sign)
    std::vector<uint32_t> dropout_keys;
};

// Sequence b, query head h, query i of the row of index `row` in seq_rows::row order.
struct row_place {
    int64_t b, h, i;
};
row_place place_of_row(const core::seq_rows &seqs, int64_t row);

// The place of the next row in seq_rows::row order (queries, then heads, then the sequences
// that have queries).
inline void next_row(const core::seq_rows &seqs, row_place &at) {
    if (++at.i < seqs.queries(at.b)) return;
    at.i = 0;
    if (++at.h < seqs.desc().heads_q) return;
    at.h = 0;
    do ++at.b;
    while (at.b < seqs.desc().batch && seqs.queries(at.b) == 0);
}

// body(place, row) for every query row of the call, rows split over the threads in blocks of
// 256 (each row is computed alone: the partition changes no bit).
template <class Body>
void parallel_rows(const exec &ex, const core::seq_rows &seqs, const Body &body) {
    parallel_for(ex, seqs.rows_total(), 256, [&](int64_t begin, int64_t end) {
        row_place at = place_of_row(seqs, begin);
        for (int64_t row = begin; row < end; ++row, next_row(seqs, at)) body(at, row);
    });
}

// m and l of every row by the forward kernel, a query tile of a sequence per task, its output
// and lse into per-worker scratch and discarded (with bf16 products when pairs: the scores the
// backward's then match). q, k, v of the desc's types; row_max, row_sum: seq_rows::row order.
void recompute_statistics(const exec &ex, const kernels::kernel_table &kt,
                          const core::seq_rows &seqs, bool pairs, const void *q, const void *k,
                          const void *v, float *row_max, float *row_sum);

// Step 1: m, 1/l, delta, the dropout key and the sink's gradient of every row, from stats
// (seq_rows::row order) when given, else lse (at lse_at), else the recomputed max and fwd_sum.
// out, dout of the desc's out_type.
void row_statistics(const exec &ex, const core::seq_rows &seqs, const void *out,
                    const void *dout, const float *lse, const row_stats *stats,
                    const float *fwd_sum, row_terms &rows);

// The dQ partials of key chunks 1.. of sequence b: chunk p's row r = row(b, h, i) -
// row(b, 0, 0) at partials + first + (p - 1) * queries(b) * heads_q * dim_qk + r * dim_qk.
struct dq_partials {
    float *partials;
    std::vector<int64_t> first, chunks;  // per sequence
};

// Step 3: dq = scale (dq + partial_1 + ...), in chunk order, zeros for rows without gradient,
// rounded once into dq when accumulated apart (io.dq_acc); dsinks[h] = the rows' sink
// gradients summed over (sequence, query) in order, in double.
void finish_gradients(const exec &ex, const kernels::kernel_table &kt, const core::seq_rows &seqs,
                      const row_terms &rows, const dq_partials &parts, const backward_tensors &io);

}  // namespace attn::ops
