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

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <type_traits>

#include <immintrin.h>
#include <xsimd/xsimd.hpp>

#include "attn/attn.h"
#include "kernels/convert.hpp"

ATTN_KERNELS_BEGIN

// Block sizes for one ISA: the micro-tile MR x NR (NR a multiple of the vector width),
// KC (depth of one packed panel: a KC x NR sliver of B is reused from cache by every MR-row
// sliver of A), MC (rows of A packed at once: MC x KC stays in L2) and NC (columns of B
// packed at once: KC x NC in L3).
struct gemm_blocking {
    int mr, nr, kc, mc, nc;
};

// The one table of GEMM block sizes. Registers: AVX-512 has 32 zmm, 12 x 2 accumulators
// + 2 B vectors + 1 broadcast; AVX2 and SSE4 have 16, 6 x 2 + 2 + 1. On AVX-512, MR = 12
// (not 14) keeps A packing in whole 4 x 4 transposes. KC = 512 measured best of 256..1024
// on 1024 and 2048 squares against OpenBLAS (256: 0.88-0.96x, 384: 0.90-0.98x, 512:
// 0.94-1.04x, one thread, best of several): fewer passes over C outweigh a B sliver that
// spills from L1 (48 KiB here) to L2. MC = 480 (a 960 KiB A block, half the 2 MiB L2):
// against 240, each thread streams the shared B panel from L3 half as often, 3-10% faster
// on two threads at 1024^3 and 2048^3 in alternated runs, the same on one.
template <class Arch>
constexpr gemm_blocking gemm_blocking_for() {
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>)
        return {12, 32, 512, 12 * 40, 4096};
    else if constexpr (std::is_base_of_v<xsimd::avx2, Arch>)
        return {6, 16, 256, 6 * 32, 4096};
    else
        return {6, 8, 256, 6 * 32, 4096};
}

// dst[p*width + r] = src[r*ld + p] for p < kc: the transpose of a rows x kc block into
// `width`-wide columns, zero for rows <= r < width. Shared by the packing of A (not
// transposed) and of B (transposed), the two layouts whose rows run along k.
// 4 x 4 tiles go through SSE registers (every ISA here has them): reading four rows at once
// and writing four packed columns at once is several times faster than element by element.
template <class Arch>
inline void pack_transposed(int64_t width, int64_t rows, int64_t kc, const float *src, int64_t ld,
                            float *dst) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        const float *s0 = src + r * ld, *s1 = s0 + ld, *s2 = s1 + ld, *s3 = s2 + ld;
        int64_t p = 0;
        for (; p + 4 <= kc; p += 4) {
            // The four rows are short runs far apart in memory: fetch a few lines ahead.
            if ((p & 15) == 0) {
                _mm_prefetch(reinterpret_cast<const char *>(s0 + p + 64), _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char *>(s1 + p + 64), _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char *>(s2 + p + 64), _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char *>(s3 + p + 64), _MM_HINT_T0);
            }
            __m128 c0 = _mm_loadu_ps(s0 + p), c1 = _mm_loadu_ps(s1 + p);
            __m128 c2 = _mm_loadu_ps(s2 + p), c3 = _mm_loadu_ps(s3 + p);
            _MM_TRANSPOSE4_PS(c0, c1, c2, c3);
            _mm_storeu_ps(dst + (p + 0) * width + r, c0);
            _mm_storeu_ps(dst + (p + 1) * width + r, c1);
            _mm_storeu_ps(dst + (p + 2) * width + r, c2);
            _mm_storeu_ps(dst + (p + 3) * width + r, c3);
        }
        for (; p < kc; ++p) {
            dst[p * width + r + 0] = s0[p];
            dst[p * width + r + 1] = s1[p];
            dst[p * width + r + 2] = s2[p];
            dst[p * width + r + 3] = s3[p];
        }
    }
    for (; r < rows; ++r)
        for (int64_t p = 0; p < kc; ++p) dst[p * width + r] = src[r * ld + p];
    if (r < width)
        for (int64_t p = 0; p < kc; ++p)
            for (int64_t z = r; z < width; ++z) dst[p * width + z] = 0.0f;
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
                if (rows == MR) {
                    // A fixed-size copy: the compiler turns it into a few vector moves.
                    __builtin_memcpy(dst, src, sizeof(float) * MR);
                    continue;
                }
                int64_t r = 0;
                for (; r < rows; ++r) dst[r] = src[r];
                for (; r < MR; ++r) dst[r] = 0.0f;
            }
        } else {
            // op(A)[i, p] = a[i*lda + p]: rows run along k, a transpose.
            pack_transposed<Arch>(MR, rows, kc, a + i0 * lda, lda, packed);
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
                    for (; j + W <= cols; j += W)
                        fbatch::load_unaligned(src + j).store_unaligned(dst + j);
                    for (; j < cols; ++j) dst[j] = src[j];
                    for (; j < NR; ++j) dst[j] = 0.0f;
                }
            }
        } else {
            // op(B)[p, j] = b[j*ldb + p]: columns run along k, a transpose.
            pack_transposed<Arch>(NR, cols, kc, b + j0 * ldb, ldb, packed);
        }
    }
}

// Typed packing (attn_gemm): the same packed f32 layouts from arrays of `type` (lda/ldb in
// its elements), each element widened exactly, or, with round_bf16 (ATTN_FPMATH_BF16),
// rounded to bf16 first. The micro-kernel sees f32 panels only, so one driver serves every
// type. Rows that run along k are converted kb elements at a time into a small f32 block
// and transposed from there.
constexpr int64_t gemm_typed_kb = 128;

template <class Arch>
inline const void *typed_at(const void *base, attn_dtype type, int64_t offset) {
    return static_cast<const unsigned char *>(base) + offset * core::element_bytes(type);
}

// Panels of W lanes (W = MR: rows of op(A); W = NR: columns of op(B)) of a typed matrix, as
// f32, lane x of depth p at packed[(x / W) * depth * W + p * W + x % W], lanes past extent
// zero. Element (x, p) of the source is at p * ld + x where the lanes are contiguous (A
// transposed, B not), else at x * ld + p (then read a row of depth at a time, KB elements per
// lane, and transposed into the panel).
template <class Arch, int64_t W>
void gemm_pack_panels_typed(bool lanes_contiguous, int64_t depth, int64_t extent, const void *src,
                            attn_dtype type, int64_t ld, bool round_bf16, float *packed) {
    constexpr int64_t KB = gemm_typed_kb;
    alignas(64) float block[W * KB];
    for (int64_t x0 = 0; x0 < extent; x0 += W, packed += depth * W) {
        const int64_t lanes = extent - x0 < W ? extent - x0 : W;
        if (lanes_contiguous) {
            for (int64_t p = 0; p < depth; ++p) {
                float *dst = packed + p * W;
                load_f32_row<Arch>(typed_at<Arch>(src, type, p * ld + x0), type, round_bf16, lanes, dst);
                for (int64_t x = lanes; x < W; ++x) dst[x] = 0.0f;
            }
        } else {
            for (int64_t p0 = 0; p0 < depth; p0 += KB) {
                const int64_t len = depth - p0 < KB ? depth - p0 : KB;
                for (int64_t x = 0; x < lanes; ++x)
                    load_f32_row<Arch>(typed_at<Arch>(src, type, (x0 + x) * ld + p0), type, round_bf16,
                                       len, block + x * KB);
                pack_transposed<Arch>(W, lanes, len, block, KB, packed + p0 * W);
            }
        }
    }
}

// op(A)[i, p] is a[p*lda + i] when A is transposed (each p a contiguous run of rows), else
// a[i*lda + p].
template <class Arch>
void gemm_pack_a_typed(attn_trans trans_a, int64_t mc, int64_t kc, const void *a,
                       attn_dtype type, int64_t lda, bool round_bf16, float *packed) {
    gemm_pack_panels_typed<Arch, gemm_blocking_for<Arch>().mr>(trans_a == ATTN_TRANS, kc, mc, a, type, lda,
                                                              round_bf16, packed);
}

// op(B)[p, j] is b[p*ldb + j] when B is not transposed (NR-wide row pieces), else b[j*ldb + p].
template <class Arch>
void gemm_pack_b_typed(attn_trans trans_b, int64_t kc, int64_t nc, const void *b,
                       attn_dtype type, int64_t ldb, bool round_bf16, float *packed) {
    gemm_pack_panels_typed<Arch, gemm_blocking_for<Arch>().nr>(trans_b == ATTN_NO_TRANS, kc, nc, b, type, ldb,
                                                              round_bf16, packed);
}

// Start bringing a C tile in (for writing) while its products are computed: C is touched
// once per tile, and its rows are far apart. Shared by the f32 and bf16-pair micro-kernels.
template <int MR>
inline void gemm_prefetch_c(float *c, int64_t ldc, int64_t m_r, int64_t n_r) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
        if (r >= m_r) break;
        __builtin_prefetch(c + r * ldc, 1, 3);
        __builtin_prefetch(c + r * ldc + n_r - 1, 1, 3);
    }
}

// C[0:m_r, 0:n_r] := alpha * acc (+ beta * C): one formula for full and edge tiles, C never
// read when beta == 0. Shared by the f32 and bf16-pair micro-kernels, so both round the
// same way once the dot products are done.
template <class Arch, int MR, int NV>
inline void gemm_finish_tile(const xsimd::batch<float, Arch> (&acc)[MR][NV], float alpha,
                             float beta, float *c, int64_t ldc, int64_t m_r, int64_t n_r) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = fbatch::size;
    constexpr int NR = NV * W;
    const fbatch alpha_v(alpha), beta_v(beta);
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

    gemm_prefetch_c<MR>(c, ldc, m_r, n_r);

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
    gemm_finish_tile<Arch, MR, NV>(acc, alpha, beta, c, ldc, m_r, n_r);
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
