// The fused attention forward on AMX tiles, for the amx and amx_emulated levels: the
// amx_tiles entry of their list of attention implementations (in bf16_pairs' place), with
//   S = Q K^T  on tiles: Q rows as the A tile (16 rows x 16 pairs), K's pair panels as B;
//   the online softmax, the score terms and the visibility in AVX-512, the tile loop of
//              attention.hpp itself (this is one more scores policy of it);
//   O += P V   on tiles: P rounded to bf16 (as the VDPBF16PS pair path rounds it) as the A
//              tile, V's pair rows as B, O's rows as the accumulators.
// The same source runs on the real tiles and on the model (Tiles = amx_hw_tiles or
// amx_model_tiles, tiles.hpp); every tile is 16 rows x 64 bytes, configured where the kernel
// starts and released where it ends (tile_guard).
//
// The packed layouts are those of the pair path (attention_bf16.hpp), so K and V are packed
// once per head by bf16_pairs' pack_k / pack_v (kept in the entry) and fit the same scratch:
//   K panel p, [pairs][nr][2] bf16: the B tile of pairs d0 .. d0 + 15 and keys n0 .. n0 + 15
//     is 16 rows of 64 bytes, nr words apart. A panel has no padding of its pairs, so the
//     tiles need dim_qk's pairs to be whole tiles (ceil(dim_qk / 2) a multiple of 16: dim_qk
//     a multiple of 32, or one less); other dims run the VDPBF16PS kernel of the level below.
//   V pair rows, [dims][2] bf16 per pair of keys: the B tile of key pairs m0 .. m0 + 15 and
//     dims c0 .. c0 + 15 is 16 pair rows of 64 bytes.
// Query rows go in blocks of 16 (one tile of rows); a block past the tile's last row computes
// rows the kernel never reads (the scratch holds br rows, a multiple of 16).
// Visibility: as in pv_tile_pairs, a key hidden from a row is never read for it. The tiles
// take the whole chunks of 16 key pairs every row of a block sees; the block's further keys
// (the diagonal's edge, a last partial chunk) are added row by row, whole pairs by VDPBF16PS
// from the V pair rows and a range's odd end key from the V row as stored, with the same bf16
// P.
// Needs the avx512_bf16 flags; included by src/kernels/amx/tables.cpp only.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/amx/tiles.hpp"
#include "kernels/attention_bf16.hpp"

namespace attn::kernels::amx {
namespace attention_amx_detail {

using attention_bf16_detail::pairs_of;
using attention_detail::lanes;
using attention_detail::panel_keys;

constexpr int64_t rows_per_block = 16;  // query rows per A tile
constexpr int64_t pairs_per_tile = 16;  // pairs of depth per A row / B tile
constexpr int64_t dims_per_tile = 16;   // f32 columns per accumulator tile

// Tiles: accumulators tmm0 .. tmm3; A tiles tmm4 and tmm5, one 16-pair step each in turn
// (an A tile is reloaded four products after its last use, not right after it); B tiles tmm6
// and tmm7 in turn.
template <class Tiles, int A, int V, int NV>
inline void dp_vectors(const uint16_t *b, int64_t b_step, int64_t b_stride) {
    if constexpr (V < NV) {
        Tiles::template load<6 + V % 2>(b + V * b_step, b_stride);
        Tiles::template dpbf16ps<V, A, 6 + V % 2>();
        dp_vectors<Tiles, A, V + 1, NV>(b, b_step, b_stride);
    }
}

// C[16 x NV*16] += the steps' A tiles (at a + k * a_step, rows a_stride bytes apart) times
// their B tiles (at b + k * b_step, the V-th at + V * 16 columns), k < steps.
template <class Tiles, int NV>
inline void dp_steps(const uint32_t *a, int64_t a_step, int64_t a_stride, const uint16_t *b,
                     int64_t b_step, int64_t b_stride, int64_t steps) {
    int64_t k = 0;
    for (; k + 2 <= steps; k += 2) {
        Tiles::template load<4>(a + k * a_step, a_stride);
        dp_vectors<Tiles, 4, 0, NV>(b + k * b_step, dims_per_tile * 2, b_stride);
        Tiles::template load<5>(a + (k + 1) * a_step, a_stride);
        dp_vectors<Tiles, 5, 0, NV>(b + (k + 1) * b_step, dims_per_tile * 2, b_stride);
    }
    if (k < steps) {
        Tiles::template load<4>(a + k * a_step, a_stride);
        dp_vectors<Tiles, 4, 0, NV>(b + k * b_step, dims_per_tile * 2, b_stride);
    }
}
template <class Tiles, int V, int NV>
inline void zero_c() {
    if constexpr (V < NV) {
        Tiles::template zero<V>();
        zero_c<Tiles, V + 1, NV>();
    }
}
template <class Tiles, int V, int NV>
inline void load_c(const float *c, int64_t stride) {
    if constexpr (V < NV) {
        Tiles::template load<V>(c + V * dims_per_tile, stride);
        load_c<Tiles, V + 1, NV>(c, stride);
    }
}
template <class Tiles, int V, int NV>
inline void store_c(float *c, int64_t stride) {
    if constexpr (V < NV) {
        Tiles::template store<V>(c + V * dims_per_tile, stride);
        store_c<Tiles, V + 1, NV>(c, stride);
    }
}

// s[16 x NV*16] (rows bc floats apart) = q[16 x pairs] (rows `pairs` words apart) times the
// panel's first NV key vectors, unscaled.
template <class Arch, class Tiles, int NV>
void score_tiles(const uint32_t *q, int64_t pairs, const uint16_t *panel, float *s) {
    constexpr int64_t nr = panel_keys<Arch>;
    constexpr int64_t bc = attention_blocking<Arch>::bc;
    zero_c<Tiles, 0, NV>();
    dp_steps<Tiles, NV>(q, pairs_per_tile, pairs * 4, panel, pairs_per_tile * nr * 2, nr * 4,
                        pairs / pairs_per_tile);
    store_c<Tiles, 0, NV>(s, bc * 4);
}

// o[16 x NV*16] (rows ldo floats apart) += p[16 x 16*chunks pairs] (rows bc words apart)
// times the V pair rows' chunks (rows ldv bf16 apart), from their first dim.
template <class Arch, class Tiles, int NV>
void pv_tiles(const uint32_t *p, int64_t chunks, const uint16_t *v, int64_t ldv, float *o,
              int64_t ldo) {
    constexpr int64_t bc = attention_blocking<Arch>::bc;
    load_c<Tiles, 0, NV>(o, ldo * 4);
    dp_steps<Tiles, NV>(p, pairs_per_tile, bc * 4, v, pairs_per_tile * ldv, ldv * 2, chunks);
    store_c<Tiles, 0, NV>(o, ldo * 4);
}

template <class Arch, class Tiles>
void score_tiles_any(int vectors, const uint32_t *q, int64_t pairs, const uint16_t *panel,
                     float *s) {
    switch (vectors) {
    case 1: return score_tiles<Arch, Tiles, 1>(q, pairs, panel, s);
    case 2: return score_tiles<Arch, Tiles, 2>(q, pairs, panel, s);
    case 3: return score_tiles<Arch, Tiles, 3>(q, pairs, panel, s);
    default: return score_tiles<Arch, Tiles, 4>(q, pairs, panel, s);
    }
}

template <class Arch, class Tiles>
void pv_tiles_any(int vectors, const uint32_t *p, int64_t chunks, const uint16_t *v,
                  int64_t ldv, float *o, int64_t ldo) {
    switch (vectors) {
    case 1: return pv_tiles<Arch, Tiles, 1>(p, chunks, v, ldv, o, ldo);
    case 2: return pv_tiles<Arch, Tiles, 2>(p, chunks, v, ldv, o, ldo);
    case 3: return pv_tiles<Arch, Tiles, 3>(p, chunks, v, ldv, o, ldo);
    default: return pv_tiles<Arch, Tiles, 4>(p, chunks, v, ldv, o, ldo);
    }
}

// Rows r < rows of the block s[rows x vectors*16]: S = S times col_scale (a factor a key),
// and row_max[r][0..16) = max(row_max[r], the row's scores) lane-wise, NaN left out (as
// score_block_pairs does).
inline void scale_and_max(int64_t rows, int vectors, const float *col_scale, float *s,
                          int64_t lds, float *row_max) {
    for (int64_t r = 0; r < rows; ++r) {
        __m512 m = _mm512_load_ps(row_max + r * 16);
        for (int v = 0; v < vectors; ++v) {
            const __m512 x = _mm512_mul_ps(_mm512_load_ps(s + r * lds + v * 16),
                                           _mm512_loadu_ps(col_scale + v * 16));
            _mm512_store_ps(s + r * lds + v * 16, x);
            m = _mm512_max_ps(x, m);
        }
        _mm512_store_ps(row_max + r * 16, m);
    }
}

// The scores policy of attention_forward_tile_with: Q as bf16 pairs [rows][pairs] (as the
// pair path's load_q forms them), S and P V on tiles. Codes: K and V are a quantized cache's
// codes, their scales outside the products (as bf16_scores<Arch, true> takes them).
template <class Arch, class Tiles, bool Codes = false>
struct tile_scores {
    using pairs_policy = attention_bf16_detail::bf16_scores<Arch, Codes>;
    using fbatch = xsimd::batch<float, Arch>;

    // bf16 rows of an even dim are their pairs already: copied, not built pair by pair
    static void load_q(const attention_tile &t, float *q_region) {
        if (t.q_type != ATTN_DTYPE_BF16 || t.dim_qk % 2 != 0) return pairs_policy::load_q(t, q_region);
        uint32_t *q = reinterpret_cast<uint32_t *>(q_region);
        for (int64_t r = 0; r < t.rows; ++r)
            std::memcpy(q + r * (t.dim_qk / 2), element_at(t.q, t.q_type, r * t.q_ld),
                        size_t(t.dim_qk) * sizeof(uint16_t));
    }

    static bool tile(const attention_tile &t, const float *q_region, int64_t j0, int64_t cols,
                     float *s, float *k_buf, float *score_max, float *key_factors) {
        using blk = attention_blocking<Arch>;
        constexpr int nr = panel_keys<Arch>;
        const int64_t panels = (cols + nr - 1) / nr, pairs = pairs_of(t.dim_qk);
        const uint16_t *k_at = attention_bf16_detail::tile_k_pairs<Arch, Codes>(t, j0, panels, k_buf);
        alignas(64) float col_scale[blk::bc];
        attention_bf16_detail::tile_factors<Arch, Codes>(t, j0, cols, panels, col_scale, key_factors);
        const uint32_t *q = reinterpret_cast<const uint32_t *>(q_region);
        attention_detail::score_blocks<Arch, rows_per_block>(  // one K panel in L1 across the row blocks
            t, j0, cols, panels, s, score_max,
            [&](int64_t r0, int64_t rr, int64_t p, int vectors, float *s_at, float *row_max) {
                score_tiles_any<Arch, Tiles>(vectors, q + r0 * pairs, pairs,
                                             k_at + p * nr * pairs * 2, s_at);
                scale_and_max(rr, vectors, col_scale + p * nr, s_at, blk::bc, row_max);
            });
        return true;
    }

    // P in bf16 as on the pair path, its V scales (Codes) left by tile in key_factors
    static fbatch exp(const fbatch &x) { return pairs_policy::exp(x); }
    static fbatch exp_row(const attention_tile &t, float *s_row, key_range seen, float m,
                          int64_t r, int64_t j0, int64_t cols, const float *key_factors) {
        return pairs_policy::exp_row(t, s_row, seen, m, r, j0, cols, key_factors);
    }

    static void pv(const attention_tile &t, int64_t j0, int64_t cols, float *s, float *o,
                   int64_t dv_pad, const float *rescale, float *v_buf);

    // o_row += P V over the keys [a, b) of row r's tile columns (P in bf16 in row r of s).
    static void rest_of_row(const attention_tile &t, const float *s, int64_t r,
                            int64_t a, int64_t b, const attention_bf16_detail::v_pair_rows<Arch> &vp,
                            float *o_row) {
        using blk = attention_blocking<Arch>;
        constexpr int W = lanes<Arch>;
        if (b <= a) return;
        const uint16_t *p16 = reinterpret_cast<const uint16_t *>(s + r * blk::bc);
        const int64_t vectors = attention_detail::round_up(t.dim_v, W) / W;
        auto singles = [&](int64_t from, int64_t to) {  // keys from .. to-1 one at a time
            attention_bf16_detail::add_keys_pairs<Arch>(p16, vp, from, to, vectors * W, o_row);
        };
        const int64_t pa = (a + 1) / 2, pb = b / 2;
        if (pb <= pa) {
            singles(a, b);
            return;
        }
        const float unit = 1.0f;
        for (int64_t c0 = 0; c0 < vectors; c0 += 4) {
            const auto chunk = vp.from(c0 * W);
            attention_bf16_detail::pv_block_pairs_any<Arch, 1, 4>(
                1, static_cast<int>(vectors - c0 < 4 ? vectors - c0 : 4),
                reinterpret_cast<const uint32_t *>(p16) + pa, 0, pb - pa,
                chunk.at + pa * chunk.ld, chunk.ld, o_row + c0 * W, 0, &unit);
        }
        if (a % 2 != 0) singles(a, a + 1);
        if (b % 2 != 0) singles(b - 1, b);
    }
};

// O = O * rescale + P V for the keys j0 .. j0+cols-1 of a tile (pv_tile_pairs's contract).
template <class Arch, class Tiles, bool Codes>
void tile_scores<Arch, Tiles, Codes>::pv(const attention_tile &t, int64_t j0, int64_t cols,
                                         float *s, float *o, int64_t dv_pad,
                                         const float *rescale, float *v_buf) {
    using blk = attention_blocking<Arch>;
    constexpr int W = lanes<Arch>;
    const uint32_t *p_words = reinterpret_cast<const uint32_t *>(s);
    const attention_bf16_detail::v_pair_rows<Arch> vp =
        attention_bf16_detail::tile_v_pairs<Arch>(t, Codes, j0, cols, dv_pad, v_buf);
    static_assert(attention_bf16_detail::v_chunk_words<Arch> == 4 * W, "4 vectors of O a chunk of V");
    const int64_t vectors = dv_pad / W;
    for (int64_t r0 = 0; r0 < t.rows; r0 += rows_per_block) {
        const int64_t rr = t.rows - r0 < rows_per_block ? t.rows - r0 : rows_per_block;
        for (int64_t r = r0; r < r0 + rr; ++r) {
            if (rescale[r] == 1.0f) continue;  // the row's max stood: O as it is
            const __m512 f = _mm512_set1_ps(rescale[r]);
            for (int64_t c = 0; c < dv_pad; c += W)
                _mm512_store_ps(o + r * dv_pad + c, _mm512_mul_ps(_mm512_load_ps(o + r * dv_pad + c), f));
        }
        // whole chunks of 16 pairs of keys every row of the block sees, on tiles
        const key_range shared = attention_detail::shared_columns(t, r0, r0 + rr, j0, cols);
        const int64_t first_pair = (shared.lo + 1) / 2, end_pair = shared.hi / 2;
        const int64_t chunks = end_pair > first_pair ? (end_pair - first_pair) / pairs_per_tile : 0;
        if (chunks > 0)
            for (int64_t c0 = 0; c0 < vectors; c0 += 4) {
                const auto chunk = vp.from(c0 * W);
                pv_tiles_any<Arch, Tiles>(static_cast<int>(vectors - c0 < 4 ? vectors - c0 : 4),
                                          p_words + r0 * blk::bc + first_pair, chunks,
                                          chunk.at + first_pair * chunk.ld, chunk.ld,
                                          o + r0 * dv_pad + c0 * W, dv_pad);
            }
        // every other key a row sees, row by row: whole pairs with VDPBF16PS from the V pair
        // rows, a range's odd first or last key from the stored V row
        const int64_t tiled_lo = chunks > 0 ? 2 * first_pair : 0;
        const int64_t tiled_hi = chunks > 0 ? 2 * (first_pair + chunks * pairs_per_tile) : 0;
        for (int64_t r = r0; r < r0 + rr; ++r) {
            const key_range own = attention_detail::tile_columns(t, r, j0, cols);
            if (own.lo >= tiled_lo && own.hi <= tiled_hi) continue;  // all on the tiles
            rest_of_row(t, s, r, own.lo, own.hi < tiled_lo ? own.hi : tiled_lo, vp, o + r * dv_pad);
            rest_of_row(t, s, r, own.lo > tiled_hi ? own.lo : tiled_hi, own.hi, vp, o + r * dv_pad);
        }
    }
}

// Whether the tiles take this head's dims (else the VDPBF16PS kernel runs).
inline bool tiles_fit(const attention_tile &t) { return pairs_of(t.dim_qk) % pairs_per_tile == 0; }

inline tile_config attention_config() {
    return uniform_config(palette_tiles, max_rows, max_row_bytes);
}

}  // namespace attention_amx_detail

// ---- entry points (the amx and amx_emulated levels' attention_*_tile_bf16) -----------------

// Codes: the amx_code_tiles entry's (a quantized cache's codes, bf16_code_pairs' calls).
template <class Arch, class Tiles, bool Codes = false>
void attention_forward_tile_amx(const attention_tile &t) {
    using namespace attention_amx_detail;
    if (!tiles_fit(t))
        return attention_forward_tile_with<Arch, attention_bf16_detail::bf16_scores<Arch, Codes>>(t);
    const tile_guard<Tiles> guard(attention_config());
    attention_forward_tile_with<Arch, tile_scores<Arch, Tiles, Codes>>(t);
}

template <class Arch, class Tiles, bool Codes = false>
void attention_weights_tile_amx(const attention_tile &t, float *weights, int64_t weights_ld,
                                bool after_forward) {
    using namespace attention_amx_detail;
    if (!tiles_fit(t))
        return attention_weights_tile_with<Arch, attention_bf16_detail::bf16_scores<Arch, Codes>>(
            t, weights, weights_ld, after_forward);
    const tile_guard<Tiles> guard(attention_config());
    attention_weights_tile_with<Arch, tile_scores<Arch, Tiles, Codes>>(t, weights, weights_ld,
                                                                      after_forward);
}

}  // namespace attn::kernels::amx
