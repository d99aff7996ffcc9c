// Conversions between f32, bf16 and f16 (attn_convert), templated on the xsimd Arch: the
// rules of src/core/convert.hpp, bit for bit, NaN payloads included, on W lanes at a time.
//   bf16 -> f32: zero-extend and shift left 16 (exact).
//   f32 -> bf16: the integer round-to-nearest-even trick (add 0x7fff plus the lowest kept
//                bit, keep the top half), with NaN quieted (payload top bits kept) and f32
//                subnormals flushed to +-0; on avx512_bf16 VCVTNEPS2BF16, which does exactly
//                that (that translation unit is compiled with -mavx512bf16).
//   f16 <-> f32: F16C (VCVTPH2PS / VCVTPS2PH, round to nearest even) on avx2 and avx512;
//                VCVTPH2PS quiets a signalling NaN, so NaN lanes are rebuilt from the bits
//                (widening is exact, payload and all). sse4 has no F16C: integer code on the
//                bit patterns, with one float addition to round into f16's subnormals.
//   bf16 <-> f16: through f32 (widening is exact, so there is one rounding).
// Every helper is a template in its ISA's namespace (isa_namespace.hpp), so the ISA
// translation units never share an instantiation compiled with different flags.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include <immintrin.h>
#include <xsimd/xsimd.hpp>

#include "attn/attn.h"
#include "core/formats.hpp"

ATTN_KERNELS_BEGIN
namespace cvt {

template <class Arch>
using fvec = xsimd::batch<float, Arch>;
template <class Arch>
using ivec = xsimd::batch<int32_t, Arch>;

template <class Arch>
constexpr bool is_avx512 = std::is_base_of_v<xsimd::avx512f, Arch>;
template <class Arch>
constexpr bool is_avx2 = std::is_base_of_v<xsimd::avx2, Arch> && !is_avx512<Arch>;
// The avx512_bf16 level's translation unit is compiled with -mavx512bf16.
template <class Arch>
constexpr bool has_cvtneps2bf16 =
#ifdef __AVX512BF16__
    is_avx512<Arch>;
#else
    false;
#endif

// W 16-bit patterns, zero-extended into the int32 lanes.
template <class Arch>
inline ivec<Arch> load_u16(const uint16_t *p) {
    if constexpr (is_avx512<Arch>)
        return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    else if constexpr (is_avx2<Arch>)
        return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    else
        return _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
}

// The low halves of W int32 lanes, each already in [0, 0xffff] (packus would saturate
// anything else).
template <class Arch>
inline void store_u16(uint16_t *p, const ivec<Arch> &v) {
    if constexpr (is_avx512<Arch>) {
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), _mm512_cvtepi32_epi16(v));
    } else if constexpr (is_avx2<Arch>) {
        const __m256i x = v;
        const __m128i lo = _mm256_castsi256_si128(x), hi = _mm256_extracti128_si256(x, 1);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm_packus_epi32(lo, hi));
    } else {
        const __m128i x = v;
        _mm_storel_epi64(reinterpret_cast<__m128i *>(p), _mm_packus_epi32(x, x));
    }
}

template <class Arch>
inline fvec<Arch> bf16_to_f32(const uint16_t *p) {
    return xsimd::bitwise_cast<fvec<Arch>>(load_u16<Arch>(p) << 16);
}

template <class Arch>
inline void f32_to_bf16(const fvec<Arch> &x, uint16_t *p) {
    if constexpr (has_cvtneps2bf16<Arch>) {
#ifdef __AVX512BF16__
        // Round to nearest even whatever MXCSR says; NaN -> top half | 0x0040 (quiet, sign
        // and payload top kept); subnormal inputs are treated as +-0: the scalar rule exactly.
        const __m256bh h = _mm512_cvtneps_pbh(x);
        std::memcpy(p, &h, sizeof h);
#endif
    } else if constexpr (is_avx512<Arch>) {
        // The integer trick below with AVX-512 masks (xsimd 8.1's int32 batches on avx512f
        // run at 60% of this); logical shifts, so no sign copies to mask.
        const __m512i u = _mm512_castps_si512(x);
        const __m512i top = _mm512_srli_epi32(u, 16);
        const __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
        const __mmask16 small = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(0x00800000));
        const __mmask16 nan = _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7f800000));
        r = _mm512_mask_blend_epi32(small, r, _mm512_and_si512(top, _mm512_set1_epi32(0x8000)));
        r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(top, _mm512_set1_epi32(0x0040)));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), _mm512_cvtepi32_epi16(r));
    } else {
        using iv = ivec<Arch>;
        const iv u = xsimd::bitwise_cast<iv>(x);
        const iv mag = u & iv(0x7fffffff);
        const iv top = (u >> 16) & iv(0xffff);  // arithmetic shift: mask the sign copies
        // mag + 0x7fff + lsb stays below 2^31 for every finite mag, so the carry into the
        // exponent (the next binade, or inf past the largest bf16) is the right rounding.
        const iv rounded = ((u + iv(0x7fff) + (top & iv(1))) >> 16) & iv(0xffff);
        const iv small = top & iv(0x8000);  // zero and f32 subnormals: +-0
        const iv quiet = top | iv(0x0040);
        const iv r = xsimd::select(mag > iv(0x7f800000), quiet,
                                   xsimd::select(mag < iv(0x00800000), small, rounded));
        store_u16<Arch>(p, r);
    }
}

// f16 bits (zero-extended) -> f32 bits, exactly, by integer code: shift exponent and
// mantissa into place and rebias; inf/NaN get the rest of the f32 exponent range; a
// subnormal m * 2^-24 is built as 2^-14 (1 + m/1024) - 2^-14, exact in f32.
template <class Arch>
inline ivec<Arch> f16_bits_to_f32_bits(const ivec<Arch> &h) {
    using iv = ivec<Arch>;
    using fv = fvec<Arch>;
    iv o = (h & iv(0x7fff)) << 13;
    const iv e = o & iv(0x0f800000);
    o = o + iv(112 << 23);
    o = xsimd::select(e == iv(0x0f800000), o + iv(112 << 23), o);
    const iv sub = xsimd::bitwise_cast<iv>(xsimd::bitwise_cast<fv>(o + iv(1 << 23)) -
                                           fv(6.103515625e-05f));  // 2^-14
    o = xsimd::select(e == iv(0), sub, o);
    return o | ((h & iv(0x8000)) << 16);
}

template <class Arch>
inline fvec<Arch> f16_to_f32(const uint16_t *p) {
    using iv = ivec<Arch>;
    using fv = fvec<Arch>;
    if constexpr (is_avx512<Arch> || is_avx2<Arch>) {
        fv hw;
        if constexpr (is_avx512<Arch>)
            hw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
        else
            hw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
        // VCVTPH2PS sets the quiet bit of a signalling NaN; widening must be exact.
        const iv h = load_u16<Arch>(p);
        const auto nan = (h & iv(0x7fff)) > iv(0x7c00);
        if (xsimd::any(nan)) {
            const iv bits = ((h & iv(0x8000)) << 16) | iv(0x7f800000) | ((h & iv(0x3ff)) << 13);
            hw = xsimd::bitwise_cast<fv>(xsimd::select(nan, bits, xsimd::bitwise_cast<iv>(hw)));
        }
        return hw;
    } else {
        return xsimd::bitwise_cast<fv>(f16_bits_to_f32_bits<Arch>(load_u16<Arch>(p)));
    }
}

template <class Arch>
inline void f32_to_f16(const fvec<Arch> &x, uint16_t *p) {
    if constexpr (is_avx512<Arch>) {
        // NaN -> sign | 0x7e00 | payload top 9 bits, as the scalar rule (checked exhaustively
        // against it in tests/test_convert.cpp); subnormal outputs are kept.
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(p),
                            _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    } else if constexpr (is_avx2<Arch>) {
        _mm_storeu_si128(reinterpret_cast<__m128i *>(p),
                         _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    } else {
        using iv = ivec<Arch>;
        using fv = fvec<Arch>;
        const iv u = xsimd::bitwise_cast<iv>(x);
        const iv mag = u & iv(0x7fffffff);
        const iv sign = (u >> 16) & iv(0x8000);
        const iv nan = iv(0x7e00) | ((mag >> 13) & iv(0x3ff));
        // normal in f16: rebias the exponent, round the 13 dropped bits to nearest even
        const iv normal = (mag - iv(112 << 23) + iv(0xfff) + ((mag >> 13) & iv(1))) >> 13;
        // below 2^-14: |x| + 0.5 rounds |x| to a multiple of 2^-24 (the ulp of 0.5) to
        // nearest even, in the default rounding mode; the low bits are then the f16
        // subnormal (or 0x400, the smallest normal, when it rounds up to 2^-14)
        const iv sub = xsimd::bitwise_cast<iv>(xsimd::bitwise_cast<fv>(mag) + fv(0.5f)) -
                       iv(0x3f000000);
        const iv r = xsimd::select(
            mag > iv(0x7f800000), nan,
            xsimd::select(mag >= iv(0x477ff000), iv(0x7c00),  // >= 65520 and inf: inf
                          xsimd::select(mag >= iv(0x38800000), normal, sub)));
        store_u16<Arch>(p, r | sign);
    }
}

// W floats, loaded once into a register. Left to itself the compiler folds the load into
// each of the integer operations that use it (three loads of the same line); streaming from
// DRAM, those extra loads fill the load queue and halve the lines in flight (measured: f32 ->
// bf16 on avx512 at 26 GB/s against 41 GB/s for memcpy, 40 GB/s with one load).
template <class Arch>
inline fvec<Arch> load_f32(const float *p) {
    typename fvec<Arch>::register_type r = fvec<Arch>::load_unaligned(p);
    if constexpr (is_avx512<Arch>)
        __asm__("" : "+v"(r));
    else
        __asm__("" : "+x"(r));
    return r;
}

// Whole vectors of one type pair; returns how many elements were done (a multiple of W).
template <class Arch>
int64_t convert_vectors(int64_t n, const void *src, attn_dtype st, void *dst, attn_dtype dt) {
    constexpr int64_t W = fvec<Arch>::size;
    const int64_t full = n / W * W;
    const auto *s16 = static_cast<const uint16_t *>(src);
    const auto *s32 = static_cast<const float *>(src);
    auto *d16 = static_cast<uint16_t *>(dst);
    auto *d32 = static_cast<float *>(dst);
    if (st == ATTN_DTYPE_BF16 && dt == ATTN_DTYPE_F32) {
        for (int64_t i = 0; i < full; i += W) bf16_to_f32<Arch>(s16 + i).store_unaligned(d32 + i);
    } else if (st == ATTN_DTYPE_F16 && dt == ATTN_DTYPE_F32) {
        for (int64_t i = 0; i < full; i += W) f16_to_f32<Arch>(s16 + i).store_unaligned(d32 + i);
    } else if (st == ATTN_DTYPE_F32 && dt == ATTN_DTYPE_BF16) {
        for (int64_t i = 0; i < full; i += W)
            f32_to_bf16<Arch>(load_f32<Arch>(s32 + i), d16 + i);
    } else if (st == ATTN_DTYPE_F32 && dt == ATTN_DTYPE_F16) {
        for (int64_t i = 0; i < full; i += W)
            f32_to_f16<Arch>(load_f32<Arch>(s32 + i), d16 + i);
    } else if (st == ATTN_DTYPE_BF16 && dt == ATTN_DTYPE_F16) {
        // each vector is read before its lanes are written: in place is fine
        for (int64_t i = 0; i < full; i += W) f32_to_f16<Arch>(bf16_to_f32<Arch>(s16 + i), d16 + i);
    } else if (st == ATTN_DTYPE_F16 && dt == ATTN_DTYPE_BF16) {
        for (int64_t i = 0; i < full; i += W) f32_to_bf16<Arch>(f16_to_f32<Arch>(s16 + i), d16 + i);
    } else {  // a format added to attn_dtype without its conversions here: never a silent copy
        throw std::invalid_argument("attn: no conversion between these element types");
    }
    return full;
}

}  // namespace cvt

// dst[i] = src[i] converted from st to dt (attn_convert's rules), i < n; src == dst allowed
// when the element sizes are equal, no other overlap.
template <class Arch>
void convert_array(int64_t n, const void *src, attn_dtype st, void *dst, attn_dtype dt) {
    const int64_t sb = core::element_bytes(st), db = core::element_bytes(dt);
    if (st == dt) {
        if (src != dst) std::memmove(dst, src, size_t(n * sb));
        return;
    }
    const int64_t done = cvt::convert_vectors<Arch>(n, src, st, dst, dt);
    if (done == n) return;
    // The tail (fewer than W elements) through zero-padded buffers, by the same vector code.
    constexpr int64_t W = cvt::fvec<Arch>::size;
    alignas(64) unsigned char in[W * 4] = {}, out[W * 4];
    const int64_t rest = n - done;
    std::memcpy(in, static_cast<const unsigned char *>(src) + done * sb, size_t(rest * sb));
    cvt::convert_vectors<Arch>(W, in, st, out, dt);
    std::memcpy(static_cast<unsigned char *>(dst) + done * db, out, size_t(rest * db));
}

// dst[0:len] = the elements src[0:len] of type t widened to f32; with round_bf16 (fpmath
// bf16) f32 and f16 elements are first rounded to bf16 (attn_convert's rule), then widened.
template <class Arch>
void load_f32_row(const void *src, attn_dtype t, bool round_bf16, int64_t len, float *dst) {
    if (t == ATTN_DTYPE_BF16 || !round_bf16) {
        convert_array<Arch>(len, src, t, dst, ATTN_DTYPE_F32);
        return;
    }
    constexpr int64_t chunk = 256;
    alignas(64) uint16_t h[chunk];
    for (int64_t i = 0; i < len; i += chunk) {
        const int64_t c = len - i < chunk ? len - i : chunk;
        const void *s = static_cast<const unsigned char *>(src) + i * core::element_bytes(t);
        convert_array<Arch>(c, s, t, h, ATTN_DTYPE_BF16);
        convert_array<Arch>(c, h, ATTN_DTYPE_BF16, dst + i, ATTN_DTYPE_F32);
    }
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
