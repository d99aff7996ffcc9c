// A stored K or V row as the kernels read it, one reader for every K/V format of
// core/formats.hpp: vec(c) is elements c .. c+W-1 as one f32 vector, one(c) element c, both
// widened in registers (f32, bf16, f16: exact) or dequantized there (x = scale * (q - zero),
// x = scale * fp8(q)), with the row's scales found through the addressing function
// (core/kv_rows.hpp), paged or not. c is a multiple of W for vec (so even for the 4-bit types).
// The K packing, the V padding and the decode kernel take their rows through it.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "core/kv_rows.hpp"
#include "kernels/elements.hpp"

ATTN_KERNELS_BEGIN

inline int32_t four_bytes(const uint8_t *p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Elements c .. c+W-1 of a quantized row of format E before their scale (q, or fp8(q)).
template <class Arch, class E>
inline xsimd::batch<float, Arch> raw_vector(const uint8_t *row, int64_t c) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch> || std::is_base_of_v<xsimd::avx2, Arch>) {
        __m128i bytes;  // W elements as W bytes (4-bit: nibbles spread, low first)
        if constexpr (E::bits == 4) {
            const __m128i packed = W == 16 ? _mm_loadl_epi64(reinterpret_cast<const __m128i *>(row + c / 2))
                                           : _mm_cvtsi32_si128(four_bytes(row + c / 2));
            const __m128i lo = _mm_and_si128(packed, _mm_set1_epi8(0x0f));
            const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0f));
            bytes = _mm_unpacklo_epi8(lo, hi);
            if constexpr (E::type == ATTN_DTYPE_I4)  // sign of a nibble: (n ^ 8) - 8
                bytes = _mm_sub_epi8(_mm_xor_si128(bytes, _mm_set1_epi8(8)), _mm_set1_epi8(8));
        } else {
            bytes = W == 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i *>(row + c))
                            : _mm_loadl_epi64(reinterpret_cast<const __m128i *>(row + c));
        }
        constexpr bool is_signed = E::type == ATTN_DTYPE_I8 || E::type == ATTN_DTYPE_I4;
        if constexpr (E::type == ATTN_DTYPE_FP8_E4M3 || E::type == ATTN_DTYPE_FP8_E5M2) {
            // as f16 bits: E5M2 is an f16's top byte; E4M3's exponent and mantissa moved into
            // f16's fields read 2^-8 of the value (subnormals too), and S.1111.111 is NaN
            if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
                const __m256i w = _mm256_cvtepu8_epi16(bytes);
                if constexpr (E::type == ATTN_DTYPE_FP8_E5M2)
                    return _mm512_cvtph_ps(_mm256_slli_epi16(w, 8));
                const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7f));
                const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8),
                                                  _mm256_slli_epi16(mag, 7));
                const __m512 x = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
                const __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f));
                return _mm512_mask_mov_ps(x, nan, _mm512_set1_ps(__builtin_nanf("")));
            } else {
                const __m128i w = _mm_cvtepu8_epi16(bytes);
                if constexpr (E::type == ATTN_DTYPE_FP8_E5M2) return _mm256_cvtph_ps(_mm_slli_epi16(w, 8));
                const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7f));
                const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8),
                                               _mm_slli_epi16(mag, 7));
                const __m256 x = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
                const __m256 nan = _mm256_castsi256_ps(
                    _mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f))));
                return _mm256_blendv_ps(x, _mm256_set1_ps(__builtin_nanf("")), nan);
            }
        } else if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
            return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes));
        } else {
            return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes));
        }
    } else {  // SSE4.2: one element at a time
        alignas(16) float x[W];
        for (int i = 0; i < W; ++i) x[i] = E::raw_one(row, c + i);
        return fbatch::load_aligned(x);
    }
}

template <class Arch, class E, bool Quantized = E::quantized>
struct row_reader;

// f32, bf16, f16: the stored values, widened.
template <class Arch, class E>
struct row_reader<Arch, E, false> {
    const typename E::storage *p = nullptr;
    row_reader() = default;
    row_reader(const kv_rows &r, int64_t j) : p(static_cast<const typename E::storage *>(r.row(j))) {}
    xsimd::batch<float, Arch> vec(int64_t c) const { return widen<Arch, E>(p + c); }
    float one(int64_t c) const { return widen_one<Arch, E>(p + c); }
    const void *address() const { return p; }
};

// The quantized formats: raw values times their scales (less their zero points), per element.
template <class Arch, class E>
struct row_reader<Arch, E, true> {
    using fbatch = xsimd::batch<float, Arch>;
    static constexpr int W = int(fbatch::size);
    const uint8_t *p = nullptr;
    const float *sc = nullptr, *ze = nullptr;
    int64_t group = 1;
    row_reader() = default;
    row_reader(const kv_rows &r, int64_t j)
        : p(static_cast<const uint8_t *>(r.row(j))), sc(r.scale_row(j)), ze(r.zero_row(j)),
          group(r.scales.group) {}
    // entries c / group of a for the W elements from c on
    fbatch per_element(const float *a, int64_t c) const {
        if (group % W == 0) return fbatch(a[c / group]);
        if (group == 1) return fbatch::load_unaligned(a + c);
        alignas(64) float x[W];
        for (int i = 0; i < W; ++i) x[i] = a[(c + i) / group];
        return fbatch::load_aligned(x);
    }
    fbatch vec(int64_t c) const {
        const fbatch raw = raw_vector<Arch, E>(p, c);
        if (E::has_zero && ze) return (raw - per_element(ze, c)) * per_element(sc, c);
        return raw * per_element(sc, c);
    }
    float one(int64_t c) const { return core::dequantized_one<E>(p, c, sc, ze, group); }
    const void *address() const { return p; }
};

// dst[0 .. n) = key j's row of r as f32 (whole vectors, then one by one).
template <class Arch, class E>
inline void read_row(const kv_rows &r, int64_t j, int64_t n, float *dst) {
    constexpr int64_t W = xsimd::batch<float, Arch>::size;
    const row_reader<Arch, E> rd(r, j);
    int64_t c = 0;
    for (; c + W <= n; c += W) rd.vec(c).store_unaligned(dst + c);
    for (; c < n; ++c) dst[c] = rd.one(c);
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
