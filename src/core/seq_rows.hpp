// Where the rows of a sequence live: the one addressing of query-side rows (q, out, lse and
// the gradients dq, dout) and of each sequence's keys (k, v, dk, dv), dense or packed.
// (sequence b, head h, query i) -> element offsets, and each sequence's counts:
//   n_b = q_start[b + 1] - q_start[b] queries (len_q without q_start),
//   K_b = kv_start[b + 1] - kv_start[b] keys (len_kv without kv_start),
//   visible keys = min(K_b, kv_len[b]).
// A dense batch is the case of equal lengths: without q_start and kv_start every offset below
// is the 0.2 arithmetic b * x.batch + h * x.head + i * x.seq.
//
// Per-row arrays of the drivers (statistics, the split-key parts) use one internal order,
// row(b, h, i): each sequence's rows as a [heads_q, n_b] block, the blocks in batch order
// (dense: (b * heads_q + h) * len_q + i, the 0.2 lse layout). The lse the caller sees is at
// lse_at(b, h, i): the same without q_start, row-major [total_q, heads_q] with it.
// The visibility of a sequence's rows (window, causal limit, kv_len) is that of
// core/scores.hpp for the sequence's own counts.
#pragma once

#include <cstdint>

#include "attn/attn.h"
#include "core/formats.hpp"
#include "core/kv_rows.hpp"
#include "core/scores.hpp"

namespace attn::core {

class seq_rows {
public:
    explicit seq_rows(const attn_sdpa_desc &d) : d_(d) {}

    const attn_sdpa_desc &desc() const { return d_; }

    int64_t queries(int64_t b) const {  // n_b
        return d_.q_start ? int64_t(d_.q_start[b + 1]) - d_.q_start[b] : d_.len_q;
    }
    int64_t keys(int64_t b) const {  // K_b
        return d_.kv_start ? int64_t(d_.kv_start[b + 1]) - d_.kv_start[b] : d_.len_kv;
    }
    // Query rows of the whole call (sum of n_b) times heads_q: the size of row() arrays.
    int64_t rows_total() const {
        return d_.q_start ? int64_t(d_.q_start[d_.batch]) * d_.heads_q
                          : d_.batch * d_.heads_q * d_.len_q;
    }
    // Key rows of one kv head over the call (sum of K_b): the size of packed dk/dv scratch.
    int64_t key_rows_total() const {
        return d_.kv_start ? int64_t(d_.kv_start[d_.batch]) : d_.batch * d_.len_kv;
    }
    // The first row of sequence b in key_rows_total() order.
    int64_t key_row0(int64_t b) const { return d_.kv_start ? d_.kv_start[b] : b * d_.len_kv; }

    // Element offsets of query row i of (b, h): in q (and dq), in out (and dout).
    int64_t q_at(int64_t b, int64_t h, int64_t i) const { return query_at(d_.q, b, h, i); }
    int64_t out_at(int64_t b, int64_t h, int64_t i) const { return query_at(d_.out, b, h, i); }
    // Index of (b, h, i) in the caller's lse.
    int64_t lse_at(int64_t b, int64_t h, int64_t i) const {
        return d_.q_start ? (d_.q_start[b] + i) * d_.heads_q + h : row(b, h, i);
    }
    // Index of (b, h, i) in the drivers' per-row arrays (see above).
    int64_t row(int64_t b, int64_t h, int64_t i) const {
        return d_.q_start ? d_.q_start[b] * d_.heads_q + h * queries(b) + i
                          : (b * d_.heads_q + h) * d_.len_q + i;
    }
    // Element offset of key row j of (b, kv head hk) in a contiguous k (dk) or v (dv).
    int64_t k_at(int64_t b, int64_t hk, int64_t j) const { return key_at(d_.k, b, hk, j); }
    int64_t v_at(int64_t b, int64_t hk, int64_t j) const { return key_at(d_.v, b, hk, j); }

    // The keys of (b, hk) through the one addressing function of K and V rows (paged, or
    // contiguous from the sequence's first row), with a quantized format's scales and zero
    // points (core's k_rows_for / v_rows_for; packed: from the sequence's first packed row).
    kv_rows k_rows(const void *k, int64_t b, int64_t hk) const {
        return d_.kv_start ? packed_rows(k_rows_for(d_, k, 0, hk), d_.k, b) : k_rows_for(d_, k, b, hk);
    }
    kv_rows v_rows(const void *v, int64_t b, int64_t hk) const {
        return d_.kv_start ? packed_rows(v_rows_for(d_, v, 0, hk), d_.v, b) : v_rows_for(d_, v, b, hk);
    }

    // The sequence's problem as a dense desc of its own counts: len_q = n_b, len_kv = K_b.
    // Its visibility and key counts are those of sequence b (same b: kv_len[b]).
    attn_sdpa_desc sequence(int64_t b) const {
        attn_sdpa_desc s = d_;
        s.len_q = queries(b);
        s.len_kv = keys(b);
        s.q_start = s.kv_start = nullptr;
        return s;
    }
    // Keys of sequence b that exist for its rows: min(K_b, kv_len[b]).
    int64_t visible_keys(int64_t b) const { return keys_in_batch(sequence(b), b); }
    // Row i of sequence b sees keys visibility(b).row(i) (window, causal at the sequence's
    // alignment, kv_len).
    key_visibility visibility(int64_t b) const {
        return visibility_for(sequence(b), b);
    }

private:
    // The first packed row of sequence b (starts: q_start or kv_start). An empty sequence may
    // start one past the last row, where the row stride times the start is bounded by no check
    // (only rows that exist are) and could overflow int64; it has no row to address, so it is
    // addressed at row 0.
    static int64_t first_row(const int32_t *starts, int64_t b) {
        return starts[b + 1] > starts[b] ? int64_t(starts[b]) : 0;
    }
    int64_t query_at(const attn_layout &l, int64_t b, int64_t h, int64_t i) const {
        return d_.q_start ? (first_row(d_.q_start, b) + i) * l.seq + h * l.head
                          : b * l.batch + h * l.head + i * l.seq;
    }
    int64_t key_at(const attn_layout &l, int64_t b, int64_t hk, int64_t j) const {
        return d_.kv_start ? (first_row(d_.kv_start, b) + j) * l.seq + hk * l.head
                           : b * l.batch + hk * l.head + j * l.seq;
    }
    // Sequence b's rows of a packed k or v, given the rows of kv head hk from packed row 0:
    // contiguous from the sequence's first packed row kv_start[b] (kv_start excludes paging),
    // its scales and zero points likewise (batch strides unused).
    kv_rows packed_rows(kv_rows r, const attn_layout &l, int64_t b) const {
        const int64_t first = first_row(d_.kv_start, b);
        r.base = static_cast<const char *>(r.base) + element_offset_bytes(d_.kv_type, first * l.seq);
        r.scales.scale += first * r.scales.row_stride;
        if (r.scales.zero) r.scales.zero += first * r.scales.row_stride;
        return r;
    }

    const attn_sdpa_desc &d_;
};

}  // namespace attn::core
