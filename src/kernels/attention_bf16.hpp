// Attention scores from bf16 pairs (VDPBF16PS), for the avx512_bf16 and amx levels: the same
// tile loop as attention_forward_tile (attention.hpp), with S = Q K^T formed from bf16 values
// two at a time and accumulated in f32. Products of two bf16 values are exact in f32, so with
// q and k stored in bf16 these are the exact products of the stored values summed in f32, as
// API.md's numerics ask; f32 and f16 inputs come here only under ATTN_FPMATH_BF16, rounded to
// bf16 once when Q is loaded and K packed. The scale multiplies S in f32 (Q is not scaled in
// bf16, which would round again). The softmax, P V and the output stay in f32.
//
// K panels: panel p holds keys [p*nr, p*nr + nr) as [dim_pairs][nr][2] bf16 (dim_pairs =
// ceil(dim_qk / 2), a key's two consecutive dims side by side, zero past the last key and the
// last dim): one 512-bit load is 16 keys x 2 dims, the operand VDPBF16PS pairs with a
// broadcast pair of Q. That is the 32-bit transpose of the K rows, which for bf16 rows of an
// even dim is exactly the f32 panel packing applied to 32-bit words.
// Needs -mavx512bf16: included only by src/kernels/arch/avx512_bf16.cpp.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/attention.hpp"
#include "ref/convert.hpp"

namespace attn::kernels {
namespace attention_bf16_detail {

using attention_detail::lanes;
using attention_detail::panel_keys;

// The bf16 bits of element i of a row of type t (bf16 as stored, else rounded once).
inline uint16_t bf16_bits(const void *row, attn_dtype t, int64_t i) {
    switch (t) {
    case ATTN_DTYPE_BF16: return static_cast<const uint16_t *>(row)[i];
    case ATTN_DTYPE_F16:
        return convert::f32_to_bf16(convert::f16_to_f32(static_cast<const uint16_t *>(row)[i]));
    default: return convert::f32_to_bf16(static_cast<const float *>(row)[i]);
    }
}

// The pair (row[2p], row[2p + 1]) as one 32-bit word, low half first; 0 past dim.
inline uint32_t pair_bits(const void *row, attn_dtype t, int64_t p, int64_t dim) {
    const uint32_t lo = bf16_bits(row, t, 2 * p);
    const uint32_t hi = 2 * p + 1 < dim ? bf16_bits(row, t, 2 * p + 1) : 0u;
    return lo | (hi << 16);
}

inline int64_t pairs_of(int64_t dim) { return (dim + 1) / 2; }

// Panels of bf16 pairs (see the header comment) from rows k + j * k_ld of type k_type,
// j < keys (zero for j >= keys).
template <class Arch>
void pack_k_pairs(const void *k, attn_dtype k_type, int64_t k_ld, int64_t keys, int64_t dim,
                  int64_t panels, uint16_t *packed) {
    constexpr int nr = panel_keys<Arch>;
    const int64_t dp = pairs_of(dim);
    if (k_type == ATTN_DTYPE_BF16 && dim % 2 == 0 && k_ld % 2 == 0 &&
        reinterpret_cast<uintptr_t>(k) % 4 == 0) {
        // 32-bit words of bf16 pairs transposed as the f32 panels are: bit for bit the same
        // layout, through the same register transpose.
        attention_detail::pack_k_panels<Arch, f32_elements>(
            static_cast<const float *>(k), k_ld / 2, keys, dp, panels,
            reinterpret_cast<float *>(packed));
        return;
    }
    uint32_t *words = reinterpret_cast<uint32_t *>(packed);
    for (int64_t p = 0; p < panels; ++p)
        for (int n = 0; n < nr; ++n) {
            const int64_t j = p * nr + n;
            const void *row = element_at(k, k_type, j * k_ld);
            for (int64_t d = 0; d < dp; ++d)
                words[(p * dp + d) * nr + n] = j < keys ? pair_bits(row, k_type, d, dim) : 0u;
        }
}

// s[Rows x NRV*W] = scale * q[Rows x pairs] K_panel, the panel's first NRV key vectors, and
// row_max[r][0..W) = max(row_max[r], the row's scores) lane-wise (as score_block).
template <class Arch, int Rows, int NRV>
inline void score_block_pairs(const uint32_t *q, int64_t ldq, const uint16_t *panel,
                              int64_t pairs, float scale, float *s, int64_t lds,
                              float *row_max) {
    constexpr int W = lanes<Arch>;
    constexpr int nr = panel_keys<Arch>;
    __m512 acc[Rows][NRV];
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int64_t d = 0; d < pairs; ++d) {
        __m512bh kv[NRV];
#pragma GCC unroll 8
        for (int v = 0; v < NRV; ++v)
            kv[v] = (__m512bh)_mm512_loadu_si512(panel + (d * nr + v * W) * 2);
#pragma GCC unroll 32
        for (int r = 0; r < Rows; ++r) {
            const __m512bh qv = (__m512bh)_mm512_set1_epi32(int(q[r * ldq + d]));
#pragma GCC unroll 8
            for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], qv, kv[v]);
        }
    }
    const __m512 scale_v = _mm512_set1_ps(scale);
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r) {
        __m512 m = _mm512_load_ps(row_max + r * W);
#pragma GCC unroll 8
        for (int v = 0; v < NRV; ++v) {
            const __m512 x = _mm512_mul_ps(acc[r][v], scale_v);
            _mm512_store_ps(s + r * lds + v * W, x);
            m = _mm512_max_ps(x, m);  // NaN left out here, as in score_block
        }
        _mm512_store_ps(row_max + r * W, m);
    }
}

// score_block_pairs for rows <= Rows and `vectors` <= NRV key vectors.
template <class Arch, int Rows, int NRV>
inline void score_block_pairs_any(int rows, int vectors, const uint32_t *q, int64_t ldq,
                                  const uint16_t *panel, int64_t pairs, float scale, float *s,
                                  int64_t lds, float *row_max) {
    if constexpr (Rows > 1) {
        if (rows < Rows)
            return score_block_pairs_any<Arch, Rows - 1, NRV>(rows, vectors, q, ldq, panel, pairs,
                                                              scale, s, lds, row_max);
    }
    if constexpr (NRV > 1) {
        if (vectors < NRV)
            return score_block_pairs_any<Arch, Rows, NRV - 1>(rows, vectors, q, ldq, panel, pairs,
                                                              scale, s, lds, row_max);
    }
    score_block_pairs<Arch, Rows, NRV>(q, ldq, panel, pairs, scale, s, lds, row_max);
}

// tile_scores (attention.hpp) over bf16-pair panels: causal skipping and the diagonal's
// partial panels as there.
template <class Arch>
void tile_scores_pairs(const uint32_t *q, int64_t pairs, int64_t rows, const uint16_t *panels_at,
                       int64_t panels, int64_t last_col0, float scale, float *s,
                       float *score_max) {
    using blk = attention_blocking<Arch>;
    constexpr int nr = panel_keys<Arch>;
    constexpr int W = lanes<Arch>;
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t r = 0; r < rows; ++r) _mm512_store_ps(score_max + r * W, neg_inf);
    for (int64_t p = 0; p < panels; ++p)
        for (int64_t r0 = 0; r0 < rows; r0 += blk::mr_s) {
            const int rr = static_cast<int>(rows - r0 < blk::mr_s ? rows - r0 : blk::mr_s);
            const int64_t seen = r0 + rr + last_col0 - p * nr;
            if (seen <= 0) continue;
            const int vectors = seen >= nr ? blk::nr_vectors : static_cast<int>((seen + W - 1) / W);
            score_block_pairs_any<Arch, blk::mr_s, blk::nr_vectors>(
                rr, vectors, q + r0 * pairs, pairs, panels_at + p * nr * pairs * 2, pairs, scale,
                s + r0 * blk::bc + p * nr, blk::bc, score_max + r0 * W);
        }
}

// The scores policy of the tile loop (attention_detail::f32_scores is the f32 one): the q
// region holds the tile's Q rows as bf16 pairs [rows][pairs], unscaled; K comes from the
// head's bf16 panels (t.k_pairs) or is packed now into the k region.
template <class Arch>
struct bf16_scores {
    static void load_q(const attention_tile &t, float *q_region) {
        uint32_t *q = reinterpret_cast<uint32_t *>(q_region);
        const int64_t pairs = pairs_of(t.dim_qk);
        for (int64_t r = 0; r < t.rows; ++r) {
            const void *row = element_at(t.q, t.q_type, r * t.q_ld);
            for (int64_t d = 0; d < pairs; ++d) q[r * pairs + d] = pair_bits(row, t.q_type, d, t.dim_qk);
        }
    }
    static bool tile(const attention_tile &t, const float *q_region, int64_t j0, int64_t cols,
                     float *s, float *k_buf, float *score_max) {
        constexpr int nr = panel_keys<Arch>;
        const int64_t panels = (cols + nr - 1) / nr, pairs = pairs_of(t.dim_qk);
        const uint16_t *k_at;
        if (t.k_pairs) {
            k_at = t.k_pairs + (j0 / nr) * nr * pairs * 2;
        } else {
            uint16_t *buf = reinterpret_cast<uint16_t *>(k_buf);
            pack_k_pairs<Arch>(element_at(t.k, t.k_type, j0 * t.k_ld), t.k_type, t.k_ld,
                               t.len_kv - j0, t.dim_qk, panels, buf);
            k_at = buf;
        }
        tile_scores_pairs<Arch>(reinterpret_cast<const uint32_t *>(q_region), pairs, t.rows, k_at,
                                panels, t.first_row + t.causal_offset - j0, t.scale, s, score_max);
        return true;
    }
};

}  // namespace attention_bf16_detail

// ---- entry points (in the kernel table of the bf16 levels) ----------------------------------

template <class Arch>
void attention_pack_k_bf16(const void *k, attn_dtype k_type, int64_t k_ld, int64_t keys,
                           int64_t dim_qk, int64_t panels, uint16_t *packed) {
    attention_bf16_detail::pack_k_pairs<Arch>(k, k_type, k_ld, keys, dim_qk, panels, packed);
}

template <class Arch>
void attention_forward_tile_bf16(const attention_tile &t) {
    attention_forward_tile_with<Arch, attention_bf16_detail::bf16_scores<Arch>>(t);
}

template <class Arch>
void attention_weights_tile_bf16(const attention_tile &t, float *weights, int64_t weights_ld,
                                 bool after_forward) {
    attention_weights_tile_with<Arch, attention_bf16_detail::bf16_scores<Arch>>(
        t, weights, weights_ld, after_forward);
}

}  // namespace attn::kernels
