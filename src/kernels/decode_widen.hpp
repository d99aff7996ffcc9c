// Widenings of quantized codes for the decode passes on AVX-512 (attention_decode_quantized.hpp),
// cheaper than row_reader's raw_vector where the pass can absorb an order of the elements or a
// power of two (row_reader's stay the definition; these give the same values):
//   4-bit: 32 codes (16 bytes) at a time as two vectors, the even elements (low nibbles) and
//     the odd ones (high nibbles), each code looked up in a 16-entry table of its values, the
//     table already less its group's zero point and times its scale: VPMOVZXBD, VPSRLD and two
//     VPERMPS (which read an index's low 4 bits) for 32 elements, where nibble masks, unpacking,
//     sign extension and a conversion took seven instructions for 16. q is read in the same
//     order (deinterleave_pairs); P V keeps its sums in it and restores the order when storing.
//   FP8 E4M3: codes as the f32 bits of 2^-120 of their values, 2^60 folded into q and 2^60
//     into the row's scale (scores), 2^120 into P times the scale (P V). 64 codes at a time
//     in the quads' order (e4m3_quads: one load, shifts of words and dwords, masks; q reordered
//     by quads_times, P V's sums put back by quads_to_order), the rest 16 at a time in order
//     (e4m3_bits: VPMOVSXBD, VPSLLD, VPAND); through f16 (VPMOVSXBW, VPSLLW, VPAND, VCVTPH2PS,
//     which counts twice) 32 codes took 10 vector operations against 8, and the score pass
//     over one row a key (q in registers, rows of 128) 4.0-4.1 against 3.0 ns a key in a loop
//     of its own in L1; in quads it takes 2.3 ns where 16 at a time took 4.5 (Zen 5). The
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
// E4M3 codes c .. c+63, loaded as one vector, as four vectors in the quads' order: x[m] lane j
// holds code c + 4 j + m as e4m3_bits reads it. A word's high byte (an odd code) is in place
// after an arithmetic shift right by 4 of the words (its sign in bit 15, S.EEEE.MMM from bit
// 11 down, sign copies in 14 .. 12 that the mask clears); its low byte (an even code) after a
// shift left by 8 first; a dword's low word goes to its high half by a shift left by 16. Nine
// vector operations for 64 codes, no shuffle, where e4m3_bits takes twelve, four of them the
// widening VPMOVSXBD (its scores alone, one row of 128 a key in L1 on Zen 5: 2.3 ns a key
// against 4.5).
template <class Arch = xsimd::avx512f>
inline void e4m3_quads(__m512i codes, __m512 (&x)[4]) {
    const __m512i mask = _mm512_set1_epi32(int32_t(0x87f00000u));
    const __m512i odd = _mm512_srai_epi16(codes, 4), even = _mm512_srai_epi16(_mm512_slli_epi16(codes, 8), 4);
    x[0] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(even, 16), mask));
    x[1] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(odd, 16), mask));
    x[2] = _mm512_castsi512_ps(_mm512_and_si512(even, mask));
    x[3] = _mm512_castsi512_ps(_mm512_and_si512(odd, mask));
}
// Two rounds of VPERMT2PS over four vectors: (x0, x1) and (x2, x3) into halves a, b and c, d
// by indices i and j, then (a, c) and (b, d) into x by k and l. The quads' order and the
// elements' own (x[v] lane l = element 16 v + l) go into each other so, with their indices.
template <class Arch = xsimd::avx512f>
inline void two_rounds(__m512 (&x)[4], __m512i i, __m512i j, __m512i k, __m512i l) {
    const __m512 a = _mm512_permutex2var_ps(x[0], i, x[1]), b = _mm512_permutex2var_ps(x[0], j, x[1]);
    const __m512 c = _mm512_permutex2var_ps(x[2], i, x[3]), d = _mm512_permutex2var_ps(x[2], j, x[3]);
    x[0] = _mm512_permutex2var_ps(a, k, c);
    x[1] = _mm512_permutex2var_ps(a, l, c);
    x[2] = _mm512_permutex2var_ps(b, k, d);
    x[3] = _mm512_permutex2var_ps(b, l, d);
}
template <class Arch = xsimd::avx512f>
inline void quads_to_order(__m512 (&x)[4]) {
    // round 1: lane 2 j + m' of a (b) = x[m'][j] (x[m'][8 + j]), j < 8, likewise c and d of
    // x[2 + m']; round 2: element 16 v + l = 4 j + m is lane 2 (j mod 8) + m mod 2 of a or b
    // (m < 2), c or d (m >= 2)
    two_rounds<Arch>(x, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
                     _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31),
                     _mm512_setr_epi32(0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23),
                     _mm512_setr_epi32(8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31));
}
template <class Arch = xsimd::avx512f>
inline void order_to_quads(__m512 (&x)[4]) {
    // round 1: lane 8 m' + j of a (b) = element 4 j + m' (4 j + 2 + m') of the first 32, j < 8,
    // likewise c and d of the last 32; round 2: the quads' vector m takes its lanes j < 8 from
    // a or b, the rest from c or d
    two_rounds<Arch>(x, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29),
                     _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31),
                     _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
                     _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
}
// out[0 .. n) = x[0 .. n) times factor, in the quads' order over its whole blocks of 64
// (out[b + 16 m + j] = x[b + 4 j + m] factor), the rest in place: q as the quads meet it.
template <class Arch = xsimd::avx512f>
inline void quads_times(const float *x, int64_t n, float factor, float *out) {
    const __m512 f = _mm512_set1_ps(factor);
    int64_t d = 0;
    for (; d + 64 <= n; d += 64) {
        __m512 v[4];
        for (int i = 0; i < 4; ++i) v[i] = _mm512_loadu_ps(x + d + 16 * i);
        order_to_quads<Arch>(v);
        for (int i = 0; i < 4; ++i) _mm512_storeu_ps(out + d + 16 * i, _mm512_mul_ps(v[i], f));
    }
    for (; d < n; ++d) out[d] = x[d] * factor;
}
// Whether every element of x[0 .. n) is less than bound in magnitude (a NaN is not).
template <class Arch = xsimd::avx512f>
inline bool all_below(const float *x, int64_t n, float bound) {
    const __m512 b = _mm512_set1_ps(bound);
    __mmask16 below = 0xffff;
    int64_t d = 0;
    for (; d + 16 <= n; d += 16) below &= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + d)), b, _CMP_LT_OQ);
    if (d < n) {
        const __mmask16 tail = __mmask16((1u << (n - d)) - 1u);
        const __m512 v = _mm512_abs_ps(_mm512_maskz_loadu_ps(tail, x + d));
        below &= __mmask16(_mm512_mask_cmp_ps_mask(tail, v, b, _CMP_LT_OQ) | ~tail);
    }
    return below == 0xffff;
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

// top = the bytewise largest of top and the low 7 bits of 64 E4M3 codes loaded (or of codes
// 0 .. len-1 of a row): a row holds the NaN code S.1111.111 where a byte of it reaches 0x7f.
template <class Arch = xsimd::avx512f>
inline __m512i e4m3_low7_top(__m512i codes, __m512i top) {
    return _mm512_max_epu8(top, _mm512_and_si512(codes, _mm512_set1_epi8(0x7f)));
}
template <class Arch = xsimd::avx512f>
__attribute__((always_inline)) inline __m512i e4m3_low7_top(const uint8_t *row, int64_t len, __m512i top) {
    int64_t c = 0;
    for (; c + 64 <= len; c += 64) top = e4m3_low7_top<Arch>(_mm512_loadu_si512(row + c), top);
    if (c < len) top = e4m3_low7_top<Arch>(_mm512_maskz_loadu_epi8(~__mmask64(0) >> (64 - (len - c)), row + c), top);
    return top;
}
// The 64 E4M3 codes at `at` in the quads' order (e4m3_quads), their low 7 bits into top.
template <class Arch = xsimd::avx512f>
__attribute__((always_inline)) inline void e4m3_quads_at(const uint8_t *at, __m512i &top, __m512 (&x)[4]) {
    const __m512i codes = _mm512_loadu_si512(at);
    top = e4m3_low7_top<Arch>(codes, top);
    e4m3_quads<Arch>(codes, x);
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
