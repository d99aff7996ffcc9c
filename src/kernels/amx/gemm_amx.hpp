// GEMM from bf16 pairs on AMX tiles, for the amx and amx_emulated levels: the packing and the
// block kernel the driver in src/ops/gemm.cpp runs in place of the VDPBF16PS pair panels
// (gemm_bf16.hpp) when the table has them. The same source runs on the real tiles and on the
// model (Tiles = amx_hw_tiles or amx_model_tiles, tiles.hpp).
//
// Blocks of C of MR x NR = 32 x 32 in four accumulator tiles (tmm0-3: rows 0-15 / 16-31 by
// columns 0-15 / 16-31), from two A tiles (tmm4, tmm5) and two B tiles (tmm6, tmm7) per 16
// pairs of depth. The packed depth of a panel of kc elements is kw = kc/2 pairs rounded up to
// a whole tile (16 pairs), zero beyond the data.
//   Packed A: slivers of MR rows, each [kw/16][MR][16] words: the A tile of rows r0..r0+15 and
//             pairs 16b..16b+15 is 1 KiB contiguous, a row of it the 16 pairs of one row of A.
//   Packed B: slivers of NR columns, [kw][NR] words (the pair panels of gemm_bf16.hpp, zero
//             beyond kc): the B tile of pairs 16b.. and columns c0..c0+15 is read with a stride
//             of NR words.
// Each element of C is one TDPBF16PS chain over the panel's tiles in order, then
// alpha * sum (+ beta * C) as in the other kernels (gemm_finish_tile's formula); except
// that with alpha 1 and beta 0 or 1 a whole 32 x 32 block (not one at the edges of C) starts
// its chain from C (beta 1; read as the tiles read it, subnormals as zero) or zero, and ends
// in C, saving the pass over the sums (a fifth of the time at 2048^3). Which blocks are whole
// depends on the shape alone, so results depend on the shape and kc only, not on which
// thread computes which block.
// Needs the avx512_bf16 flags (the packing and the finish are AVX-512).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/amx/tiles.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_bf16.hpp"

namespace attn::kernels::amx {

constexpr int64_t gemm_mr = 32, gemm_nr = 32;
constexpr int64_t tile_pairs = 16;  // pairs of depth per A row / B tile

// Packed depth, in pairs, of a panel of kc elements.
inline int64_t gemm_packed_pairs(int64_t kc) {
    return ((kc + 1) / 2 + tile_pairs - 1) / tile_pairs * tile_pairs;
}

namespace detail {

// One tile's worth of a sliver: pairs [q0, q0 + 16) of `rows` rows of op(A) into
// dst[r][16] (zero past kc and for rows <= r < MR), through the pair panels' packing.
template <class Arch>
void pack_a_block(attn_trans trans_a, int64_t rows, int64_t kc, int64_t q0, const void *a,
                  attn_dtype t, int64_t lda, uint32_t *dst) {
    const int64_t p0 = 2 * q0, len = kc - p0 < 2 * tile_pairs ? kc - p0 : 2 * tile_pairs;
    if (trans_a == ATTN_NO_TRANS && t == ATTN_DTYPE_BF16) {
        // rows of A are rows of the tile: a copy of len elements, zero after
        for (int64_t r = 0; r < gemm_mr; ++r) {
            auto *out = reinterpret_cast<uint16_t *>(dst + r * tile_pairs);
            std::memset(out, 0, 2 * tile_pairs * sizeof(uint16_t));
            if (r < rows)
                std::memcpy(out, static_cast<const uint16_t *>(a) + r * lda + p0,
                            size_t(len) * sizeof(uint16_t));
        }
        return;
    }
    alignas(64) uint32_t panel[tile_pairs * gemm_mr] = {};  // [pair][row]
    const void *src = element_at(a, t, trans_a == ATTN_TRANS ? p0 * lda : p0);
    if (trans_a == ATTN_TRANS)
        gemm_bf16_detail::pack_interleaved<Arch>(gemm_mr, rows, len, src, t, lda, panel);
    else
        gemm_bf16_detail::pack_words_transposed<Arch>(gemm_mr, rows, len, src, t, lda, panel);
    const int64_t pairs = (len + 1) / 2;
    for (int64_t r = 0; r < gemm_mr; ++r)
        for (int64_t q = 0; q < tile_pairs; ++q)
            dst[r * tile_pairs + q] = q < pairs ? panel[q * gemm_mr + r] : 0u;
}

// C[0:m_r, 0:n_r] := alpha * sums (+ beta * C), sums a 32 x 32 block: the formula of
// gemm_finish_tile, C never read when beta == 0. The product beta * C goes through an empty
// asm so the compiler cannot contract it with the fma the other way round (fma(beta, C,
// alpha * sum), which rounds differently): every instantiation, on the tiles or the model,
// rounds the same.
inline void finish_block(const float *sums, float alpha, float beta, float *c, int64_t ldc,
                         int64_t m_r, int64_t n_r) {
    const __m512 alpha_v = _mm512_set1_ps(alpha), beta_v = _mm512_set1_ps(beta);
    for (int64_t r = 0; r < m_r; ++r)
        for (int64_t v = 0; v < gemm_nr; v += 16) {
            const int64_t cols = n_r - v;
            if (cols <= 0) break;
            const __mmask16 m = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
            const __m512 sum = _mm512_load_ps(sums + r * gemm_nr + v);
            float *cp = c + r * ldc + v;
            __m512 out;
            if (beta == 0.0f) {
                out = _mm512_mul_ps(alpha_v, sum);
            } else {
                __m512 bc = _mm512_mul_ps(beta_v, _mm512_maskz_loadu_ps(m, cp));
                __asm__("" : "+v"(bc));
                out = _mm512_fmadd_ps(alpha_v, sum, bc);
            }
            _mm512_mask_storeu_ps(cp, m, out);
        }
}

}  // namespace detail

// Packs op(A)[0:mc, 0:kc] (a: the block's first element, of type a_type) into tile slivers.
template <class Arch>
void gemm_pack_a_tiles(attn_trans trans_a, int64_t mc, int64_t kc, const void *a,
                       attn_dtype a_type, int64_t lda, uint32_t *packed) {
    const int64_t kw = gemm_packed_pairs(kc);
    for (int64_t i0 = 0; i0 < mc; i0 += gemm_mr, packed += gemm_mr * kw) {
        const int64_t rows = mc - i0 < gemm_mr ? mc - i0 : gemm_mr;
        const void *sliver = element_at(a, a_type, trans_a == ATTN_TRANS ? i0 : i0 * lda);
        for (int64_t q0 = 0; q0 < kw; q0 += tile_pairs) {
            uint32_t *dst = packed + q0 * gemm_mr;
            if (2 * q0 >= kc)
                std::memset(dst, 0, sizeof(uint32_t) * tile_pairs * gemm_mr);
            else
                detail::pack_a_block<Arch>(trans_a, rows, kc, q0, sliver, a_type, lda, dst);
        }
    }
}

// Packs op(B)[0:kc, 0:nc] (b: the block's first element) into slivers of NR columns.
template <class Arch>
void gemm_pack_b_tiles(attn_trans trans_b, int64_t kc, int64_t nc, const void *b,
                       attn_dtype b_type, int64_t ldb, uint32_t *packed) {
    static_assert(gemm_blocking_for<Arch>().nr == gemm_nr, "B slivers are the pair panels'");
    const int64_t kw = gemm_packed_pairs(kc), kp = (kc + 1) / 2;
    for (int64_t j0 = 0; j0 < nc; j0 += gemm_nr, packed += kw * gemm_nr) {
        const int64_t cols = nc - j0 < gemm_nr ? nc - j0 : gemm_nr;
        gemm_pack_b_bf16<Arch>(trans_b, kc, cols, element_at(b, b_type, trans_b == ATTN_TRANS ? j0 * ldb : j0),
                               b_type, ldb, packed);
        std::memset(packed + kp * gemm_nr, 0, sizeof(uint32_t) * size_t((kw - kp) * gemm_nr));
    }
}

// C[0:mc, 0:n_r] := beta * C + alpha * A_block * B_sliver, for the mc rows of a packed A
// block (mc / MR slivers, the last one possibly partial) against one packed B sliver of
// kw pairs (n_r <= NR valid columns). C is never read when beta == 0.
template <class Arch, class Tiles>
void gemm_block_kernel_tiles(int64_t kw, float alpha, const uint32_t *a_packed, int64_t mc,
                             const uint32_t *b_sliver, float beta, float *c, int64_t ldc,
                             int64_t n_r) {
    constexpr int64_t MR = gemm_mr, NR = gemm_nr, a_tile = tile_pairs * 16;
    constexpr int64_t a_stride = tile_pairs * 4, b_stride = NR * 4, c_stride = NR * 4;
    const tile_guard<Tiles> guard(uniform_config(palette_tiles, max_rows, max_row_bytes));
    alignas(64) float sums[MR * NR];
    const int64_t ld_bytes = ldc * int64_t(sizeof(float));
    // alpha 1 and beta 0 or 1 (every depth panel after the first has beta 1): a whole block
    // accumulates in C itself, its tiles loaded from C (beta 1) or zeroed, stored back to C.
    const bool in_place = alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && n_r == NR;
    for (int64_t ir = 0; ir < mc; ir += MR) {
        const uint32_t *a = a_packed + ir * kw;
        float *const c_block = c + ir * ldc;
        const bool whole = in_place && mc - ir >= MR;
        if (whole && beta == 1.0f) {
            Tiles::template load<0>(c_block, ld_bytes);
            Tiles::template load<1>(c_block + 16, ld_bytes);
            Tiles::template load<2>(c_block + 16 * ldc, ld_bytes);
            Tiles::template load<3>(c_block + 16 * ldc + 16, ld_bytes);
        } else {
            Tiles::template zero<0>();
            Tiles::template zero<1>();
            Tiles::template zero<2>();
            Tiles::template zero<3>();
        }
        for (int64_t q0 = 0; q0 < kw; q0 += tile_pairs) {
            const uint32_t *at = a + q0 * MR, *bt = b_sliver + q0 * NR;
            Tiles::template load<4>(at, a_stride);
            Tiles::template load<6>(bt, b_stride);
            Tiles::template dpbf16ps<0, 4, 6>();
            Tiles::template load<7>(bt + 16, b_stride);
            Tiles::template dpbf16ps<1, 4, 7>();
            Tiles::template load<5>(at + a_tile, a_stride);
            Tiles::template dpbf16ps<2, 5, 6>();
            Tiles::template dpbf16ps<3, 5, 7>();
        }
        if (whole) {
            Tiles::template store<0>(c_block, ld_bytes);
            Tiles::template store<1>(c_block + 16, ld_bytes);
            Tiles::template store<2>(c_block + 16 * ldc, ld_bytes);
            Tiles::template store<3>(c_block + 16 * ldc + 16, ld_bytes);
            continue;
        }
        Tiles::template store<0>(sums, c_stride);
        Tiles::template store<1>(sums + 16, c_stride);
        Tiles::template store<2>(sums + 16 * NR, c_stride);
        Tiles::template store<3>(sums + 16 * NR + 16, c_stride);
        detail::finish_block(sums, alpha, beta, c_block, ldc, mc - ir < MR ? mc - ir : MR, n_r);
    }
}

}  // namespace attn::kernels::amx
