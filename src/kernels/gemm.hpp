// GEMM building blocks in the BLIS layout, templated on the xsimd Arch: the block sizes,
// packing of op(A) and op(B) into micro-panels, and the register-blocked micro-kernel.
// The five loops around them live in src/ops/gemm.cpp.
//
// Shapes and layouts (all row-major, as the C API):
//   op(A) is m x k: a[i*lda + p] (ATTN_NO_TRANS) or a[p*lda + i] (ATTN_TRANS).
//   op(B) is k x n: b[p*ldb + j] (ATTN_NO_TRANS) or b[j*ldb + p] (ATTN_TRANS).
//   Packed A: ceil(mc/MR) slivers, sliver s holds rows s*MR .. s*MR+MR-1 as [kc][MR]
//             (MR consecutive floats per p), rows past mc are zero.
//   Packed B: ceil(nc/NR) slivers, sliver s holds columns s*NR .. as [kc][NR], columns past
//             nc are zero. Both transposes are absorbed here, so the micro-kernel sees one
//             layout.
//   Packed buffers start 64-byte aligned; slivers inside them need not be (kc*MR floats),
//   so packed data is read with unaligned loads, which cost nothing extra on aligned data.
#pragma once

#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "attn/attn.h"

namespace attn::kernels {

// Block sizes for one ISA: the micro-tile MR x NR (NR a multiple of the vector width),
// KC (depth of one packed panel: a KC x NR sliver of B stays in L1), MC (rows of A packed
// at once: MC x KC stays in L2) and NC (columns of B packed at once: KC x NC in L3).
struct gemm_blocking {
    int mr, nr, kc, mc, nc;
};

// The one table of GEMM block sizes. Registers: AVX-512 has 32 zmm, 14 x 2 accumulators
// + 2 B vectors + 1 broadcast; AVX2 and SSE4 have 16, 6 x 2 + 2 + 1.
template <class Arch>
constexpr gemm_blocking gemm_blocking_for() {
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>)
        return {14, 32, 256, 14 * 24, 4096};
    else if constexpr (std::is_base_of_v<xsimd::avx2, Arch>)
        return {6, 16, 256, 6 * 32, 4096};
    else
        return {6, 8, 256, 6 * 32, 4096};
}

// Packs op(A)[0:mc, 0:kc] (a points at op(A)[0,0] of the block) into slivers of MR rows.
template <class Arch>
void gemm_pack_a(attn_trans trans_a, int64_t mc, int64_t kc, const float *a, int64_t lda,
                 float *packed) {
    constexpr int64_t MR = gemm_blocking_for<Arch>().mr;
    for (int64_t i0 = 0; i0 < mc; i0 += MR, packed += kc * MR) {
        const int64_t rows = mc - i0 < MR ? mc - i0 : MR;
        if (trans_a == ATTN_TRANS) {
            // op(A)[i, p] = a[p*lda + i]: each p is a contiguous run of rows.
            for (int64_t p = 0; p < kc; ++p) {
                const float *src = a + p * lda + i0;
                float *dst = packed + p * MR;
                int64_t r = 0;
                for (; r < rows; ++r) dst[r] = src[r];
                for (; r < MR; ++r) dst[r] = 0.0f;
            }
        } else {
            // op(A)[i, p] = a[i*lda + p]: a transpose of an MR x kc block, row by row so
            // the reads stay sequential.
            int64_t r = 0;
            for (; r < rows; ++r) {
                const float *src = a + (i0 + r) * lda;
                for (int64_t p = 0; p < kc; ++p) packed[p * MR + r] = src[p];
            }
            for (; r < MR; ++r)
                for (int64_t p = 0; p < kc; ++p) packed[p * MR + r] = 0.0f;
        }
    }
}

// Packs op(B)[0:kc, 0:nc] (b points at op(B)[0,0] of the block) into slivers of NR columns.
template <class Arch>
void gemm_pack_b(attn_trans trans_b, int64_t kc, int64_t nc, const float *b, int64_t ldb,
                 float *packed) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int64_t NR = gemm_blocking_for<Arch>().nr;
    constexpr int64_t W = fbatch::size;
    for (int64_t j0 = 0; j0 < nc; j0 += NR, packed += kc * NR) {
        const int64_t cols = nc - j0 < NR ? nc - j0 : NR;
        if (trans_b == ATTN_NO_TRANS) {
            // op(B)[p, j] = b[p*ldb + j]: a straight copy of NR-wide row pieces.
            for (int64_t p = 0; p < kc; ++p) {
                const float *src = b + p * ldb + j0;
                float *dst = packed + p * NR;
                if (cols == NR) {
                    for (int64_t v = 0; v < NR; v += W)
                        fbatch::load_unaligned(src + v).store_unaligned(dst + v);
                } else {
                    int64_t j = 0;
                    for (; j < cols; ++j) dst[j] = src[j];
                    for (; j < NR; ++j) dst[j] = 0.0f;
                }
            }
        } else {
            // op(B)[p, j] = b[j*ldb + p]: a transpose, column by column with sequential reads.
            int64_t j = 0;
            for (; j < cols; ++j) {
                const float *src = b + (j0 + j) * ldb;
                for (int64_t p = 0; p < kc; ++p) packed[p * NR + j] = src[p];
            }
            for (; j < NR; ++j)
                for (int64_t p = 0; p < kc; ++p) packed[p * NR + j] = 0.0f;
        }
    }
}

// The micro-kernel: C[0:m_r, 0:n_r] := beta * C + alpha * A_sliver * B_sliver, where
// A_sliver is packed [kc][MR] and B_sliver is packed [kc][NR] (zero padded), and
// 1 <= m_r <= MR, 1 <= n_r <= NR. C is never read when beta == 0; alpha is applied once, to
// the finished dot products. Each element is computed the same way whether its tile is
// full or an edge tile: one fma chain over p in order, then alpha*acc (+ beta*c).
template <class Arch>
void gemm_micro_kernel(int64_t kc, float alpha, const float *a_packed, const float *b_packed,
                       float beta, float *c, int64_t ldc, int64_t m_r, int64_t n_r) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int MR = gemm_blocking_for<Arch>().mr;
    constexpr int NR = gemm_blocking_for<Arch>().nr;
    constexpr int W = fbatch::size;
    constexpr int NV = NR / W;
    static_assert(NR % W == 0, "NR must be a whole number of vectors");

    // acc[r][v] = sum_p A[r,p] * B[p, v*W : v*W+W]
    fbatch acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = fbatch(0.0f);

#pragma GCC unroll 2
    for (int64_t p = 0; p < kc; ++p) {
        const float *bp = b_packed + p * NR;
        const float *ap = a_packed + p * MR;
        fbatch bv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) bv[v] = fbatch::load_unaligned(bp + v * W);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            const fbatch ar(ap[r]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) acc[r][v] = xsimd::fma(ar, bv[v], acc[r][v]);
        }
    }

    const fbatch alpha_v(alpha), beta_v(beta);
    // C row piece := alpha*acc (+ beta*C): one formula for full and edge tiles.
    auto finish = [&](const fbatch &sum, const float *c_in) {
        return beta == 0.0f ? alpha_v * sum
                            : xsimd::fma(alpha_v, sum, beta_v * fbatch::load_unaligned(c_in));
    };
    if (m_r == MR && n_r == NR) {
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) {
                float *cp = c + r * ldc + v * W;
                finish(acc[r][v], cp).store_unaligned(cp);
            }
        return;
    }
    // Edge tile: go through a row buffer so only the n_r valid columns are read and written.
    alignas(64) float row[NR] = {};
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
        if (r >= m_r) break;
        float *cr = c + r * ldc;
        if (beta != 0.0f)
            for (int64_t j = 0; j < n_r; ++j) row[j] = cr[j];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) finish(acc[r][v], row + v * W).store_aligned(row + v * W);
        for (int64_t j = 0; j < n_r; ++j) cr[j] = row[j];
    }
}

}  // namespace attn::kernels
