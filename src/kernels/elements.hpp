// Element types in the kernels: rows of f32, bf16 or f16 read as f32 vectors (the widening is
// exact), and f32 values rounded into an output row (the rules of attn_convert,
// src/core/convert.hpp). The tile loops compute in f32 only; these are the places where a
// stored type meets them: the Q tile, K packing, V padding, the decode kernel's in-place
// reads, and the output rows. Templated on the xsimd Arch like every kernel.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "attn/attn.h"
#include "core/convert.hpp"
#include "core/formats.hpp"

ATTN_KERNELS_BEGIN

using core::element_at;     // element i of an array of a type (core/formats.hpp)
using core::element_bytes;  // bytes of one element of a type

// The stored formats' descriptors (core/formats.hpp), for kernels specialised on the stored
// type; core::with_format turns a run-time type into one.
using f32_elements = core::f32_format;
using bf16_elements = core::bf16_format;
using f16_elements = core::f16_format;

// One element as f32.
template <class Arch, class E>
inline float widen_one(const typename E::storage *p) {
    if constexpr (E::type == ATTN_DTYPE_BF16) return convert::bf16_to_f32(*p);
    else if constexpr (E::type == ATTN_DTYPE_F16) return convert::f16_to_f32(*p);
    else if constexpr (E::type == ATTN_DTYPE_F32) return *p;
    else static_assert(E::bits == 0, "widen_one: a format without its widening");
}

// W consecutive elements at p as one f32 vector (unaligned).
template <class Arch, class E>
inline xsimd::batch<float, Arch> widen(const typename E::storage *p) {
    using fbatch = xsimd::batch<float, Arch>;
    static_assert(E::type == ATTN_DTYPE_F32 || E::type == ATTN_DTYPE_BF16 ||
                      E::type == ATTN_DTYPE_F16,
                  "widen: a format without its vector widening");
    if constexpr (E::type == ATTN_DTYPE_F32) {
        return fbatch::load_unaligned(p);
    } else if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
        if constexpr (E::type == ATTN_DTYPE_BF16)
            return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        else
            return _mm512_cvtph_ps(h);
    } else if constexpr (std::is_base_of_v<xsimd::avx2, Arch>) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
        if constexpr (E::type == ATTN_DTYPE_BF16)
            return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        else
            return _mm256_cvtph_ps(h);
    } else {  // SSE4.2: bf16 by a shift; no F16C, so f16 one element at a time
        if constexpr (E::type == ATTN_DTYPE_BF16) {
            const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
            return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16));
        } else {
            alignas(16) float x[4];
            for (int i = 0; i < 4; ++i) x[i] = convert::f16_to_f32(p[i]);
            return fbatch::load_aligned(x);
        }
    }
}

// dst[0 .. n) = the n elements at src as f32 (whole vectors, then one by one).
template <class Arch, class E>
inline void widen_row(const typename E::storage *src, int64_t n, float *dst) {
    constexpr int64_t W = xsimd::batch<float, Arch>::size;
    int64_t c = 0;
    for (; c + W <= n; c += W) widen<Arch, E>(src + c).store_unaligned(dst + c);
    for (; c < n; ++c) dst[c] = widen_one<Arch, E>(src + c);
}

// The same with the type known at run time.
template <class Arch>
inline void widen_row(const void *src, attn_dtype t, int64_t n, float *dst) {
    core::with_format(t, [&](auto format) {
        using E = decltype(format);
        widen_row<Arch, E>(static_cast<const typename E::storage *>(src), n, dst);
    });
}

// dst[0 .. n) of type t = src[0 .. n) rounded once (attn_convert's rules).
template <class Arch>
inline void narrow_row(const float *src, int64_t n, void *dst, attn_dtype t) {
    core::with_format(t, [&](auto format) {
        using E = decltype(format);
        auto *out = static_cast<typename E::storage *>(dst);
        if constexpr (E::type == ATTN_DTYPE_F32)
            for (int64_t c = 0; c < n; ++c) out[c] = src[c];
        else if constexpr (E::type == ATTN_DTYPE_BF16)
            for (int64_t c = 0; c < n; ++c) out[c] = convert::f32_to_bf16(src[c]);
        else if constexpr (E::type == ATTN_DTYPE_F16)
            for (int64_t c = 0; c < n; ++c) out[c] = convert::f32_to_f16(src[c]);
        else
            static_assert(E::bits == 0, "narrow_row: a format without its rounding");
    });
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
