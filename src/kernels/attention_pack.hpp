// K packing and V padding of the fused attention (attention.hpp), templated on the xsimd
// Arch. Every K and V row is found through the one addressing function (core/kv_rows.hpp), so a
// paged cache and contiguous rows holding the same values give the same packed bits.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "kernels/attention_micro.hpp"
#include "kernels/elements.hpp"
#include "core/kv_rows.hpp"
#include "kernels/row_reader.hpp"

ATTN_KERNELS_BEGIN
namespace attention_detail {

// Asks for the cache line holding *p, into every level (PREFETCHT0). An asm statement:
// GCC 12 at -O2 deletes a template's loop of __builtin_prefetch followed by a last one (the
// form of prefetch_row below), which had left decoding over quantized caches and the K and V
// packing without a single prefetch instruction. (Enabled in the packing and the forward
// tile, those prefetches made f32 prefill slower, so they are gone; decoding keeps them.)
inline void prefetch_line(const void *p) {
    asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char *>(p)));
}

// The same into the L2 (and the L3) only where l2, not the L1 (PREFETCHT2).
inline void prefetch_line(const void *p, bool l2) {
    if (l2) asm volatile("prefetcht2 %0" : : "m"(*static_cast<const char *>(p)));
    else prefetch_line(p);
}

// Asks for the cache lines of row[0 .. count) (elements of T), for reading (into the L2 only
// where l2).
template <class Arch, class T>
inline void prefetch_row(const T *row, int64_t count, bool l2 = false) {
    constexpr int64_t per_line = 64 / sizeof(T);
    for (int64_t i = 0; i < count; i += per_line) prefetch_line(row + i, l2);
    if (count > 0) prefetch_line(row + count - 1, l2);
}

// The same for a row of type t at element offset i of base.
template <class Arch>
inline void prefetch_row(const void *base, attn_dtype t, int64_t i, int64_t count, bool l2 = false) {
    prefetch_row<Arch>(static_cast<const char *>(element_at(base, t, i)),
                       core::element_offset_bytes(t, count + count % 2), l2);
}

// r[0..16) = the 16 x 16 block's rows in, its columns out (AVX-512): interleave pairs of
// rows, then pairs of pairs, then 128-bit quarters twice.
template <class Arch>
inline void transpose_16x16(xsimd::batch<float, Arch> *r) {
    using reg = typename xsimd::batch<float, Arch>::register_type;  // __m512
    reg t[16], u[16];
    for (int k = 0; k < 8; ++k) {
        t[2 * k] = _mm512_unpacklo_ps(reg(r[2 * k]), reg(r[2 * k + 1]));
        t[2 * k + 1] = _mm512_unpackhi_ps(reg(r[2 * k]), reg(r[2 * k + 1]));
    }
    for (int k = 0; k < 4; ++k) {  // u[4k + j]: column 4q + j of rows 4k..4k+3 in quarter q
        u[4 * k + 0] = _mm512_shuffle_ps(t[4 * k + 0], t[4 * k + 2], 0x44);
        u[4 * k + 1] = _mm512_shuffle_ps(t[4 * k + 0], t[4 * k + 2], 0xEE);
        u[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        u[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    for (int j = 0; j < 4; ++j) {
        const reg w0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
        const reg w1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
        const reg w2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        const reg w3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_f32x4(w0, w2, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(w1, w3, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(w0, w2, 0xDD);
        r[12 + j] = _mm512_shuffle_f32x4(w1, w3, 0xDD);
    }
}

// Panels of nr keys, [dim][nr] each, from key rows first + p * nr + n (zero from keys_end
// on), elements of format E widened (or dequantized) to f32 by its row reader. On AVX-512, 16 keys x 16 dims at a time through a
// register transpose (16 loads and 16 stores instead of 256 of each); elsewhere, and at the
// edges, element by element.
template <class Arch, class E>
void pack_k_panels(const kv_rows &k, int64_t first, int64_t keys_end, int64_t dim,
                   int64_t panels, float *packed) {
    using reader = row_reader<Arch, E>;
    constexpr int nr = panel_keys<Arch>;
    for (int64_t p = 0; p < panels; ++p) {
        float *panel = packed + p * nr * dim;
        int n = 0;
        if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
            for (; n + 16 <= nr && first + p * nr + n + 16 <= keys_end; n += 16) {
                const int64_t j0 = first + p * nr + n;
                const reader row[16] = {{k, j0}, {k, j0 + 1}, {k, j0 + 2}, {k, j0 + 3},
                                        {k, j0 + 4}, {k, j0 + 5}, {k, j0 + 6}, {k, j0 + 7},
                                        {k, j0 + 8}, {k, j0 + 9}, {k, j0 + 10}, {k, j0 + 11},
                                        {k, j0 + 12}, {k, j0 + 13}, {k, j0 + 14}, {k, j0 + 15}};
                int64_t d = 0;
                for (; d + 16 <= dim; d += 16) {
                    xsimd::batch<float, Arch> r[16];
                    for (int i = 0; i < 16; ++i) r[i] = row[i].vec(d);
                    transpose_16x16<Arch>(r);
                    for (int c = 0; c < 16; ++c) r[c].store_unaligned(panel + (d + c) * nr + n);
                }
                for (; d < dim; ++d)
                    for (int i = 0; i < 16; ++i) panel[d * nr + n + i] = row[i].one(d);
            }
        }
        for (; n < nr; ++n) {
            const int64_t j = first + p * nr + n;
            if (j < keys_end) {
                const reader row(k, j);
                for (int64_t d = 0; d < dim; ++d) panel[d * nr + n] = row.one(d);
            } else {
                for (int64_t d = 0; d < dim; ++d) panel[d * nr + n] = 0.0f;
            }
        }
    }
}

// The same with K's type known at run time (k.type).
template <class Arch>
void pack_k_panels(const kv_rows &k, int64_t first, int64_t keys_end, int64_t dim,
                   int64_t panels, float *packed) {
    core::with_kv_format(k.type, [&](auto format) {
        pack_k_panels<Arch, decltype(format)>(k, first, keys_end, dim, panels, packed);
    });
}

// V rows first .. first+keys-1 widened (or dequantized) into padded[j * padded_ld] (f32),
// zero to padded_ld.
template <class Arch>
void pad_v_rows(const kv_rows &v, int64_t first, int64_t keys, int64_t dim_v, float *padded,
                int64_t padded_ld) {
    core::with_kv_format(v.type, [&](auto format) {
        for (int64_t j = 0; j < keys; ++j) {
            float *dst = padded + j * padded_ld;
            read_row<Arch, decltype(format)>(v, first + j, dim_v, dst);
            for (int64_t c = dim_v; c < padded_ld; ++c) dst[c] = 0.0f;
        }
    });
}

}  // namespace attention_detail
ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
