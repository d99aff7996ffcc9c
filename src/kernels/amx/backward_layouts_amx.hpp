// The operand layouts of the AMX backward (attention_backward_amx.hpp): rows to bf16, the
// 16 x 16 register transpose, and rows or keys paired for the tiles' B operands. Needs the
// avx512_bf16 flags; included by attention_backward_amx.hpp only.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/attention_bf16.hpp"

namespace attn::kernels::amx {
namespace backward_amx_detail {

// dst[0 .. pad) = the row's dim elements of type t in bf16 (as stored, or rounded once),
// zeros past dim; all zeros when src is null.
inline void row_bf16(const void *src, attn_dtype t, int64_t dim, int64_t pad, uint16_t *dst) {
    int64_t c = 0;
    if (src && t == ATTN_DTYPE_BF16) {
        std::memcpy(dst, src, size_t(dim) * sizeof(uint16_t));
        c = dim;
    } else if (src) {
        for (; c < dim; ++c) dst[c] = attention_bf16_detail::bf16_bits(src, t, c);
    }
    for (; c < pad; ++c) dst[c] = 0;
}

// The 16 x 16 transpose of r (rows in, columns out), bits untouched.
inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    auto lo = [](__m512 a, __m512 b) {
        return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    auto hi = [](__m512 a, __m512 b) {
        return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    for (int i = 0; i < 4; ++i) {  // r[4i + j], 128-bit lane L: rows 4i .. 4i+3 of column 4L+j
        r[4 * i] = lo(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = hi(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = lo(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = hi(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int j = 0; j < 4; ++j) {
        const __m512 a = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        const __m512 b = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
        const __m512 c = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        const __m512 d = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
        t[j] = _mm512_shuffle_f32x4(a, c, 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(b, d, 0x88);
        t[8 + j] = _mm512_shuffle_f32x4(a, c, 0xdd);
        t[12 + j] = _mm512_shuffle_f32x4(b, d, 0xdd);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// dst[x][c] = src[c][x] for 32-bit words, c < 16 * row_blocks rows of src, x < 16 * col_blocks.
inline void transpose_words(const float *src, int64_t src_ld, int64_t row_blocks,
                            int64_t col_blocks, float *dst, int64_t dst_ld) {
    __m512 r[16];
    for (int64_t c0 = 0; c0 < 16 * row_blocks; c0 += 16)
        for (int64_t x0 = 0; x0 < 16 * col_blocks; x0 += 16) {
            for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(src + (c0 + i) * src_ld + x0);
            transpose16(r);
            for (int i = 0; i < 16; ++i) _mm512_store_ps(dst + (x0 + i) * dst_ld + c0, r[i]);
        }
}

// dst[x][c][h] = bf16(src[2x + h][c]) for f32 rows src [rows32][ld], x < rows32 / 2, c < keys16
// (a multiple of 16): P z or dS paired over two rows, the B tiles of the key products.
inline void pair_rows_bf16(const float *src, int64_t ld, int64_t rows32, int64_t keys16,
                           uint16_t *dst) {
    alignas(64) static const uint16_t order[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5,
                                                   21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26,
                                                   11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_load_si512(order);
    for (int64_t x = 0; x < rows32 / 2; ++x)
        for (int64_t c = 0; c < keys16; c += 16) {
            const __m512 a = _mm512_load_ps(src + 2 * x * ld + c);
            const __m512 b = _mm512_load_ps(src + (2 * x + 1) * ld + c);
            const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // a's 16, then b's
            _mm512_store_si512(dst + x * 2 * ld + 2 * c, _mm512_permutexvar_epi16(idx, both));
        }
}

// dst[x][2c + h] = row (2x + h)'s element c: rows paired for the B tiles, x < rows / 2.
inline void pair_rows(const uint16_t *src, int64_t ld, int64_t rows, uint16_t *dst) {
    alignas(64) static const uint16_t lo_idx[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5,
                                                    37, 6, 38, 7, 39, 8, 40, 9, 41, 10, 42,
                                                    11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i lo = _mm512_load_si512(lo_idx);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int64_t x = 0; x < rows / 2; ++x)
        for (int64_t c = 0; c < ld; c += 32) {
            const __m512i a = _mm512_loadu_si512(src + 2 * x * ld + c);
            const __m512i b = _mm512_loadu_si512(src + (2 * x + 1) * ld + c);
            _mm512_storeu_si512(dst + x * 2 * ld + 2 * c, _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512(dst + x * 2 * ld + 2 * c + 32, _mm512_permutex2var_epi16(a, hi, b));
        }
}

}  // namespace backward_amx_detail
}  // namespace attn::kernels::amx
