// Attention scores from bf16 pairs (VDPBF16PS), for the avx512_bf16 and amx levels: the same
// tile loop as attention_forward_tile (attention.hpp), with S = Q K^T formed from bf16 values
// two at a time and accumulated in f32. Products of two bf16 values are exact in f32, so with
// q and k stored in bf16 these are the exact products of the stored values summed in f32, as
// attn.h's numerics ask; f32 and f16 inputs come here only under ATTN_FPMATH_BF16, rounded to
// bf16 once when Q is loaded and K packed. The scale multiplies S in f32 (Q is not scaled in
// bf16, which would round again). The softmax, P V and the output stay in f32.
//
// K panels: panel p holds keys [p*nr, p*nr + nr) as [dim_pairs][nr][2] bf16 (dim_pairs =
// ceil(dim_qk / 2), a key's two consecutive dims side by side, zero past the last key and the
// last dim): one 512-bit load is 16 keys x 2 dims, the operand VDPBF16PS pairs with a
// broadcast pair of Q. That is the 32-bit transpose of the K rows, which for bf16 rows of an
// even dim is exactly the f32 panel packing applied to 32-bit words.
// Needs -mavx512bf16: included only by src/kernels/arch/avx512_bf16.cpp.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <immintrin.h>

#include <cstdint>

#include "kernels/attention.hpp"
#include "kernels/attention_entries.hpp"
#include "core/convert.hpp"

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
// 0 past dim. The format is chosen once per row.
inline void row_pairs(const void *row, attn_dtype t, int64_t dim, uint32_t *pairs) {
    core::with_format(t, [&](auto format) {
        using E = decltype(format);
        const auto *p = static_cast<const typename E::storage *>(row);
        for (int64_t d = 0; d < dim / 2; ++d)
            pairs[d] = uint32_t(bf16_bits_of<E>(p, 2 * d)) | uint32_t(bf16_bits_of<E>(p, 2 * d + 1)) << 16;
        if (dim % 2 != 0) pairs[dim / 2] = bf16_bits_of<E>(p, dim - 1);
    });
}

inline int64_t pairs_of(int64_t dim) { return (dim + 1) / 2; }

// Elements c0 .. c0 + n - 1 (n <= row_chunk) of key j's row of a K or V cache as bf16 bits:
// bf16 as stored, else its value, widened or dequantized, rounded once (an ATTN_FPMATH_BF16
// product of an f32, f16 or quantized cache). The row is found and its format chosen once.
inline constexpr int64_t row_chunk = 64;
inline void kv_bf16_row(const kv_rows &x, int64_t j, int64_t c0, int64_t n, uint16_t *out) {
    if (x.type == ATTN_DTYPE_BF16) {
        const uint16_t *r = static_cast<const uint16_t *>(x.row(j)) + c0;
        for (int64_t c = 0; c < n; ++c) out[c] = r[c];
        return;
    }
    float values[row_chunk];
    x.values(j, c0, n, values);
    for (int64_t c = 0; c < n; ++c) out[c] = convert::f32_to_bf16(values[c]);
}

// Panels of bf16 pairs (see the header comment) from rows k + j * k_ld of type k_type,
// j < keys (zero for j >= keys).
template <class Arch>
void pack_k_pairs(const kv_rows &k, int64_t first, int64_t keys_end, int64_t dim, int64_t panels,
                  uint16_t *packed) {
    constexpr int nr = panel_keys<Arch>;
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
    uint32_t *words = reinterpret_cast<uint32_t *>(packed);
    uint16_t bits[row_chunk + 1];
    for (int64_t p = 0; p < panels; ++p)
        for (int n = 0; n < nr; ++n) {
            const int64_t j = first + p * nr + n;
            for (int64_t c0 = 0; c0 < dim; c0 += row_chunk) {  // row_chunk dims: whole pairs
                const int64_t count = dim - c0 < row_chunk ? dim - c0 : row_chunk;
                if (j < keys_end) kv_bf16_row(k, j, c0, count, bits);
                bits[count] = 0;  // the second half of an odd dim's last pair
                for (int64_t c = 0; c < count; c += 2)
                    words[(p * dp + (c0 + c) / 2) * nr + n] =
                        j < keys_end ? uint32_t(bits[c]) | (uint32_t(bits[c + 1]) << 16) : 0u;
            }
        }
}

// s[Rows x NRV*W] = scale * q[Rows x pairs] K_panel, the panel's first NRV key vectors, and
// row_max[r][0..W) = max(row_max[r], the row's scores) lane-wise (as score_block).
template <class Arch, int Rows, int NRV>
inline void score_block_pairs(const uint32_t *q, int64_t ldq, const uint16_t *panel,
                              int64_t pairs, float scale, float *s, int64_t lds,
                              float *row_max) {
    constexpr int W = lanes<Arch>;
    constexpr int nr = panel_keys<Arch>;
    __m512 acc[Rows][NRV];
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int64_t d = 0; d < pairs; ++d) {
        __m512bh kv[NRV];
#pragma GCC unroll 8
        for (int v = 0; v < NRV; ++v)
            kv[v] = (__m512bh)_mm512_loadu_si512(panel + (d * nr + v * W) * 2);
#pragma GCC unroll 32
        for (int r = 0; r < Rows; ++r) {
            const __m512bh qv = (__m512bh)_mm512_set1_epi32(int(q[r * ldq + d]));
#pragma GCC unroll 8
            for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], qv, kv[v]);
        }
    }
    const __m512 scale_v = _mm512_set1_ps(scale);
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r) {
        __m512 m = _mm512_load_ps(row_max + r * W);
#pragma GCC unroll 8
        for (int v = 0; v < NRV; ++v) {
            const __m512 x = _mm512_mul_ps(acc[r][v], scale_v);
            _mm512_store_ps(s + r * lds + v * W, x);
            m = _mm512_max_ps(x, m);  // NaN left out here, as in score_block
        }
        _mm512_store_ps(row_max + r * W, m);
    }
}

// score_block_pairs for rows <= Rows and `vectors` <= NRV key vectors.
template <class Arch, int Rows, int NRV>
inline void score_block_pairs_any(int rows, int vectors, const uint32_t *q, int64_t ldq,
                                  const uint16_t *panel, int64_t pairs, float scale, float *s,
                                  int64_t lds, float *row_max) {
    if constexpr (Rows > 1) {
        if (rows < Rows)
            return score_block_pairs_any<Arch, Rows - 1, NRV>(rows, vectors, q, ldq, panel, pairs,
                                                              scale, s, lds, row_max);
    }
    if constexpr (NRV > 1) {
        if (vectors < NRV)
            return score_block_pairs_any<Arch, Rows, NRV - 1>(rows, vectors, q, ldq, panel, pairs,
                                                              scale, s, lds, row_max);
    }
    score_block_pairs<Arch, Rows, NRV>(q, ldq, panel, pairs, scale, s, lds, row_max);
}

// tile_scores (attention.hpp) over bf16-pair panels: causal skipping and the diagonal's
// partial panels as there.
template <class Arch>
void tile_scores_pairs(const attention_tile &t, int64_t j0, const uint32_t *q, int64_t pairs,
                       int64_t rows, const uint16_t *panels_at, int64_t panels, float scale,
                       float *s, float *score_max) {
    using blk = attention_blocking<Arch>;
    constexpr int nr = panel_keys<Arch>;
    constexpr int W = lanes<Arch>;
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t r = 0; r < rows; ++r) _mm512_store_ps(score_max + r * W, neg_inf);
    for (int64_t p = 0; p < panels; ++p)
        for (int64_t r0 = 0; r0 < rows; r0 += blk::mr_s) {
            const int rr = static_cast<int>(rows - r0 < blk::mr_s ? rows - r0 : blk::mr_s);
            const int vectors = attention_detail::panel_vectors<Arch>(t, r0, rr, j0, p * nr);
            if (vectors == 0) continue;
            score_block_pairs_any<Arch, blk::mr_s, blk::nr_vectors>(
                rr, vectors, q + r0 * pairs, pairs, panels_at + p * nr * pairs * 2, pairs, scale,
                s + r0 * blk::bc + p * nr, blk::bc, score_max + r0 * W);
        }
}

// V in pairs of keys: pair row m holds keys 2m and 2m + 1 as [dim][2] bf16 (ld dims apart,
// ld >= dim_v; zero past dim_v and past the last key), so that one 512-bit load is 16 dims of
// two keys, the operand VDPBF16PS pairs with a broadcast pair of P. From key rows first + j,
// j < keys, found through the addressing function.
template <class Arch>
void pack_v_pairs(const kv_rows &v, int64_t first, int64_t keys, int64_t dim_v, int64_t ld,
                  uint16_t *packed) {
    const attn_dtype v_type = v.type;
    for (int64_t m = 0; m < (keys + 1) / 2; ++m) {
        uint32_t *words = reinterpret_cast<uint32_t *>(packed + m * ld * 2);
        const void *row0 = v.row(first + 2 * m);
        const bool second = 2 * m + 1 < keys;
        const void *row1 = second ? v.row(first + 2 * m + 1) : row0;
        int64_t d = 0;
        if (v_type == ATTN_DTYPE_BF16) {  // 16 dims of both rows interleaved in registers
            const uint16_t *a = static_cast<const uint16_t *>(row0);
            const uint16_t *b = static_cast<const uint16_t *>(row1);
            for (; d + 16 <= dim_v; d += 16) {
                const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(a + d)));
                const __m512i hi = second ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                                                  reinterpret_cast<const __m256i *>(b + d))),
                                                              16)
                                          : _mm512_setzero_si512();
                _mm512_storeu_si512(words + d, _mm512_or_si512(lo, hi));
            }
        }
        for (; d < dim_v; d += row_chunk) {
            const int64_t count = dim_v - d < row_chunk ? dim_v - d : row_chunk;
            uint16_t a[row_chunk], b[row_chunk];
            kv_bf16_row(v, first + 2 * m, d, count, a);
            if (second) kv_bf16_row(v, first + 2 * m + 1, d, count, b);
            for (int64_t c = 0; c < count; ++c)
                words[d + c] = uint32_t(a[c]) | (second ? uint32_t(b[c]) << 16 : 0u);
        }
        for (d = dim_v; d < ld; ++d) words[d] = 0u;
    }
}

// The V pair rows for keys j0 .. j0+cols-1 of a tile: the driver's packed pairs when it
// packed V once for the whole head, else packed here into v_buf (bc * dv_pad floats), pair
// rows dv_pad words apart, or one 64-byte line more when dv_pad is an even number of lines:
// rows an even number of lines apart share half the L1 sets (as the driver's v_ld avoids).
struct v_pair_rows {
    const uint16_t *pairs;
    int64_t ld;  // bf16 elements between pair rows
};
template <class Arch>
v_pair_rows tile_v_pairs(const attention_tile &t, int64_t j0, int64_t cols, int64_t dv_pad,
                         float *v_buf) {
    if (t.v_pairs) return {t.v_pairs + (j0 / 2) * t.v_pairs_ld, t.v_pairs_ld};
    auto *packed = reinterpret_cast<uint16_t *>(v_buf);
    const int64_t ld = (dv_pad / 16) % 2 == 0 ? dv_pad + 16 : dv_pad;  // (bc / 2) rows fit
    pack_v_pairs<Arch>(t.v, j0, cols, t.dim_v, ld, packed);
    return {packed, ld * 2};
}

// c[Rows x N*W] = c (times rescale[r], when given) + sum over x < count of A(r, x) B(x) on bf16
// pairs, summed in f32 by VDPBF16PS: A(r, x) the 32-bit word a[r * a_rs + x * a_xs] (a pair of
// row r), B(x) the pair row at b + x * ldb words, its N vectors side by side. The products of
// the pair forward (P V) and of the pair backward.
template <class Arch, int Rows, int N>
inline void dp_block_pairs(const uint32_t *a, int64_t a_rs, int64_t a_xs, int64_t count,
                           const uint32_t *b, int64_t ldb, float *c, int64_t ldc,
                           const float *rescale) {
    constexpr int W = lanes<Arch>;
    __m512 acc[Rows][N];
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
        for (int n = 0; n < N; ++n) acc[r][n] = _mm512_load_ps(c + r * ldc + n * W);
    if (rescale) {
#pragma GCC unroll 32
        for (int r = 0; r < Rows; ++r) {
            const __m512 f = _mm512_set1_ps(rescale[r]);
#pragma GCC unroll 8
            for (int n = 0; n < N; ++n) acc[r][n] = _mm512_mul_ps(acc[r][n], f);
        }
    }
    for (int64_t x = 0; x < count; ++x) {
        __m512bh bv[N];
#pragma GCC unroll 8
        for (int n = 0; n < N; ++n) bv[n] = (__m512bh)_mm512_loadu_si512(b + x * ldb + n * W);
#pragma GCC unroll 32
        for (int r = 0; r < Rows; ++r) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[r * a_rs + x * a_xs]));
#pragma GCC unroll 8
            for (int n = 0; n < N; ++n) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], av, bv[n]);
        }
    }
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
        for (int n = 0; n < N; ++n) _mm512_store_ps(c + r * ldc + n * W, acc[r][n]);
}

// dp_block_pairs for rows <= Rows and vectors <= N.
template <class Arch, int Rows, int N>
inline void dp_block_pairs_any(int rows, int vectors, const uint32_t *a, int64_t a_rs,
                               int64_t a_xs, int64_t count, const uint32_t *b, int64_t ldb,
                               float *c, int64_t ldc, const float *rescale) {
    if constexpr (Rows > 1) {
        if (rows < Rows)
            return dp_block_pairs_any<Arch, Rows - 1, N>(rows, vectors, a, a_rs, a_xs, count, b,
                                                         ldb, c, ldc, rescale);
    }
    if constexpr (N > 1) {
        if (vectors < N)
            return dp_block_pairs_any<Arch, Rows, N - 1>(rows, vectors, a, a_rs, a_xs, count, b,
                                                         ldb, c, ldc, rescale);
    }
    dp_block_pairs<Arch, Rows, N>(a, a_rs, a_xs, count, b, ldb, c, ldc, rescale);
}

// o[rows x vectors*W] = o * rescale[r] + P V, P as bf16 pairs (row r's pair m the 32-bit word
// p[r * ldp + m], m < pairs), V as pair rows (pair row m at v + m * ldv bf16, ldv even).
template <class Arch, int Rows, int NV>
inline void pv_block_pairs_any(int rows, int vectors, const uint32_t *p, int64_t ldp,
                               int64_t pairs, const uint16_t *v, int64_t ldv, float *o,
                               int64_t ldo, const float *rescale) {
    dp_block_pairs_any<Arch, Rows, NV>(rows, vectors, p, ldp, 1, pairs,
                                       reinterpret_cast<const uint32_t *>(v), ldv / 2, o, ldo,
                                       rescale);
}

// O = O * rescale + P V for the keys j0 .. j0+cols-1 of a tile, with P rounded to bf16 (in
// place in s: row r's bf16 values at (uint16_t *)(s + r * bc)) and V from bf16 pair rows.
// The keys a row block shares go in pairs; a key hidden from a row is never read for it, so
// an odd last shared key and each row's further keys near the causal diagonal are added one
// by one from the V rows as stored (widened), with the same bf16 P.
template <class Arch>
void pv_tile_pairs(const attention_tile &t, int64_t j0, int64_t cols, float *s, float *o,
                   int64_t dv_pad, const float *rescale, float *v_buf) {
    using blk = attention_blocking<Arch>;
    constexpr int W = lanes<Arch>;
    // P -> bf16, 32 at a time, front to back in place (the writes trail the reads)
    const int64_t p_cols = (cols + 31) / 32 * 32;  // within bc; zero past each row's keys
    for (int64_t r = 0; r < t.rows; ++r) {
        float *row = s + r * blk::bc;
        uint16_t *p16 = reinterpret_cast<uint16_t *>(row);
        for (int64_t c = 0; c < p_cols; c += 32) {
            const __m512 x0 = _mm512_load_ps(row + c), x1 = _mm512_load_ps(row + c + 16);
            _mm512_storeu_si512(p16 + c, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
        }
    }
    const uint32_t *p_words = reinterpret_cast<const uint32_t *>(s);
    const int64_t ldp = blk::bc;  // P rows stay bc floats (32-bit words) apart
    const v_pair_rows vp = tile_v_pairs<Arch>(t, j0, cols, dv_pad, v_buf);
    const uint16_t *v_pairs = vp.pairs;
    const int64_t ldv = vp.ld;
    // the pairs of keys every row of a block sees (both keys of a pair in its shared range)
    const int64_t vectors = dv_pad / W;
    for (int64_t c0 = 0; c0 < vectors; c0 += blk::nv) {
        const int nvec = static_cast<int>(vectors - c0 < blk::nv ? vectors - c0 : blk::nv);
        for (int64_t r0 = 0; r0 < t.rows; r0 += blk::mr_o) {
            const int rr = static_cast<int>(t.rows - r0 < blk::mr_o ? t.rows - r0 : blk::mr_o);
            const key_range shared = attention_detail::shared_columns(t, r0, r0 + rr, j0, cols);
            const int64_t first_pair = (shared.lo + 1) / 2, end_pair = shared.hi / 2;
            const int64_t pairs = end_pair > first_pair ? end_pair - first_pair : 0;
            pv_block_pairs_any<Arch, blk::mr_o, blk::nv>(
                rr, nvec, p_words + r0 * ldp + first_pair, ldp, pairs,
                v_pairs + first_pair * ldv + c0 * W * 2, ldv, o + r0 * dv_pad + c0 * W, dv_pad,
                rescale + r0);
        }
    }
    // each row's keys outside its block's shared pairs, one at a time from the stored rows
    for (int64_t r0 = 0; r0 < t.rows; r0 += blk::mr_o) {
        const int64_t rr = t.rows - r0 < blk::mr_o ? t.rows - r0 : blk::mr_o;
        const key_range shared = attention_detail::shared_columns(t, r0, r0 + rr, j0, cols);
        int64_t paired_lo = (shared.lo + 1) / 2 * 2, paired_hi = shared.hi / 2 * 2;
        if (paired_hi <= paired_lo) paired_lo = paired_hi = 0;
        for (int64_t r = r0; r < r0 + rr; ++r) {
            const key_range own = attention_detail::tile_columns(t, r, j0, cols);
            const uint16_t *p16 = reinterpret_cast<const uint16_t *>(s + r * blk::bc);
            float *o_row = o + r * dv_pad;
            auto add_key = [&](int64_t j) {
                const float p = convert::bf16_to_f32(p16[j]);
                float v_row[row_chunk];
                for (int64_t d0 = 0; d0 < t.dim_v; d0 += row_chunk) {
                    const int64_t n = t.dim_v - d0 < row_chunk ? t.dim_v - d0 : row_chunk;
                    t.v.values(j0 + j, d0, n, v_row);
                    for (int64_t d = 0; d < n; ++d) o_row[d0 + d] += p * v_row[d];
                }
            };
            // the keys before the paired range and after it, not a pass over the paired ones
            for (int64_t j = own.lo; j < (own.hi < paired_lo ? own.hi : paired_lo); ++j) add_key(j);
            for (int64_t j = own.lo > paired_hi ? own.lo : paired_hi; j < own.hi; ++j) add_key(j);
        }
    }
}

// The scores policy of the tile loop (attention_detail::f32_scores is the f32 one): the q
// region holds the tile's Q rows as bf16 pairs [rows][pairs], unscaled; K comes from the
// head's bf16 panels (t.k_pairs) or is packed now into the k region.
template <class Arch>
struct bf16_scores {
    static void load_q(const attention_tile &t, float *q_region) {
        uint32_t *q = reinterpret_cast<uint32_t *>(q_region);
        const int64_t pairs = pairs_of(t.dim_qk);
        for (int64_t r = 0; r < t.rows; ++r) {
            const void *row = element_at(t.q, t.q_type, r * t.q_ld);
            row_pairs(row, t.q_type, t.dim_qk, q + r * pairs);
        }
    }
    static bool tile(const attention_tile &t, const float *q_region, int64_t j0, int64_t cols,
                     float *s, float *k_buf, float *score_max) {
        constexpr int nr = panel_keys<Arch>;
        const int64_t panels = (cols + nr - 1) / nr, pairs = pairs_of(t.dim_qk);
        const uint16_t *k_at;
        if (t.k_pairs) {
            k_at = t.k_pairs + (j0 / nr) * nr * pairs * 2;
        } else {
            uint16_t *buf = reinterpret_cast<uint16_t *>(k_buf);
            pack_k_pairs<Arch>(t.k, j0, t.len_kv, t.dim_qk, panels, buf);
            k_at = buf;
        }
        tile_scores_pairs<Arch>(t, j0, reinterpret_cast<const uint32_t *>(q_region), pairs, t.rows,
                                k_at, panels, t.scale, s, score_max);
        return true;
    }
    static void pv(const attention_tile &t, int64_t j0, int64_t cols, float *s, float *o,
                   int64_t dv_pad, const float *rescale, float *v_buf) {
        pv_tile_pairs<Arch>(t, j0, cols, s, o, dv_pad, rescale, v_buf);
    }
};

}  // namespace attention_bf16_detail

// ---- the bf16_pairs entry (attention_impl.hpp) -----------------------------------------------

namespace attention_bf16_detail {

// K pair panels: a key's share of a panel is dim_qk / 2 pairs, 32-bit words, rounded up.
template <class Arch>
void pack_k_entry(const kv_rows &k, int64_t first, int64_t keys_end, int64_t dim_qk,
                  int64_t panels, float *packed) {
    pack_k_pairs<Arch>(k, first, keys_end, dim_qk, panels, reinterpret_cast<uint16_t *>(packed));
}

// V as pair rows of ld 32-bit words (2 ld bf16 values: dims of two keys interleaved).
template <class Arch>
void pack_v_entry(const kv_rows &v, int64_t first, int64_t keys, int64_t dim_v, float *packed,
                  int64_t ld) {
    pack_v_pairs<Arch>(v, first, keys, dim_v, ld, reinterpret_cast<uint16_t *>(packed));
}

inline void use_k_pairs(attention_tile &t, const float *packed) {
    t.k_pairs = reinterpret_cast<const uint16_t *>(packed);
}

// t.v keeps the stored rows, for the keys taken one at a time.
inline void use_v_pairs(attention_tile &t, const float *packed, int64_t ld) {
    t.v_pairs = reinterpret_cast<const uint16_t *>(packed);
    t.v_pairs_ld = 2 * ld;
}

}  // namespace attention_bf16_detail

template <class Arch>
void attention_forward_tile_bf16(const attention_tile &t) {
    attention_forward_tile_with<Arch, attention_bf16_detail::bf16_scores<Arch>>(t);
}

template <class Arch>
void attention_weights_tile_bf16(const attention_tile &t, float *weights, int64_t weights_ld,
                                 bool after_forward) {
    attention_weights_tile_with<Arch, attention_bf16_detail::bf16_scores<Arch>>(
        t, weights, weights_ld, after_forward);
}

// The f32 tiles' blocks and scratch, with K and V in the pair layouts; taken only where bf16
// products are allowed, by sequences with more rows than the decode entry takes (which reads
// K and V once, in place, with exact products: bound by memory, not by the products).
template <class Arch>
attention_impl attention_bf16_pairs_entry() {
    namespace detail = attention_bf16_detail;
    attention_impl e = attention_f32_tiles_entry<Arch>();
    e.name = "bf16_pairs";
    e.pair_products = true;
    e.k_pairs = true;
    e.pack_k = &detail::pack_k_entry<Arch>;
    e.pack_v = &detail::pack_v_entry<Arch>;
    e.use_packed_k = &detail::use_k_pairs;
    e.use_packed_v = &detail::use_v_pairs;
    e.forward_tile = &attention_forward_tile_bf16<Arch>;
    e.weights_tile = &attention_weights_tile_bf16<Arch>;
    return e;
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
