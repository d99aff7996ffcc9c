// Packing into the layouts of the bf16-pair products (attention_bf16.hpp), for the
// avx512_bf16 and amx levels:
// K panels: panel p holds keys [p*nr, p*nr + nr) as [dim_pairs][nr][2] bf16 (dim_pairs =
// ceil(dim_qk / 2), a key's two consecutive dims side by side, zero past the last key and the
// last dim): one 512-bit load is 16 keys x 2 dims, the operand VDPBF16PS pairs with a
// broadcast pair of Q. That is the 32-bit transpose of the K rows, which for bf16 rows of an
// even dim is exactly the f32 panel packing applied to 32-bit words.
// V pair rows: pair row m holds keys 2m and 2m + 1 as [dim][2] bf16, in column chunks
// (pack_v_pairs).
// Values are taken as stored (bf16), or rounded once (f32, f16, a quantized cache's values
// under ATTN_FPMATH_BF16, or its codes for the bf16_code_pairs entry: kv_rows::codes, which
// bf16 holds exactly), read 16 at a time by the row reader.
// Needs -mavx512bf16.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <immintrin.h>

#include <cstdint>

#include "core/convert.hpp"
#include "kernels/attention.hpp"
#include "kernels/convert.hpp"
#include "kernels/row_reader.hpp"

ATTN_KERNELS_BEGIN
namespace attention_bf16_detail {

using attention_detail::lanes;
using attention_detail::panel_keys;

// The bf16 bits of element i of a row of format E (bf16 as stored, else rounded once).
template <class E>
inline uint16_t bf16_bits_of(const typename E::storage *row, int64_t i) {
    if constexpr (E::type == ATTN_DTYPE_BF16) return row[i];
    else if constexpr (E::type == ATTN_DTYPE_F16) return convert::f32_to_bf16(convert::f16_to_f32(row[i]));
    else if constexpr (E::type == ATTN_DTYPE_F32) return convert::f32_to_bf16(row[i]);
    else static_assert(E::bits == 0, "bf16_bits: a format without its rounding to bf16");
}

// The same for a row of run-time type t.
inline uint16_t bf16_bits(const void *row, attn_dtype t, int64_t i) {
    return core::with_format(t, [&](auto format) -> uint16_t {
        using E = decltype(format);
        return bf16_bits_of<E>(static_cast<const typename E::storage *>(row), i);
    });
}

// pairs[d] = (row[2d], row[2d + 1]) as one 32-bit word, low half first, for d < pairs_of(dim);
// 0 past dim: the row as bf16 (convert_array, attn_convert's rounding; bf16 copied), whose
// memory order is already that of the pairs.
template <class Arch>
inline void row_pairs(const void *row, attn_dtype t, int64_t dim, uint32_t *pairs) {
    auto *halves = reinterpret_cast<uint16_t *>(pairs);
    convert_array<Arch>(dim, row, t, halves, ATTN_DTYPE_BF16);
    if (dim % 2 != 0) halves[dim] = 0;
}

inline int64_t pairs_of(int64_t dim) { return (dim + 1) / 2; }

// Elements c, c + 1 of a row as one pair word (0 past dim).
template <class Reader>
inline uint32_t pair_word(const Reader &row, int64_t c, int64_t dim) {
    const uint32_t lo = convert::f32_to_bf16(row.one(c));
    return c + 1 < dim ? lo | uint32_t(convert::f32_to_bf16(row.one(c + 1))) << 16 : lo;
}

// pack_k_pairs for rows of format E: 16 keys x 32 dims at a time, each key's 32 values
// (widened or dequantized by the row reader) rounded into 16 pair words in a register by
// VCVTNE2PS2BF16 (convert::f32_to_bf16's rule exactly), the 16 x 16 words transposed as the
// f32 panels are.
template <class Arch, class E>
void pack_k_pairs_of(const kv_rows &k, int64_t first, int64_t keys_end, int64_t dim,
                       int64_t panels, uint32_t *words) {
    using reader = row_reader<Arch, E>;
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int nr = panel_keys<Arch>;
    const int64_t dp = pairs_of(dim);
    for (int64_t p = 0; p < panels; ++p) {
        uint32_t *panel = words + p * nr * dp;
        int n = 0;
        for (; n + 16 <= nr && first + p * nr + n + 16 <= keys_end; n += 16) {
            reader row[16];
            for (int i = 0; i < 16; ++i) row[i] = reader(k, first + p * nr + n + i);
            int64_t d = 0;
            for (; d + 32 <= dim; d += 32) {
                fbatch r[16];
                for (int i = 0; i < 16; ++i)
                    r[i] = _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(row[i].vec(d + 16), row[i].vec(d)));
                attention_detail::transpose_16x16<Arch>(r);
                for (int c = 0; c < 16; ++c)
                    r[c].store_unaligned(reinterpret_cast<float *>(panel + (d / 2 + c) * nr + n));
            }
            for (; d < dim; d += 2)
                for (int i = 0; i < 16; ++i) panel[(d / 2) * nr + n + i] = pair_word(row[i], d, dim);
        }
        for (; n < nr; ++n) {
            const int64_t j = first + p * nr + n;
            if (j >= keys_end) {
                for (int64_t x = 0; x < dp; ++x) panel[x * nr + n] = 0u;
                continue;
            }
            const reader row(k, j);
            for (int64_t d = 0; d < dim; d += 2) panel[(d / 2) * nr + n] = pair_word(row, d, dim);
        }
    }
}

// Word indices of VPERMT2W that interleave two rows of 32 bf16 values (x, then y at 32 + i)
// into pairs: dims 0-15 of both rows (half 0), then dims 16-31 (half 1).
alignas(64) inline constexpr uint16_t interleave_words[2][32] = {
    {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
     8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47},
    {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
     24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63}};

// pack_v_pairs for rows of format E: 16 dims of both keys of a pair row at a time (bf16 as
// stored: 32 dims, the two rows' words interleaved by two VPERMT2W).
template <class Arch, class E>
void pack_v_pairs_of(const kv_rows &v, int64_t first, int64_t keys, int64_t dim_v, int64_t ld,
                     int64_t chunk, uint16_t *packed) {
    using reader = row_reader<Arch, E>;
    const int64_t rows = (keys + 1) / 2;
    for (int64_t m = 0; m < rows; ++m) {
        // word d of the pair row: in chunk d / chunk, rows of its width one after the other
        const auto word = [&](int64_t d) {
            const int64_t c0 = d / chunk * chunk, width = ld - c0 < chunk ? ld - c0 : chunk;
            return reinterpret_cast<uint32_t *>(packed) + c0 * rows + m * width + (d - c0);
        };
        const bool second = 2 * m + 1 < keys;
        const reader a(v, first + 2 * m), b = second ? reader(v, first + 2 * m + 1) : a;
        int64_t d = 0;
        if constexpr (E::type == ATTN_DTYPE_BF16) {
            const __m512i lo = _mm512_load_si512(interleave_words[0]), hi = _mm512_load_si512(interleave_words[1]);
            for (; d + 32 <= dim_v; d += 32) {
                const __m512i x = _mm512_loadu_si512(a.p + d);
                const __m512i y = second ? _mm512_loadu_si512(b.p + d) : _mm512_setzero_si512();
                _mm512_storeu_si512(word(d), _mm512_permutex2var_epi16(x, lo, y));
                _mm512_storeu_si512(word(d + 16), _mm512_permutex2var_epi16(x, hi, y));
            }
        }
        for (; d + 16 <= dim_v; d += 16) {  // bf16 as stored, any other rounded
            auto bf16_of = [&](const reader &x) {
                if constexpr (E::type == ATTN_DTYPE_BF16)
                    return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x.p + d));
                else
                    return (__m256i)_mm512_cvtneps_pbh(x.vec(d));
            };
            const __m512i lo = _mm512_cvtepu16_epi32(bf16_of(a));
            const __m512i hi = second ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16_of(b)), 16)
                                      : _mm512_setzero_si512();
            _mm512_storeu_si512(word(d), _mm512_or_si512(lo, hi));
        }
        for (; d < dim_v; ++d)
            *word(d) = uint32_t(convert::f32_to_bf16(a.one(d))) |
                       (second ? uint32_t(convert::f32_to_bf16(b.one(d))) << 16 : 0u);
        for (d = dim_v; d < ld; ++d) *word(d) = 0u;
    }
}

// Panels of bf16 pairs (see the header comment) of K rows first .. keys_end - 1 (zero past
// them), of k.type: bf16 rows of an even dim as 32-bit words, any other by pack_k_pairs_of.
template <class Arch>
void pack_k_pairs(const kv_rows &k, int64_t first, int64_t keys_end, int64_t dim, int64_t panels,
                  uint16_t *packed) {
    const int64_t dp = pairs_of(dim);
    if (k.type == ATTN_DTYPE_BF16 && dim % 2 == 0 && k.ld % 2 == 0 && k.page_stride % 2 == 0 &&
        reinterpret_cast<uintptr_t>(k.base) % 4 == 0) {
        // 32-bit words of bf16 pairs transposed as the f32 panels are: bit for bit the same
        // layout, through the same register transpose (the rows seen as f32 rows of dp words).
        kv_rows words = k;
        words.type = ATTN_DTYPE_F32;
        words.ld = k.ld / 2;
        words.page_stride = k.page_stride / 2;
        attention_detail::pack_k_panels<Arch, f32_elements>(words, first, keys_end, dp, panels,
                                                            reinterpret_cast<float *>(packed));
        return;
    }
    core::with_kv_format(k.type, [&](auto format) {
        pack_k_pairs_of<Arch, decltype(format)>(k, first, keys_end, dim, panels,
                                                reinterpret_cast<uint32_t *>(packed));
    });
}

// V in pairs of keys: pair row m holds keys 2m and 2m + 1 as [dim][2] bf16, ld dims (32-bit
// words) a row (ld >= dim_v; zero past dim_v and past the last key), so that one 512-bit load
// is 16 dims of two keys, the operand VDPBF16PS pairs with a broadcast pair of P; the rows in
// column chunks of `chunk` words (a multiple of 16, or ld: plain rows ld words apart): chunk
// c holds words [c chunk, c chunk + width) of every row, width = min(chunk, ld - c chunk),
// the (keys + 1) / 2 rows of it one after the other from word c chunk (keys + 1) / 2 on
// (attention_bf16.hpp's v_pair_rows reads them). From key rows first + j, j < keys, found
// through the addressing function, of v.type.
template <class Arch>
void pack_v_pairs(const kv_rows &v, int64_t first, int64_t keys, int64_t dim_v, int64_t ld,
                  int64_t chunk, uint16_t *packed) {
    core::with_kv_format(v.type, [&](auto format) {
        pack_v_pairs_of<Arch, decltype(format)>(v, first, keys, dim_v, ld, chunk, packed);
    });
}

}  // namespace attention_bf16_detail
ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
