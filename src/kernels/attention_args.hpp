// Argument blocks of the fused attention kernels (attention.hpp). Plain data, no xsimd:
// the drivers in src/ops fill them, the kernels read them.
#pragma once

#include <cstdint>

#include "attn/attn.h"

namespace attn::kernels {

// Up to this many query rows, a tile reads K rows directly (dot products) instead of packing.
inline constexpr int64_t attention_direct_rows = 4;

// One query tile of one (batch, query head) against the keys [key_begin, key_end):
//   S = scale * Q K^T + mask, causal / range masking, online softmax, O = softmax(S) V.
// The kernel writes, for every row r < rows, the normalised output row and
// lse[r] = log sum_j exp(S_rj) over the visible keys (-inf, and a zero row, when none is).
//
// Key j is visible to tile row r when key_begin <= j < key_end and
// j <= first_row + r + causal_offset (use a huge causal_offset for no causal mask).
// Strides (q_ld, k_ld, v_ld, out_ld) count elements of the row's own type.
struct attention_tile {
    const void *q;          // row r of Q at q + r * q_ld, dim_qk contiguous elements of q_type
    attn_dtype q_type;
    int64_t q_ld;
    int64_t rows;           // 1 .. blocks.br
    int64_t dim_qk, dim_v;
    float scale;

    // K, either packed once per head by attention_pack_k (panel p = keys [p*nr, p*nr + nr),
    // stored [dim_qk][nr], key fastest, zero beyond the head's last key) or, when k_packed
    // is null, read from k + j * k_ld (elements of k_type): straight from the rows for at
    // most attention_direct_rows query rows, else packed tile by tile into the scratch.
    const float *k_packed;
    // The bf16-pair path (attention_bf16.hpp): K packed once per head in its pair panels, or
    // null (packed tile by tile into the scratch).
    const uint16_t *k_pairs;
    const void *k;
    attn_dtype k_type;
    int64_t k_ld;
    int64_t len_kv;         // keys in the head (K rows that may be read)

    // V rows at v + j * v_ld, dim_v contiguous elements of v_type; v_padded (f32 only): each
    // row may be read up to dim_v rounded up to whole vectors (else the kernel copies, and
    // widens, the tile's rows).
    const void *v;
    attn_dtype v_type;
    int64_t v_ld;
    bool v_padded;
    // The bf16-pair path: V packed once per head as pair rows (attention_bf16.hpp), pair row
    // m (keys 2m, 2m + 1) at v_pairs + m * v_pairs_ld; or null (packed tile by tile). t.v
    // still points at the stored rows, for the keys taken one at a time.
    const uint16_t *v_pairs;
    int64_t v_pairs_ld;

    int64_t key_begin, key_end;  // key_begin a multiple of blocks.bc
    int64_t first_row;           // query index of tile row 0
    int64_t causal_offset;

    const float *mask;      // additive mask on S: row r at mask + r * mask_ld, key j at [j]
    int64_t mask_ld;

    // Dropout on the probabilities before P V (not on the softmax sum): key j of row r is
    // dropped when fmix32(dropout_keys[r] ^ j * 0x9E3779B1) < dropout_threshold, kept ones
    // are multiplied by dropout_keep. dropout_keys null: no dropout.
    const uint32_t *dropout_keys;
    uint32_t dropout_threshold;
    float dropout_keep;

    // Q rows the caller runs next (may be null, of q_type): fetched into the cache while this
    // tile finishes, as are this tile's output rows.
    const void *next_q;
    int64_t next_q_rows;

    float *scratch;         // attention_scratch_floats(dim_qk, dim_v) floats, 64-byte aligned
    void *out;              // row r at out + r * out_ld, dim_v elements of out_type (rounded once)
    attn_dtype out_type;
    int64_t out_ld;
    float *lse;             // rows floats
};

}  // namespace attn::kernels
