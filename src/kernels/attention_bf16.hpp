// Attention scores from bf16 pairs (VDPBF16PS), for the avx512_bf16 and amx levels: the same
// tile loop as attention_forward_tile (attention.hpp), with S = Q K^T formed from bf16 values
// two at a time and accumulated in f32. Products of two bf16 values are exact in f32, so with
// q and k stored in bf16 these are the exact products of the stored values summed in f32, as
// attn.h's numerics ask; f32 and f16 inputs come here only under ATTN_FPMATH_BF16, rounded to
// bf16 once when Q is loaded and K packed. The scale multiplies S in f32 (Q is not scaled in
// bf16, which would round again). P = e^(S - m) is rounded to bf16 for P V (as attn.h
// allows when V is bf16 or under ATTN_FPMATH_BF16), which VDPBF16PS sums in f32; the running
// maxima and sums and the output stay in f32. K and V in their pair layouts:
// attention_pack_pairs.hpp.
// Needs -mavx512bf16: included only by src/kernels/arch/avx512_bf16.cpp.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/attention.hpp"
#include "kernels/attention_pack_pairs.hpp"
#include "kernels/decode_widen.hpp"
#include "core/convert.hpp"

ATTN_KERNELS_BEGIN
namespace attention_bf16_detail {

using attention_detail::lanes;
using attention_detail::panel_keys;

// acc[r][v] = q[r x pairs] times the panel's key vector v, on bf16 pairs (VDPBF16PS) summed in
// f32 in pair order: the products of score_block_pairs and score_p_block_pairs.
template <class Arch, int Rows, int NRV>
ATTN_ALWAYS_INLINE void panel_products(const uint32_t *q, int64_t ldq, const uint16_t *panel,
                                       int64_t pairs, __m512 (&acc)[Rows][NRV]) {
    constexpr int W = lanes<Arch>;
    constexpr int nr = panel_keys<Arch>;
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
}

// s[Rows x NRV*W] = (q[Rows x pairs] K_panel) times col_scale (a factor a key), the panel's
// first NRV key vectors, and row_max[r][0..W) = max(row_max[r], the row's scores) lane-wise
// (as score_block).
template <class Arch, int Rows, int NRV>
inline void score_block_pairs(const uint32_t *q, int64_t ldq, const uint16_t *panel,
                              int64_t pairs, const float *col_scale, float *s, int64_t lds,
                              float *row_max) {
    constexpr int W = lanes<Arch>;
    __m512 acc[Rows][NRV];
    panel_products<Arch, Rows, NRV>(q, ldq, panel, pairs, acc);
    __m512 scale_v[NRV];
#pragma GCC unroll 8
    for (int v = 0; v < NRV; ++v) scale_v[v] = _mm512_loadu_ps(col_scale + v * W);
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r) {
        __m512 m = _mm512_load_ps(row_max + r * W);
#pragma GCC unroll 8
        for (int v = 0; v < NRV; ++v) {
            const __m512 x = _mm512_mul_ps(acc[r][v], scale_v[v]);
            _mm512_store_ps(s + r * lds + v * W, x);
            m = _mm512_max_ps(x, m);  // NaN left out here, as in score_block
        }
        _mm512_store_ps(row_max + r * W, m);
    }
}

// score_block_pairs for rows <= Rows and `vectors` <= NRV key vectors.
template <class Arch, int Rows, int NRV>
inline void score_block_pairs_any(int rows, int vectors, const uint32_t *q, int64_t ldq,
                                  const uint16_t *panel, int64_t pairs, const float *col_scale,
                                  float *s, int64_t lds, float *row_max) {
    if constexpr (Rows > 1) {
        if (rows < Rows)
            return score_block_pairs_any<Arch, Rows - 1, NRV>(rows, vectors, q, ldq, panel, pairs,
                                                              col_scale, s, lds, row_max);
    }
    if constexpr (NRV > 1) {
        if (vectors < NRV)
            return score_block_pairs_any<Arch, Rows, NRV - 1>(rows, vectors, q, ldq, panel, pairs,
                                                              col_scale, s, lds, row_max);
    }
    score_block_pairs<Arch, Rows, NRV>(q, ldq, panel, pairs, col_scale, s, lds, row_max);
}

// P times its keys' factors (the vector at `factor`) where P is not 0: a hidden key's P stays
// 0 whatever its factor (0 times an inf or NaN scale would be NaN).
inline __m512 times_where_nonzero(__m512 p, const float *factor) {
    return _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(p, _mm512_setzero_ps(), _CMP_NEQ_UQ), p, _mm512_load_ps(factor));
}

// score_block_pairs with P formed in its epilogue, for a panel of NRV vectors every row of the
// block sees: with acc the products, P = 2^(acc col_scale_log2e[c] - m_ref[r] log2 e)
// (exp2_for_bf16; col_scale_log2e[c] = the key's factor of S times log2 e), its lane-wise sums
// added at sums + r * W, then (Scaled) P times p_scale[c] where P is not 0, as exp_row_pairs,
// rounded to bf16 at p16 + r * ldp (bf16 elements). The exponent's roundings (of the key's
// factor times log2 e, of m_ref log2 e, and the multiply-add's own) put P within 3.0e-6 +
// 1.2e-7 (|S| + |m_ref|) relative, where S - m, then its product, put it within 3.0e-6 +
// 7.5e-8 |S - m| (exp_for_bf16): still ~90 times finer than P's rounding to bf16 (2^-9)
// while |S| and |m_ref| stay below 80. Neither S nor its max is kept: the epilogue's
// operations share the VDPBF16PS pipes, and the exponent comes in one multiply-add
// from the products where S, S - m and (S - m) log2 e took a multiply each and a subtract,
// with a max beside them. Not inlined: in the loops over panels and rows the compiler hoisted
// the exponential's constants out of them, into registers the accumulators then lacked (two
// of them spilled in the products' loop, 1.05-1.10x the time).
template <class Arch, int Rows, int NRV, bool Scaled>
__attribute__((noinline)) void score_p_block_pairs(const uint32_t *q, int64_t ldq,
                                                   const uint16_t *panel, int64_t pairs,
                                                   const float *col_scale_log2e,
                                                   const float *p_scale, const float *m_ref,
                                                   uint16_t *p16, int64_t ldp, float *sums) {
    using fbatch = xsimd::batch<float, Arch>;
    static_assert(NRV % 2 == 0, "P is stored two vectors at a time");
    constexpr int W = lanes<Arch>;
    __m512 acc[Rows][NRV];
    panel_products<Arch, Rows, NRV>(q, ldq, panel, pairs, acc);
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r) {
        const __m512 shift = _mm512_set1_ps(-(m_ref[r] * 1.44269504088896341f));
        __m512 p[NRV];
#pragma GCC unroll 8
        for (int v = 0; v < NRV; ++v)  // (the key factors from memory: in registers they left the exponential short)
            p[v] = exp2_for_bf16<Arch>(
                fbatch(_mm512_fmadd_ps(acc[r][v], _mm512_loadu_ps(col_scale_log2e + v * W), shift)));
        // the sums in a tree, not a chain through each vector's exponential
        fbatch sum = fbatch(p[0]) + fbatch(p[1]);
#pragma GCC unroll 8
        for (int v = 2; v < NRV; v += 2) sum += fbatch(p[v]) + fbatch(p[v + 1]);
#pragma GCC unroll 8
        for (int v = 0; Scaled && v < NRV; ++v)
            p[v] = times_where_nonzero(p[v], p_scale + v * W);
        (fbatch::load_aligned(sums + r * W) + sum).store_aligned(sums + r * W);
#pragma GCC unroll 8
        for (int v = 0; v < NRV; v += 2)
            _mm512_storeu_si512(p16 + r * ldp + v * W, (__m512i)_mm512_cvtne2ps_pbh(p[v + 1], p[v]));
    }
}

// score_p_block_pairs for rows <= Rows.
template <class Arch, int Rows, int NRV, bool Scaled>
inline void score_p_block_pairs_any(int rows, const uint32_t *q, int64_t ldq,
                                    const uint16_t *panel, int64_t pairs,
                                    const float *col_scale_log2e, const float *p_scale,
                                    const float *m_ref, uint16_t *p16, int64_t ldp, float *sums) {
    if constexpr (Rows > 1) {
        if (rows < Rows)
            return score_p_block_pairs_any<Arch, Rows - 1, NRV, Scaled>(
                rows, q, ldq, panel, pairs, col_scale_log2e, p_scale, m_ref, p16, ldp, sums);
    }
    score_p_block_pairs<Arch, Rows, NRV, Scaled>(q, ldq, panel, pairs, col_scale_log2e, p_scale,
                                                 m_ref, p16, ldp, sums);
}

// P of a block of rows over a panel from its stored scores (rows lds floats apart from s, the
// panel's first `vectors` key vectors formed, hidden lanes -inf): e^(S - m_ref[r]) as
// exp_row_pairs forms it (times p_scale[c] where not 0, when given), 0 in the panel's other
// vectors and for a row whose m_ref is -inf (it sees none of the tile), rounded to bf16 at
// p16 + r * ldp, and P's lane-wise sums added at sums + r * W. A row's vectors are read two
// at a time before the pair of them is stored, so p16 may be s's row (the tile's first panel).
template <class Arch>
void p_of_block(int rows, int vectors, const float *s, int64_t lds, const float *m_ref,
                const float *p_scale, uint16_t *p16, int64_t ldp, float *sums) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    constexpr int NRV = attention_blocking<Arch>::nr_vectors;
    for (int r = 0; r < rows; ++r) {
        const bool none = m_ref[r] == -std::numeric_limits<float>::infinity();
        const fbatch shift(m_ref[r]);
        fbatch sum(0.0f);
        for (int v = 0; v < NRV; v += 2) {
            __m512 x[2];
            for (int i = 0; i < 2; ++i) {
                x[i] = _mm512_setzero_ps();
                if (none || v + i >= vectors) continue;
                const fbatch e = exp_for_bf16<Arch>(fbatch::load_aligned(s + r * lds + (v + i) * W) - shift);
                sum += e;
                x[i] = e;
                if (p_scale) x[i] = times_where_nonzero(x[i], p_scale + (v + i) * W);
            }
            _mm512_storeu_si512(p16 + r * ldp + v * W, (__m512i)_mm512_cvtne2ps_pbh(x[1], x[0]));
        }
        (fbatch::load_aligned(sums + r * W) + sum).store_aligned(sums + r * W);
    }
}

// How score_blocks forms a block over bf16-pair panels (panels_at, pairs apart): the
// products of the block's Q pairs (q, rows pairs apart) with panel p, key c's scores times
// col_scale[c].
template <class Arch>
auto pair_scores(const uint32_t *q, int64_t pairs, const uint16_t *panels_at, const float *col_scale) {
    using blk = attention_blocking<Arch>;
    constexpr int nr = panel_keys<Arch>;
    return [=](int64_t r0, int64_t rr, int64_t p, int vectors, float *s_at, float *row_max) {
        score_block_pairs_any<Arch, blk::mr_s, blk::nr_vectors>(
            static_cast<int>(rr), vectors, q + r0 * pairs, pairs, panels_at + p * nr * pairs * 2,
            pairs, col_scale + p * nr, s_at, blk::bc, row_max);
    };
}

// tile_scores (attention.hpp) over bf16-pair panels, key c's scores times col_scale[c]
// (c < panels * nr): causal skipping, the diagonal's partial panels and the hidden lanes of
// cut blocks as there.
template <class Arch>
void tile_scores_pairs(const attention_tile &t, int64_t j0, int64_t cols, const uint32_t *q,
                       int64_t pairs, const uint16_t *panels_at, int64_t panels,
                       const float *col_scale, float *s, float *score_max) {
    attention_detail::score_blocks<Arch, attention_blocking<Arch>::mr_s>(
        t, j0, cols, panels, s, score_max, pair_scores<Arch>(q, pairs, panels_at, col_scale));
}

// Row r's P over the keys j0 .. j0+cols-1 of a tile as bf16, in place of its scores (its bf16
// values at (uint16_t *)s_row, round_up(cols, 32) of them): e^(S - m) (exp_for_bf16) over the
// vectors holding the visible columns, times the dropout factors when t drops, times
// p_scale[c] when given where P is not 0 (a hidden key's P stays 0 whatever its scale), then
// rounded to bf16; 0 in every other column, and everywhere while nothing is visible (m =
// -inf). Returns the lane-wise sum of P before dropout and scales. The writes trail the reads.
// F32Exp: e^(S - m) by the f32 paths' exponential (softmax_exp) instead, where the weights of
// the rows are the f32 tiles' (P rounded to bf16 all the same).
// (The tile loop forms most of P in the score kernel's epilogue instead: tile_with_p below;
// this pass is for the tiles it leaves, the first panel of each and the cut blocks.)
// A pass of its own, not interleaved with the products: on Zen 5 its operations take the
// VDPBF16PS pipes (beside a loop of VDPBF16PS at two a cycle each add, multiply-add, max,
// VREDUCEPS or VSCALEFPS costs half a cycle more, VCVTNEPS2BF16 a whole one), so a vector of
// P costs 5.5-6 cycles wherever it runs; machine/bf16_softmax_ceiling puts the bound with the
// pass apart at 0.86 (D64) / 0.92 (D128) of the VDPBF16PS peak, and at 0.91 / 0.945 with P
// formed among the products. Two vectors at a time, summed in two chains and rounded by one
// VCVTNE2PS2BF16: on Zen 4 a vector of P in a loop of its own takes 8.6 cycles one at a time
// (VCVTNEPS2BF16 1.5 of them, one chain of sums), 7.7 so (no faster on Zen 5).
template <class Arch, bool F32Exp = false>
xsimd::batch<float, Arch> exp_row_pairs(const attention_tile &t, float *s_row, key_range seen,
                                        float m, int64_t r, int64_t j0, int64_t cols,
                                        const float *p_scale) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    uint16_t *p16 = reinterpret_cast<uint16_t *>(s_row);
    const __m256i zeros = _mm256_setzero_si256();
    fbatch sum0(0.0f), sum1(0.0f);
    const key_range held = attention_detail::p_vectors<Arch>(seen, m);
    const int64_t from = held.lo, to = held.hi;
    for (int64_t c = 0; c < from; c += W) _mm256_store_si256(reinterpret_cast<__m256i *>(p16 + c), zeros);
    const fbatch shift(m);
    const uint32_t key = t.dropout_keys ? t.dropout_keys[r] : 0;
    auto span = [&](auto dropout, auto scaled) __attribute__((always_inline)) {  // one loop a case
        // the vector at column c: P in f32 into `sum`, then P times its factors as stored
        auto p_at = [&](int64_t c, fbatch &sum) __attribute__((always_inline)) {
            const fbatch arg = fbatch::load_aligned(s_row + c) - shift;
            fbatch p = F32Exp ? attention_detail::softmax_exp<Arch>(arg) : exp_for_bf16<Arch>(arg);
            sum += p;
            if constexpr (decltype(dropout)::value)
                p = attention_detail::apply_dropout<Arch>(p, key, j0 + c, t.dropout_threshold,
                                                          t.dropout_keep);
            __m512 x = p;
            if constexpr (decltype(scaled)::value) x = times_where_nonzero(x, p_scale + c);
            return x;
        };
        int64_t c = from;
        for (; c + 2 * W <= to; c += 2 * W) {
            const __m512 x0 = p_at(c, sum0), x1 = p_at(c + W, sum1);
            _mm512_storeu_si512(p16 + c, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
        }
        if (c < to)
            _mm256_store_si256(reinterpret_cast<__m256i *>(p16 + c), (__m256i)_mm512_cvtneps_pbh(p_at(c, sum0)));
    };
    using yes = std::true_type;
    using no = std::false_type;
    if (t.dropout_keys) p_scale ? span(yes{}, yes{}) : span(yes{}, no{});
    else p_scale ? span(no{}, yes{}) : span(no{}, no{});
    const int64_t p_cols = attention_detail::round_up(cols, 32);
    for (int64_t c = to; c < p_cols; c += W) _mm256_store_si256(reinterpret_cast<__m256i *>(p16 + c), zeros);
    return sum0 + sum1;
}

// Words of V's pair rows a column chunk holds (pack_v_pairs): the nv vectors of O that P V's
// block keeps in registers, so that its loop over pairs of keys reads one stream, 256 contiguous
// bytes a pair, as the score kernel reads K's panels. Against whole pair rows (dv_pad words at
// a stride of dv_pad + 16 when that is an even number of lines), Zen 5, H8 L2048, 1 thread,
// minima of 8 alternated rounds: bf16 D128 0.977x the time, D64 0.989x, over an I8 cache 0.975x.
template <class Arch>
constexpr int64_t v_chunk_words = int64_t(attention_blocking<Arch>::nv) * lanes<Arch>;

// The V pair rows of a tile's keys, as pack_v_pairs lays them out in chunks of
// v_chunk_words: `rows` pair rows a chunk from base, of ld words in all, the tile's pair row 0
// being row `first` of them.
template <class Arch>
struct v_pair_rows {
    static constexpr int64_t chunk = v_chunk_words<Arch>;
    const uint16_t *base;
    int64_t rows, first, ld;
    // The chunk holding word c0 (a multiple of `chunk`): the tile's pair row 0 in it, and the
    // bf16 elements between its rows.
    struct rows_of_chunk {
        const uint16_t *at;
        int64_t ld;
    };
    rows_of_chunk from(int64_t c0) const {
        const int64_t width = ld - c0 < chunk ? ld - c0 : chunk;
        return {base + 2 * (c0 * rows + first * width), 2 * width};
    }
};
// The V pair rows for keys j0 .. j0+cols-1 of a tile, dv_pad words each: the driver's, packed
// once for the whole head, or packed here into v_buf (bc * dv_pad floats); codes: t.v's codes
// (kv_rows::codes).
template <class Arch>
v_pair_rows<Arch> tile_v_pairs(const attention_tile &t, bool codes, int64_t j0, int64_t cols,
                               int64_t dv_pad, float *v_buf) {
    if (t.v_pairs) return {t.v_pairs, t.v_pairs_rows, j0 / 2, dv_pad};
    auto *packed = reinterpret_cast<uint16_t *>(v_buf);
    pack_v_pairs<Arch>(codes ? t.v.codes() : t.v, j0, cols, t.dim_v, dv_pad, v_chunk_words<Arch>, packed);
    return {packed, (cols + 1) / 2, 0, dv_pad};
}

// o_row[0 .. dv_pad) += p_j V_j for the keys j = lo .. hi-1 of a tile, in that order: p_j
// row's bf16 P (p16[j]) widened, V_j key j's half of each 32-bit word of its pair row j / 2
// of vp (the low half for an even key, the high for an odd one) widened exactly, one fused
// multiply-add an element; the sums stay in registers across the keys, a chunk of o_row at a
// time. The keys a row takes alone (edge keys beside the pairs a row block shares), with the
// values the pairs hold, whatever the format they were packed from; the other key of a pair
// is not read.
template <class Arch>
inline void add_keys_pairs(const uint16_t *p16, const v_pair_rows<Arch> &vp, int64_t lo, int64_t hi,
                           int64_t dv_pad, float *o_row) {
    constexpr int W = lanes<Arch>;
    constexpr int N = static_cast<int>(v_chunk_words<Arch> / W);
    if (hi <= lo) return;
    for (int64_t c0 = 0; c0 < dv_pad; c0 += N * W) {
        const int n = static_cast<int>((dv_pad - c0) / W < N ? (dv_pad - c0) / W : N);
        const auto chunk = vp.from(c0);
        __m512 acc[N];
#pragma GCC unroll 8
        for (int i = 0; i < N; ++i)
            if (i < n) acc[i] = _mm512_load_ps(o_row + c0 + i * W);
        for (int64_t j = lo; j < hi; ++j) {
            const __m512 pv = _mm512_set1_ps(convert::bf16_to_f32(p16[j]));
            const uint32_t *words = reinterpret_cast<const uint32_t *>(chunk.at + (j / 2) * chunk.ld);
            auto add = [&](auto half) __attribute__((always_inline)) {  // half: the key's bf16 widened
#pragma GCC unroll 8
                for (int i = 0; i < N; ++i)
                    if (i < n) acc[i] = _mm512_fmadd_ps(pv, half(_mm512_loadu_si512(words + i * W)), acc[i]);
            };
            if (j % 2 != 0) add([](__m512i w) { return decode_widen::bf16_odd<Arch>(w); });
            else add([](__m512i w) { return decode_widen::bf16_even<Arch>(w); });
        }
#pragma GCC unroll 8
        for (int i = 0; i < N; ++i)
            if (i < n) _mm512_store_ps(o_row + c0 + i * W, acc[i]);
    }
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

// O = O * rescale + P V for the keys j0 .. j0+cols-1 of a tile, with P in bf16 (exp_row_pairs:
// row r's values at (uint16_t *)(s + r * bc)) and V from bf16 pair rows; codes: V is t.v's
// codes (each key's scale is in P). The keys a row block shares go in pairs; a key hidden
// from a row is never read for it, so an odd last shared key and each row's further keys near
// the causal diagonal are added one by one from their halves of the pair rows, with the same
// bf16 P.
template <class Arch>
void pv_tile_pairs(const attention_tile &t, bool codes, int64_t j0, int64_t cols, float *s,
                   float *o, int64_t dv_pad, const float *rescale, float *v_buf) {
    using blk = attention_blocking<Arch>;
    constexpr int W = lanes<Arch>;
    const uint32_t *p_words = reinterpret_cast<const uint32_t *>(s);
    const int64_t ldp = blk::bc;  // P rows stay bc floats (32-bit words) apart
    const v_pair_rows<Arch> vp = tile_v_pairs<Arch>(t, codes, j0, cols, dv_pad, v_buf);
    static_assert(v_chunk_words<Arch> == blk::nv * W, "a block's vectors are a chunk of V");
    // the pairs of keys every row of a block sees (both keys of a pair in its shared range)
    const int64_t vectors = dv_pad / W;
    for (int64_t c0 = 0; c0 < vectors; c0 += blk::nv) {
        const int nvec = static_cast<int>(vectors - c0 < blk::nv ? vectors - c0 : blk::nv);
        const auto chunk = vp.from(c0 * W);
        for (int64_t r0 = 0; r0 < t.rows; r0 += blk::mr_o) {
            const int rr = static_cast<int>(t.rows - r0 < blk::mr_o ? t.rows - r0 : blk::mr_o);
            const key_range shared = attention_detail::shared_columns(t, r0, r0 + rr, j0, cols);
            const int64_t first_pair = (shared.lo + 1) / 2, end_pair = shared.hi / 2;
            const int64_t pairs = end_pair > first_pair ? end_pair - first_pair : 0;
            pv_block_pairs_any<Arch, blk::mr_o, blk::nv>(
                rr, nvec, p_words + r0 * ldp + first_pair, ldp, pairs,
                chunk.at + first_pair * chunk.ld, chunk.ld, o + r0 * dv_pad + c0 * W, dv_pad,
                rescale + r0);
        }
    }
    // each row's keys outside its block's shared pairs, one at a time from their pair rows
    for (int64_t r0 = 0; r0 < t.rows; r0 += blk::mr_o) {
        const int64_t rr = t.rows - r0 < blk::mr_o ? t.rows - r0 : blk::mr_o;
        const key_range shared = attention_detail::shared_columns(t, r0, r0 + rr, j0, cols);
        int64_t paired_lo = (shared.lo + 1) / 2 * 2, paired_hi = shared.hi / 2 * 2;
        if (paired_hi <= paired_lo) paired_lo = paired_hi = 0;
        if (paired_lo == 0 && paired_hi == cols) continue;  // every key of the tile went in pairs
        for (int64_t r = r0; r < r0 + rr; ++r) {
            const key_range own = attention_detail::tile_columns(t, r, j0, cols);
            const uint16_t *p16 = reinterpret_cast<const uint16_t *>(s + r * blk::bc);
            // the keys before the paired range and after it, not a pass over the paired ones
            add_keys_pairs<Arch>(p16, vp, own.lo, own.hi < paired_lo ? own.hi : paired_lo, dv_pad,
                                 o + r * dv_pad);
            add_keys_pairs<Arch>(p16, vp, own.lo > paired_hi ? own.lo : paired_hi, own.hi, dv_pad,
                                 o + r * dv_pad);
        }
    }
}

// Key c's factor of a tile's keys j0 + c, c < n: K's or V's scale of the row times `times`
// (0 past the keys that may be read), the scales found once a tile instead of once a score.
inline void key_scales(const kv_rows &x, int64_t j0, int64_t n, int64_t len_kv, float times,
                       float *out) {
    for (int64_t c = 0; c < n; ++c) out[c] = j0 + c < len_kv ? times * x.scale_row(j0 + c)[0] : 0.0f;
}

// The factor of the scores of the tile's keys j0 + c, c < n: the softmax scale, times the
// key's K scale for a quantized cache's codes.
template <bool Codes>
inline void column_scales(const attention_tile &t, int64_t j0, int64_t n, float *out) {
    if (Codes) key_scales(t.k, j0, n, t.len_kv, t.scale, out);
    else
        for (int64_t c = 0; c < n; ++c) out[c] = t.scale;
}

// V's scale of the tile's keys j0 + c for c < cols rounded up to a group of 32 (0 past cols):
// the factors folded into P for a quantized cache's codes (bc + 32 floats at most).
inline void value_scales(const attention_tile &t, int64_t j0, int64_t cols, float *out) {
    key_scales(t.v, j0, (cols + 31) / 32 * 32, j0 + cols, 1.0f, out);
}

// A tile's per-key factors: col_scale for the scores of `panels` panels (column_scales) and,
// for a quantized cache's codes, V's scales into key_factors (value_scales) for its P.
template <class Arch, bool Codes>
inline void tile_factors(const attention_tile &t, int64_t j0, int64_t cols, int64_t panels,
                         float *col_scale, float *key_factors) {
    column_scales<Codes>(t, j0, panels * panel_keys<Arch>, col_scale);
    if (Codes) value_scales(t, j0, cols, key_factors);
}

// The K pair panels of the tile's keys from j0 on: the head's (t.k_pairs), or `panels` of them
// packed now into k_buf (of K's codes for a quantized cache's codes).
template <class Arch, bool Codes>
const uint16_t *tile_k_pairs(const attention_tile &t, int64_t j0, int64_t panels, float *k_buf) {
    constexpr int nr = panel_keys<Arch>;
    if (t.k_pairs) return t.k_pairs + (j0 / nr) * nr * pairs_of(t.dim_qk) * 2;
    uint16_t *buf = reinterpret_cast<uint16_t *>(k_buf);
    pack_k_pairs<Arch>(Codes ? t.k.codes() : t.k, j0, t.len_kv, t.dim_qk, panels, buf);
    return buf;
}

// The scores policy of the tile loop (attention_detail::f32_scores is the f32 one): the q
// region holds the tile's Q rows as bf16 pairs [rows][pairs], unscaled; K comes from the
// head's bf16 panels (t.k_pairs) or is packed now into the k region; P is formed in bf16
// (exp_row_pairs, with exp_for_bf16). Codes: K and V are a quantized cache with a scale a
// row, paired as their codes (kv_rows::codes), each key's K scale applied to its scores with
// the softmax scale and its V scale (left by tile in key_factors) folded into P.
template <class Arch, bool Codes = false>
struct bf16_scores {
    using fbatch = xsimd::batch<float, Arch>;
    static void load_q(const attention_tile &t, float *q_region) {
        uint32_t *q = reinterpret_cast<uint32_t *>(q_region);
        const int64_t pairs = pairs_of(t.dim_qk);
        for (int64_t r = 0; r < t.rows; ++r) {
            const void *row = element_at(t.q, t.q_type, r * t.q_ld);
            row_pairs<Arch>(row, t.q_type, t.dim_qk, q + r * pairs);
        }
    }
    static bool tile(const attention_tile &t, const float *q_region, int64_t j0, int64_t cols,
                     float *s, float *k_buf, float *score_max, float *key_factors) {
        using blk = attention_blocking<Arch>;
        constexpr int nr = panel_keys<Arch>;
        const int64_t panels = (cols + nr - 1) / nr, pairs = pairs_of(t.dim_qk);
        const uint16_t *k_at = tile_k_pairs<Arch, Codes>(t, j0, panels, k_buf);
        alignas(64) float col_scale[blk::bc];
        tile_factors<Arch, Codes>(t, j0, cols, panels, col_scale, key_factors);
        tile_scores_pairs<Arch>(t, j0, cols, reinterpret_cast<const uint32_t *>(q_region), pairs,
                                k_at, panels, col_scale, s, score_max);
        return true;
    }
    // S and P of a tile at once, where the scores are plain (no softcap, mask or ALiBi) and
    // nothing drops (codes: each key's scales as tile and exp_row apply them). Each row's
    // offset m_ref (its new running max) is known before the tile's panels are formed: past
    // the key tile where the rows start, when every row has a running max, that max m (the
    // first panel is then formed as the others); else max(m, the row's max over the tile's
    // first panel), which is formed first. Then P = e^(S - m_ref) for every key, panel by
    // panel as score_blocks forms S: in the score kernel's epilogue (score_p_block_pairs) for
    // a (row block, panel) every row of which sees the panel whole, from the scores stored
    // and hidden (hide_block) for a cut one (p_of_block, as for a first panel formed first),
    // and 0 for one hidden from all its rows. A row with a lane of P's sums above
    // p_sum_limit (so some P may be; P up to 2^20 is as well rounded as below 1, and l and O stay
    // far from overflow; a score past m_ref + 88 gives P = inf), or that sees keys of the tile
    // but none before them nor in its first panel, turns the tile back to tile and exp_row,
    // which start over: false, with nothing of m, m_prev and the sums changed. On true: m_prev
    // = m, m = m_ref and tile_lanes[r] P's lane-wise sums, for every row, as exp_row would have
    // left them with the max m_ref. The running max so stays near each row's max, not always at
    // it: out = O / l and lse = m + log l are the same quantities either way. (A NaN score gives
    // NaN P, sums and output, as there.)
    static constexpr float p_sum_limit = 0x1p20f;
    static bool tile_with_p(const attention_tile &t, const float *q_region, int64_t j0,
                            int64_t cols, float *s, float *k_buf, float *score_max, float *m,
                            float *m_prev, float *tile_lanes, float *key_factors) {
        using blk = attention_blocking<Arch>;
        constexpr int nr = panel_keys<Arch>;
        constexpr int W = lanes<Arch>;
        if (t.dropout_keys || t.mask || attention_detail::has_score_terms(t)) return false;
        const int64_t panels = (cols + nr - 1) / nr, pairs = pairs_of(t.dim_qk);
        const uint32_t *q = reinterpret_cast<const uint32_t *>(q_region);
        const uint16_t *k_at = tile_k_pairs<Arch, Codes>(t, j0, panels, k_buf);
        const float neg_inf = -std::numeric_limits<float>::infinity();
        alignas(64) float col_scale[blk::bc], col_scale_log2e[blk::bc];
        tile_factors<Arch, Codes>(t, j0, cols, panels, col_scale, key_factors);
        const float *p_scale = Codes ? key_factors : nullptr;
        // panel p's V scales folded into P (codes), or none
        const auto p_scale_of = [&](int64_t p) { return Codes ? p_scale + p * nr : nullptr; };
        alignas(64) float m_ref[blk::br];
        // past the first key tile, every row's running max (when each has one) is the offset
        bool known = j0 > t.key_begin;
        for (int64_t r = 0; known && r < t.rows; ++r) {
            known = m[r] > neg_inf && m[r] < -neg_inf;
            m_ref[r] = m[r];
        }
        const int64_t first_fused = known ? 0 : 1;  // the first panel formed in the epilogue
        for (int64_t c = first_fused * nr; c < panels * nr; ++c) col_scale_log2e[c] = col_scale[c] * 1.44269504088896341f;
        for (int64_t r = 0; r < t.rows; ++r) {
            fbatch(neg_inf).store_aligned(score_max + r * W);
            fbatch(0.0f).store_aligned(tile_lanes + r * W);
        }
        auto form = pair_scores<Arch>(q, pairs, k_at, col_scale);
        for (int64_t p = 0; p < panels; ++p) {
            attention_detail::panel_blocks<Arch, blk::mr_s>(t, j0, cols, p, [&](int64_t r0, int rr, int vectors, bool whole) {
                uint16_t *p_at = reinterpret_cast<uint16_t *>(s + r0 * blk::bc) + p * nr;
                if (vectors == 0) {  // hidden from every row of the block
                    for (int i = 0; i < rr; ++i)
                        std::memset(p_at + i * 2 * blk::bc, 0, sizeof(uint16_t) * nr);
                } else if (p >= first_fused && whole && vectors == blk::nr_vectors) {
                    score_p_block_pairs_any<Arch, blk::mr_s, blk::nr_vectors, Codes>(
                        rr, q + r0 * pairs, pairs, k_at + p * nr * pairs * 2, pairs,
                        col_scale_log2e + p * nr, p_scale_of(p), m_ref + r0,
                        p_at, 2 * blk::bc, tile_lanes + r0 * W);
                } else {
                    attention_detail::score_block<Arch, blk::mr_s>(t, j0, cols, p, r0, rr, vectors,
                                                                   whole, s, score_max, form);
                    if (p >= first_fused)
                        p_of_block<Arch>(rr, vectors, s + r0 * blk::bc + p * nr, blk::bc, m_ref + r0,
                                         p_scale_of(p), p_at, 2 * blk::bc,
                                         tile_lanes + r0 * W);
                }
            });
            if (p >= first_fused) continue;
            for (int64_t r = 0; r < t.rows; ++r) {  // the offsets, then the first panel's P
                m_ref[r] = attention_detail::running_max<Arch>(
                    m[r], reduce_max<Arch>(fbatch::load_aligned(score_max + r * W)));
                if (m_ref[r] != m_ref[r] || m_ref[r] == -neg_inf) return false;
                if (m_ref[r] == neg_inf) {
                    const key_range seen = attention_detail::tile_columns(t, r, j0, cols);
                    if (seen.hi > seen.lo) return false;  // nothing to start from
                }
            }
            attention_detail::panel_blocks<Arch, blk::mr_s>(t, j0, cols, 0, [&](int64_t r0, int rr, int vectors, bool) {
                if (vectors > 0)
                    p_of_block<Arch>(rr, vectors, s + r0 * blk::bc, blk::bc, m_ref + r0, p_scale_of(0),
                                     reinterpret_cast<uint16_t *>(s + r0 * blk::bc), 2 * blk::bc,
                                     tile_lanes + r0 * W);
            });
        }
        for (int64_t r = 0; r < t.rows; ++r)
            if (xsimd::any(fbatch::load_aligned(tile_lanes + r * W) > fbatch(p_sum_limit))) return false;
        for (int64_t r = 0; r < t.rows; ++r) {
            m_prev[r] = m[r];
            m[r] = m_ref[r];
        }
        return true;
    }
    static fbatch exp(const fbatch &x) { return exp_for_bf16<Arch>(x); }
    static fbatch exp_row(const attention_tile &t, float *s_row, key_range seen, float m,
                          int64_t r, int64_t j0, int64_t cols, const float *key_factors) {
        return exp_row_pairs<Arch>(t, s_row, seen, m, r, j0, cols, Codes ? key_factors : nullptr);
    }
    static void pv(const attention_tile &t, int64_t j0, int64_t cols, float *s, float *o,
                   int64_t dv_pad, const float *rescale, float *v_buf) {
        pv_tile_pairs<Arch>(t, Codes, j0, cols, s, o, dv_pad, rescale, v_buf);
    }
};

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

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
