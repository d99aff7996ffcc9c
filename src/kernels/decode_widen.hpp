// Widenings of quantized codes for the decode passes on AVX-512 (attention_decode_quantized.hpp),
// cheaper than row_reader's raw_vector where the pass can absorb an order of the elements or a
// power of two (row_reader's stay the definition; these give the same values):
//   4-bit: 32 codes (16 bytes) at a time as two vectors, the even elements (low nibbles) and
//     the odd ones (high nibbles), each code looked up in a 16-entry table of its values, the
//     table already less its group's zero point and times its scale: VPMOVZXBD, VPSRLD and two
//     VPERMPS (which read an index's low 4 bits) for 32 elements, where nibble masks, unpacking,
//     sign extension and a conversion took seven instructions for 16. q is read in the same
//     order (deinterleave_pairs); P V keeps its sums in it and restores the order when storing.
//   FP8 E4M3: 16 codes as the f32 bits of 2^-120 of their values (VPMOVSXBD, VPSLLD, VPAND),
//     2^60 folded into q and 2^60 into the row's scale (scores), 2^120 into P times the scale
//     (P V); through f16 (VPMOVSXBW, VPSLLW, VPAND, VCVTPH2PS, which counts twice) 32 codes
//     took 10 vector operations against 8, and the score pass over one row a key (q in
//     registers, rows of 128) 4.0-4.1 against 3.0 ns a key in a loop of its own in L1. The
//     NaN code S.1111.111 reads as a finite value there, so the rows holding one are looked
//     for and their NaNs put where an exact reading puts them (the scores of those keys; the
//     columns of V). The decode passes look while they read (e4m3_low7_top on each 64 codes
//     just loaded, beside the products: a scan of the rows after the products, a loop of its
//     own over rows already read, took 15% of the time of decoding over E4M3 with one row a
//     KV head); each row of a block where they saw the code is then looked over alone
//     (e4m3_row_has_nan).
//   bf16: 32 elements (64 bytes) at a time as the even and the odd ones, by a shift and a mask
//     (bf16_even, bf16_odd), where 16 in order take a VPMOVZXWD (a shuffle) and a shift; for
//     passes with several rows a key (H32 over 8 KV heads, D128, 1 thread, in cache: 3.5-7% less
//     time a KV row, the shuffles freed for the lane sums).
#pragma once

#include "kernels/isa_namespace.hpp"

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "core/formats.hpp"

ATTN_KERNELS_BEGIN
namespace decode_widen {

// (The helpers are templates so that translation units without AVX-512 never form their
// types: only the AVX-512 instances call them.)
template <class Arch>
inline constexpr bool available = std::is_base_of_v<xsimd::avx512f, Arch>;

// The values of the 16 nibble codes of a 4-bit format (I4: two's complement).
template <class E, class Arch = xsimd::avx512f>
inline __m512 nibble_values() {
    if constexpr (E::type == ATTN_DTYPE_I4)
        return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
    else
        return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// A group's table: (value - zero) * scale, the arithmetic row_reader does per element.
template <class Arch = xsimd::avx512f>
inline __m512 group_table(__m512 values, bool scaled, const float *sc, const float *ze, int64_t g) {
    if (!scaled) return values;
    const __m512 x = ze ? _mm512_sub_ps(values, _mm512_set1_ps(ze[g])) : values;
    return _mm512_mul_ps(x, _mm512_set1_ps(sc[g]));
}

// The 16 bytes of codes c .. c+31 (c even) as 16 indices, the low nibble of each lane's byte
// being element c + 2 lane; shifted right by 4, element c + 2 lane + 1.
template <class Arch = xsimd::avx512f>
inline __m512i nibble_pairs(const uint8_t *row, int64_t c) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + c / 2)));
}
template <class Arch = xsimd::avx512f>
inline __m512 even_values(__m512i pairs, __m512 table) { return _mm512_permutexvar_ps(pairs, table); }
template <class Arch = xsimd::avx512f>
inline __m512 odd_values(__m512i pairs, __m512 table) {
    return _mm512_permutexvar_ps(_mm512_srli_epi32(pairs, 4), table);
}

// out[d .. d+32) = the even elements of x[d .. d+32), then its odd ones, for d < n (n % 32 == 0).
template <class Arch = xsimd::avx512f>
inline void deinterleave_pairs(const float *x, int64_t n, float *out) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t d = 0; d < n; d += 32) {
        const __m512 a = _mm512_loadu_ps(x + d), b = _mm512_loadu_ps(x + d + 16);
        _mm512_storeu_ps(out + d, _mm512_permutex2var_ps(a, even, b));
        _mm512_storeu_ps(out + d + 16, _mm512_permutex2var_ps(a, odd, b));
    }
}
// The inverse for one 32-element span: lo, hi = elements 0..15, 16..31 of (even, odd).
template <class Arch = xsimd::avx512f>
inline void interleave_pair(__m512 even, __m512 odd, __m512 &lo, __m512 &hi) {
    const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i second = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    lo = _mm512_permutex2var_ps(even, first, odd);
    hi = _mm512_permutex2var_ps(even, second, odd);
}
template <class Arch = xsimd::avx512f>
inline void deinterleave_pair(__m512 lo, __m512 hi, __m512 &even, __m512 &odd) {
    const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i o = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    even = _mm512_permutex2var_ps(lo, e, hi);
    odd = _mm512_permutex2var_ps(lo, o, hi);
}

// bf16 elements c .. c+31 (c even) as 16 words, element c + 2 lane in the low half of each and
// c + 2 lane + 1 in the high half; a bf16 value is the high half of its f32, so the even
// elements are the words shifted left by 16 and the odd ones the words with the low half
// cleared: exact, no shuffle.
template <class Arch = xsimd::avx512f>
inline __m512i bf16_span(const uint16_t *row, int64_t c) { return _mm512_loadu_si512(row + c); }
template <class Arch = xsimd::avx512f>
inline __m512 bf16_even(__m512i words) { return _mm512_castsi512_ps(_mm512_slli_epi32(words, 16)); }
template <class Arch = xsimd::avx512f>
inline __m512 bf16_odd(__m512i words) {
    return _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(int32_t(0xffff0000u))));
}

// E4M3 codes c .. c+15 as the f32 holding 2^-120 of their values, exact, NaN codes read finite:
// sign-extended and shifted left 20, the exponent and mantissa S.EEEE.MMM land in f32's bits
// 26 .. 20 (2^(E-127) 1.MMM for 2^(E-7) 1.MMM; subnormal codes become f32 subnormals, 2^-126
// 0.MMM for 2^-6 0.MMM) and the sign in 31 .. 27, of which 30 .. 27 are cleared. A subnormal
// input reads as 0 where MXCSR's DAZ is set: the passes that read codes this way hold DAZ
// off meanwhile (denormals_kept).
template <class Arch = xsimd::avx512f>
inline __m512 e4m3_bits(const uint8_t *row, int64_t c) {
    const __m512i w = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + c)));
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(w, 20), _mm512_set1_epi32(int32_t(0x87f00000u))));
}
template <class Arch = xsimd::avx512f>
inline void e4m3_bits_32(const uint8_t *row, int64_t c, __m512 &lo, __m512 &hi) {
    lo = e4m3_bits<Arch>(row, c);
    hi = e4m3_bits<Arch>(row, c + 16);
}
// What the E4M3 codes read by e4m3_bits are missing: 2^120, met as 2^60 in q (times q before
// the products, its rows less than 2^64 in magnitude) and 2^60 in the sum (times the row's
// scale after it) for scores, all of it in P (times the row's scale) for P V. Powers of two
// met exactly, so the same bits as reading the values exactly and folding the scales, within
// f32's range.
inline constexpr float e4m3_q_unit = 0x1p60f, e4m3_sum_unit = 0x1p60f, e4m3_p_unit = 0x1p120f;
// MXCSR's DAZ cleared while a pass reads E4M3 codes as f32 bits, restored after (nothing
// written where it was clear): with DAZ set, as a caller's may be, subnormal codes read as 0.
template <bool Active>
struct denormals_kept {
    unsigned saved = 0;
    denormals_kept() {
        if constexpr (Active) {
            saved = _mm_getcsr();
            if (saved & 0x40u) _mm_setcsr(saved & ~0x40u);
        }
    }
    ~denormals_kept() {
        if constexpr (Active)
            if (saved & 0x40u) _mm_setcsr(saved);
    }
    denormals_kept(const denormals_kept &) = delete;
    denormals_kept &operator=(const denormals_kept &) = delete;
};

// top = the bytewise largest of top and the low 7 bits of codes 0 .. len-1 of an E4M3 row: a
// row holds the NaN code S.1111.111 where a byte of it reaches 0x7f.
template <class Arch = xsimd::avx512f>
__attribute__((always_inline)) inline __m512i e4m3_low7_top(const uint8_t *row, int64_t len, __m512i top) {
    const __m512i low7 = _mm512_set1_epi8(0x7f);
    int64_t c = 0;
    for (; c + 64 <= len; c += 64) top = _mm512_max_epu8(top, _mm512_and_si512(_mm512_loadu_si512(row + c), low7));
    if (c < len) {
        const __m512i x = _mm512_maskz_loadu_epi8(~__mmask64(0) >> (64 - (len - c)), row + c);
        top = _mm512_max_epu8(top, _mm512_and_si512(x, low7));
    }
    return top;
}
template <class Arch = xsimd::avx512f>
inline bool e4m3_has_nan_code(__m512i top) { return _mm512_cmpeq_epi8_mask(top, _mm512_set1_epi8(0x7f)) != 0; }

// Whether codes 0 .. n-1 of an E4M3 row hold the NaN code.
template <class Arch = xsimd::avx512f>
inline bool e4m3_row_has_nan(const uint8_t *row, int64_t n) {
    return e4m3_has_nan_code<Arch>(e4m3_low7_top<Arch>(row, n, _mm512_setzero_si512()));
}

}  // namespace decode_widen
ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
