// Argument blocks of the fused attention kernels (attention.hpp). Plain data, no xsimd:
// the drivers in src/ops fill them, the kernels read them.
#pragma once

#include <cstdint>

#include "attn/attn.h"
#include "core/scores.hpp"
#include "core/kv_rows.hpp"
#include "kernels/kernels.hpp"  // the problem's vocabulary from core/

namespace attn::kernels {

// Up to this many query rows, a tile reads K rows directly (dot products) instead of packing.
inline constexpr int64_t attention_direct_rows = 4;

// A sequence of up to decode_few_queries rows takes such tiles too when the rows that share one
// packing of a KV head's K and V (query heads a KV head x rows) times the bits of a K element
// are at most decode_few_row_bits (twice the bits where the call may pack them for bf16 pairs,
// whose products run at twice the f32 rate, but not read them in place as pairs:
// attention_impl_list::choose): each tile of
// attention_direct_rows rows reads the keys again (from cache: a KV head's K and V of 4096 keys
// are 2 MiB in bf16), where packing would be shared by that many rows. One thread, causal,
// Lk4096 D128, against the packed tiles (bench/bench_decode_quantized.cpp's few_rows): one query
// head a KV head, 5 rows 2.2x (bf16, I8) and 1.4x (f32) faster, 8 rows 1.9-2.0x / 1.4x, 16 rows
// 1.2-1.3x (bf16, I8); bf16 queries over bf16 (pairs on both sides: decode_pairs) 5 rows
// 2.2-2.3x, 8 rows 1.7-2.2x, 16 rows 1.08-1.24x; four query heads a KV head over I8, 5 rows
// 1.5x, 8 rows 1.35x, 16 rows 0.88x.
inline constexpr int64_t decode_few_queries = 16;
inline constexpr int64_t decode_few_row_bits = 256;

// One query tile of one (batch, query head) against the keys [key_begin, key_end):
//   S = the scores of core/scores.hpp (scale, softcap, + mask, - ALiBi), hidden keys
//   never read, online softmax with the row's sink in the denominator, O = softmax(S) V.
// The kernel writes, for every row r < rows, the normalised output row and
// lse[r] = log (e^sink + sum_j exp(S_rj)) over the visible keys (-inf, and a zero row, when
// there is neither a visible key nor a sink; with a sink and no visible key: zeros, the sink).
//
// Key j is visible to tile row r when key_begin <= j < key_end and j lies in
// visibility.row(query(r)), query(r) = first_row + r (or first_row for every row when
// rows_are_heads). Strides (q_ld, out_ld, mask_ld) count elements of the row's own type.
struct attention_tile {
    // Row r's query index, its head step and its visible keys within [key_begin, key_end).
    int64_t query(int64_t r) const { return rows_are_heads ? first_row : first_row + r; }
    int64_t head_step() const { return rows_are_heads ? 1 : 0; }
    key_range keys_of(int64_t r) const {
        return visibility.row_within(query(r), key_begin, key_end);
    }

    const void *q;          // row r of Q at q + r * q_ld, dim_qk contiguous elements of q_type
    attn_dtype q_type;
    int64_t q_ld;
    int64_t rows;           // 1 .. the entry's br (attention_impl.hpp)
    int64_t dim_qk, dim_v;
    float scale;

    // K, either packed once per head by attention_pack_k (panel p = keys [p*nr, p*nr + nr),
    // stored [dim_qk][nr], key fastest, zero beyond the head's last key) or, when k_packed
    // is null, read from the rows k.row(j) (elements of k.type): straight from the rows for at
    // most attention_direct_rows query rows, else packed tile by tile into the scratch.
    const float *k_packed;
    // The bf16-pair path (attention_bf16.hpp): K packed once per head in its pair panels, or
    // null (packed tile by tile into the scratch).
    const uint16_t *k_pairs;
    kv_rows k;              // key j's row: k.row(j), dim_qk elements of k.type (paged or not)
    int64_t len_kv;         // keys of the batch (K rows that may be read: kv_len or len_kv)
    // Whether the call's K and V rows, all of them, fill 3/4 of the last-level cache or more
    // (they stream from memory): how decoding prefetches them (decode_rows.hpp, decode_prefetch()).
    bool kv_beyond_llc;

    // V rows: v.row(j), dim_v elements of v.type; v_padded (f32, not paged): each row may be
    // read up to dim_v rounded up to whole vectors (else the kernel copies, and widens, the
    // tile's rows).
    kv_rows v;
    bool v_padded;
    // The bf16-pair path: V packed once per head as pair rows (keys 2m, 2m + 1) in column
    // chunks (attention_bf16.hpp's v_pair_rows: v_pairs_rows pair rows of dim_v rounded up to
    // whole vectors, 32-bit words), or null (packed tile by tile). t.v still points at the
    // stored rows.
    const uint16_t *v_pairs;
    int64_t v_pairs_rows;

    int64_t key_begin, key_end;  // key_begin a multiple of the entry's bc
    int64_t first_row;           // query index of tile row 0
    key_visibility visibility;   // the window, causal limit and kv_len of the (batch, head)
    bool rows_are_heads;         // rows are query heads h0 + r of query first_row (decoding
                                 // with grouped heads): every row sees the same keys

    // Score terms beyond scale (core/scores.hpp): softcap (0 = off); ALiBi slope and
    // sink of row r at alibi_slopes[r * head_step], sinks[r * head_step] (head_step 1 when
    // rows_are_heads, else 0); null = none. Sinks are -inf (none) when split keys leave them
    // to the merge.
    float softcap;
    const float *alibi_slopes;
    const float *sinks;

    const float *mask;      // additive mask on S: row r at mask + r * mask_ld, key j at [j]
    int64_t mask_ld;

    // Dropout on the probabilities before P V (not on the softmax sum): key j of row r is
    // dropped when fmix32(dropout_keys[r] ^ j * 0x9E3779B1) < dropout_threshold, kept ones
    // are multiplied by dropout_keep. dropout_keys null: no dropout.
    const uint32_t *dropout_keys;
    uint32_t dropout_threshold;
    float dropout_keep;

    float *scratch;         // attention_scratch_floats(dim_qk, dim_v) floats, 64-byte aligned
    void *out;              // row r at out + r * out_ld, dim_v elements of out_type (rounded once)
    attn_dtype out_type;
    int64_t out_ld;
    float *lse;             // rows floats
    // Optional (internal callers): the row max m and the sum l of e^(S - m) over the visible
    // keys, so a backward can form P = e^(S - m) / l without the rounding of lse = m + log l.
    float *row_max;
    float *row_sum;
};

// Places tile t (its rows already set) at query rows i0 .. i0 + t.rows of query head h of
// batch b: the pair's visibility (window, causal limit, kv_len), the keys the forward visits
// (from the first row's first visible key, rounded down to a multiple of bc, to the last row's
// last: tiles left of the window and keys past the limit are skipped, not masked), and the
// desc's score terms for that head and those rows (softcap, ALiBi slope, sink, mask rows).
// The forward's drivers and the backward's recomputation of the forward place tiles alike.
inline void place_tile_rows(attention_tile &t, const attn_sdpa_desc &d, const key_visibility &visibility,
                            int64_t b, int64_t h, int64_t i0, int64_t bc) {
    t.visibility = visibility;
    const key_range first = visibility.row(i0);
    const key_range last = visibility.row(i0 + t.rows - 1);
    t.key_begin = first.lo / bc * bc;
    t.key_end = last.hi > t.key_begin ? last.hi : t.key_begin;
    t.first_row = i0;
    t.softcap = d.softcap;
    t.alibi_slopes = d.alibi_slopes ? d.alibi_slopes + h : nullptr;
    t.sinks = d.sinks ? d.sinks + h : nullptr;
    if (d.mask) {
        t.mask = d.mask + b * d.mask_strides.batch + h * d.mask_strides.head + i0 * d.mask_strides.seq;
        t.mask_ld = d.mask_strides.seq;
    }
}

// The fused backward (attention_backward.hpp): one key tile of one (batch, kv head) against the
// query rows [row_begin, row_end) of one query head; query row i is row i of q, dout, dq and of
// the per-row statistics (all relative to the head). With qs = scale Q and the scores of
// core/scores.hpp (softcap, + mask, - ALiBi) on the scaled scores qs K^T,
//   S = score(qs K^T), P = e^(S - m_i) inv_l_i, dP = (dO V^T) z, dS = P (dP - delta_i) g,
//   g = d S / d (scaled score) (1 - tanh^2 with softcap, else 1),
//   dV += (P z)^T dO,  dK += dS^T qs,  dq += dS K  (dq is unscaled: the caller multiplies by
//   scale once after the last key tile).
// Key key0 + c of the tile is visible to query i when it lies in visibility.row(i) (and
// c < keys); a hidden key is never read for that row.
struct attention_backward_tile {
    int64_t dim_qk, dim_v;
    float scale;
    // Element types: q of q_type; k, v, dk, dv of kv_type; dout of out_type. The f32 kernel
    // takes three F32 types; the kernel with bf16 products any (rounded to bf16 when not bf16).
    attn_dtype q_type, kv_type, out_type;
    const void *k, *v;      // key row key0 + c at k + c * k_ld elements, c < keys
    int64_t k_ld, v_ld;
    int64_t key0, keys;     // keys <= backward block bk
    bool first_head;        // pack K and V, zero the dK, dV accumulators
    bool last_head;         // write dK, dV rows c < keys (rounded once to kv_type)
    void *dk, *dv;          // row c at dk + c * dk_ld elements
    int64_t dk_ld, dv_ld;
    const void *q, *dout;   // row i at q + i * q_ld elements
    int64_t q_ld, dout_ld;
    // The AMX kernel: the head's Q and dO transposed in bf16 in blocks of 32 rows
    // (kernel_table::attention_backward_pack_t_bf16's layout; null for the other kernels).
    const uint16_t *q_t, *dout_t;
    float *dq;              // row i at dq + i * dq_ld, accumulated in f32
    int64_t dq_ld;
    const float *row_max, *row_inv_sum, *row_delta;  // m_i (-inf: no gradient), 1/l_i, delta_i
    int64_t row_begin, row_end;
    key_visibility visibility;  // the window, causal limit and kv_len of the (batch, head)
    float softcap;              // 0 = off
    const float *alibi_slope;   // the query head's ALiBi slope; null = none
    const float *mask;      // row i at mask + i * mask_ld, key key0 + c at [key0 + c]
    int64_t mask_ld;
    const uint32_t *dropout_keys;  // per query row; null: no dropout
    uint32_t dropout_threshold;
    float dropout_keep;
    float *scratch;         // attention_backward_scratch_floats floats, 64-byte aligned
};

}  // namespace attn::kernels
