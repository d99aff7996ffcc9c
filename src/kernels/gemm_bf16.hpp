// GEMM from bf16 pairs (VDPBF16PS), for the avx512_bf16 and amx levels: the packing and the
// micro-kernel of the "pair panels" the driver in src/ops/gemm.cpp runs when the products may
// be bf16 (A and B stored in bf16: their products are exact in f32; or ATTN_FPMATH_BF16, f32
// and f16 inputs rounded to bf16 once, while packing). The loops and block sizes MR x NR are
// those of the f32 panels (gemm.hpp); only the depth is counted in pairs.
//
// Layouts (kp = ceil(kc / 2) pairs of consecutive k, the last one zero in its high half when
// kc is odd), as 32-bit words, low half first:
//   Packed A: slivers of MR rows, [kp][MR] words, word (q, r) = (A[r, 2q], A[r, 2q + 1]).
//   Packed B: slivers of NR columns, [kp][NR] words = [kp][NR][2] bf16, word (q, j) =
//             (B[2q, j], B[2q + 1, j]).
// The micro-kernel broadcasts an A word and pairs it with 16 B words per VDPBF16PS: each lane
// gets A[r,2q] B[2q,j] + A[r,2q+1] B[2q+1,j], as attention_bf16.hpp forms Q K^T.
// Rows that run along k (A not transposed, B transposed) are, read as 32-bit words, already
// pairs: their panel is the f32 transpose (pack_transposed) applied to words. Rows that run
// across k (A transposed, B not) are interleaved two at a time (zero-extend, shift, or).
// Needs -mavx512bf16: included only by src/kernels/arch/avx512_bf16.cpp.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/convert.hpp"
#include "kernels/elements.hpp"
#include "kernels/gemm.hpp"

ATTN_KERNELS_BEGIN
namespace gemm_bf16_detail {

// dst[0:n) = the bf16 bits of n elements of type t (bf16 copied, f32 and f16 rounded once,
// by attn_convert's rules: RNE, f32 subnormals to +-0).
template <class Arch>
inline void to_bf16(const void *src, attn_dtype t, int64_t n, uint16_t *dst) {
    if (t == ATTN_DTYPE_BF16)
        std::memcpy(dst, src, size_t(n) * 2);
    else
        convert_array<Arch>(n, src, t, dst, ATTN_DTYPE_BF16);
}

inline __mmask16 first_lanes(int64_t n) {
    return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// dst[i] = lo[i] | hi[i] << 16 for i < n, 0 for n <= i < store (n, store <= 16); hi null:
// a zero high half. Masked loads read nothing past n, so a row's end never faults.
inline void interleave16(const uint16_t *lo, const uint16_t *hi, int64_t n, int64_t store,
                         uint32_t *dst) {
    const __mmask16 m = first_lanes(n);
    const __m512i l = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, lo));
    const __m512i h = hi ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, hi)), 16)
                         : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(dst, first_lanes(store), _mm512_or_si512(l, h));
}

// Rows across k: element (p, i) at src + p * ld + i (p < kc, i < count) into slivers of
// `width` (sliver s at packed + s * kp * width), zero for i >= count. Two consecutive rows p
// make one row of words. Non-bf16 rows are rounded into a buffer first, a group of slivers
// (at most group_cols elements) at a time, so each element is converted once.
template <class Arch>
void pack_interleaved(int64_t width, int64_t count, int64_t kc, const void *src, attn_dtype t,
                      int64_t ld, uint32_t *packed) {
    constexpr int64_t group_cols = 512;
    const int64_t kp = (kc + 1) / 2;
    const int64_t slivers = (count + width - 1) / width;
    const int64_t group = width >= group_cols ? 1 : group_cols / width;
    alignas(64) uint16_t lo_buf[group_cols + 32], hi_buf[group_cols + 32];
    for (int64_t s0 = 0; s0 < slivers; s0 += group) {
        const int64_t s1 = s0 + group < slivers ? s0 + group : slivers;
        const int64_t i0 = s0 * width;
        const int64_t cols = (count < s1 * width ? count : s1 * width) - i0;
        for (int64_t q = 0; q < kp; ++q) {
            const bool has_hi = 2 * q + 1 < kc;
            const uint16_t *lo, *hi = nullptr;
            if (t == ATTN_DTYPE_BF16) {
                lo = static_cast<const uint16_t *>(element_at(src, t, 2 * q * ld + i0));
                if (has_hi) hi = lo + ld;
            } else {
                to_bf16<Arch>(element_at(src, t, 2 * q * ld + i0), t, cols, lo_buf);
                if (has_hi) to_bf16<Arch>(element_at(src, t, (2 * q + 1) * ld + i0), t, cols, hi_buf);
                lo = lo_buf;
                hi = has_hi ? hi_buf : nullptr;
            }
            for (int64_t s = s0; s < s1; ++s) {
                const int64_t off = (s - s0) * width;  // of this sliver in lo / hi
                uint32_t *dst = packed + (s * kp + q) * width;
                for (int64_t w = 0; w < width; w += 16)
                    interleave16(lo + off + w, hi ? hi + off + w : nullptr, cols - off - w,
                                 width - w, dst + w);
            }
        }
    }
}

// Rows along k: element (r, p) at src + r * ld + p (r < count, p < kc) into slivers of
// `width`, zero for r >= count. bf16 rows of an even ld from a 4-byte aligned start are
// already rows of pair words: the f32 transpose moves them as they are (the odd kc's last
// pair, a lone element, is set apart). Other rows are rounded to bf16, KB elements at a time,
// into a zero-padded block and transposed from there.
template <class Arch>
void pack_words_transposed(int64_t width, int64_t count, int64_t kc, const void *src,
                           attn_dtype t, int64_t ld, uint32_t *packed) {
    constexpr int64_t KB = 128;  // even: the blocks start on whole pairs
    constexpr int64_t max_width = 32;
    const int64_t kp = (kc + 1) / 2;
    const bool words = t == ATTN_DTYPE_BF16 && ld % 2 == 0 &&
                       reinterpret_cast<uintptr_t>(src) % 4 == 0;
    alignas(64) uint16_t block[max_width * KB];
    for (int64_t r0 = 0; r0 < count; r0 += width, packed += kp * width) {
        const int64_t rows = count - r0 < width ? count - r0 : width;
        if (words) {
            const auto *s16 = static_cast<const uint16_t *>(src) + r0 * ld;
            pack_transposed<Arch>(width, rows, kc / 2, reinterpret_cast<const float *>(s16), ld / 2,
                                  reinterpret_cast<float *>(packed));
            if (kc % 2 == 1) {
                uint32_t *last = packed + (kp - 1) * width;
                for (int64_t r = 0; r < width; ++r) last[r] = r < rows ? s16[r * ld + kc - 1] : 0u;
            }
            continue;
        }
        for (int64_t p0 = 0; p0 < kc; p0 += KB) {
            const int64_t len = kc - p0 < KB ? kc - p0 : KB;
            for (int64_t r = 0; r < rows; ++r) {
                to_bf16<Arch>(element_at(src, t, (r0 + r) * ld + p0), t, len, block + r * KB);
                if (len % 2 == 1) block[r * KB + len] = 0;
            }
            pack_transposed<Arch>(width, rows, (len + 1) / 2, reinterpret_cast<const float *>(block),
                                  KB / 2, reinterpret_cast<float *>(packed + p0 / 2 * width));
        }
    }
}

}  // namespace gemm_bf16_detail

// Packs op(A)[0:mc, 0:kc] (a: the block's first element, of type a_type) into pair slivers.
template <class Arch>
void gemm_pack_a_bf16(attn_trans trans_a, int64_t mc, int64_t kc, const void *a,
                      attn_dtype a_type, int64_t lda, uint32_t *packed) {
    constexpr int64_t MR = gemm_blocking_for<Arch>().mr;
    if (trans_a == ATTN_TRANS)  // op(A)[i, p] = a[p*lda + i]
        gemm_bf16_detail::pack_interleaved<Arch>(MR, mc, kc, a, a_type, lda, packed);
    else  // op(A)[i, p] = a[i*lda + p]
        gemm_bf16_detail::pack_words_transposed<Arch>(MR, mc, kc, a, a_type, lda, packed);
}

// Packs op(B)[0:kc, 0:nc] (b: the block's first element) into pair slivers.
template <class Arch>
void gemm_pack_b_bf16(attn_trans trans_b, int64_t kc, int64_t nc, const void *b,
                      attn_dtype b_type, int64_t ldb, uint32_t *packed) {
    constexpr int64_t NR = gemm_blocking_for<Arch>().nr;
    static_assert(NR <= 32, "pack_words_transposed's block holds 32 rows");
    if (trans_b == ATTN_NO_TRANS)  // op(B)[p, j] = b[p*ldb + j]
        gemm_bf16_detail::pack_interleaved<Arch>(NR, nc, kc, b, b_type, ldb, packed);
    else  // op(B)[p, j] = b[j*ldb + p]
        gemm_bf16_detail::pack_words_transposed<Arch>(NR, nc, kc, b, b_type, ldb, packed);
}

// C[0:m_r, 0:n_r] := beta * C + alpha * A_sliver * B_sliver over kp pairs (the contract of
// gemm_micro_kernel, C never read when beta == 0): MR x NR/16 accumulators, each step one
// broadcast A pair per row against NR/16 vectors of B pairs.
template <class Arch>
void gemm_micro_kernel_bf16(int64_t kp, float alpha, const uint32_t *a_packed,
                            const uint32_t *b_packed, float beta, float *c, int64_t ldc,
                            int64_t m_r, int64_t n_r) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int MR = gemm_blocking_for<Arch>().mr;
    constexpr int NR = gemm_blocking_for<Arch>().nr;
    constexpr int NV = NR / 16;
    static_assert(fbatch::size == 16 && NR % 16 == 0, "zmm pair kernels only");

    gemm_prefetch_c<MR>(c, ldc, m_r, n_r);
    __m512 acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();

#pragma GCC unroll 2
    for (int64_t q = 0; q < kp; ++q) {
        const uint32_t *bq = b_packed + q * NR;
        const uint32_t *aq = a_packed + q * MR;
        __m512bh bv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(bq + v * 16);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32(int(aq[r]));
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
        }
    }
    fbatch sums[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) sums[r][v] = acc[r][v];
    gemm_finish_tile<Arch, MR, NV>(sums, alpha, beta, c, ldc, m_r, n_r);
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
