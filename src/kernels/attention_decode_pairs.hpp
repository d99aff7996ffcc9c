// The decode kernel (attention_decode.hpp's contract and blocks) on bf16 pairs, for a bf16 cache
// in calls whose products may be bf16 (bf16 queries, or ATTN_FPMATH_BF16): K and V read in
// place, never widened, with VDPBF16PS doing two products an instruction lane:
//   S[r, c] = scale (q_r . k_c)   q_r in bf16 pairs (bf16_scores::load_q), a K row's pairs
//                                 straight from memory, KEYS keys x RP rows of lane-wise sums
//                                 at a time summed across lanes at once (transpose_sum_inlined)
//   P = exp_for_bf16(S - m'), rounded to bf16 (exp_row_pairs: the bf16-pair tiles' P)
//   O += P V                      over pairs of keys: the two keys' V rows interleaved by
//                                 VPUNPCK{L,H}WD into (v_c[d], v_c+1[d]) words, times the
//                                 broadcast (p_c, p_c+1); a key without its partner (the last
//                                 of an odd count) paired with zeros
// O stays in the interleaved order (each 32 dims as the two unpacks leave them, rows ldo =
// dim_v rounded up to 32 apart) until the end, where it is put back in order once.
// At four query heads a KV head (D128), a key takes 16 VDPBF16PS for S and 4 unpacks and 8
// VDPBF16PS for P V, against the f32 passes' 64 multiply-adds and 16 widening operations.
// Rows that do not all see the same keys (windows, causal limits of a sequence's rows) take the
// same passes one row at a time, each over its own keys. The weights of a tile are the bf16-pair
// tiles' (attention_bf16.hpp), which find q in the same pairs.
// Where the products must be exact (f32 or f16 queries), the same tile with ExactScores takes S
// from the decode entry's score pass (f32 q, K widened in registers) and keeps P V on pairs, V
// being bf16 (the decode_pv_pairs entry; the decode entry's weights).
// Needs -mavx512bf16: included only by src/kernels/arch/avx512_bf16.cpp.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <cstring>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "kernels/attention_bf16.hpp"
#include "kernels/attention_decode.hpp"
#include "kernels/attention_entries.hpp"
#include "kernels/decode_rows.hpp"
#include "kernels/vec_math.hpp"

ATTN_KERNELS_BEGIN
namespace attention_decode_pairs_detail {

using attention_decode_detail::row_prefetch;
using attention_decode_detail::with_rows;
using bf16_walk = attention_decode_detail::row_walk<xsimd::avx512f, core::bf16_format>;
using bf16_reader = row_reader<xsimd::avx512f, core::bf16_format>;
using fbatch = xsimd::batch<float, xsimd::avx512f>;

// 32 bf16 elements of a row from element d: whole (Tail false) or the first ones `mask` keeps,
// zeros in the others (nothing past them is read).
template <bool Tail>
ATTN_ALWAYS_INLINE __m512i span32(const uint16_t *row, int64_t d, __mmask32 mask) {
    if constexpr (Tail) return _mm512_maskz_loadu_epi16(mask, row + d);
    else return _mm512_loadu_si512(row + d);
}

// The mask of the first n (< 32) elements of a span.
inline __mmask32 first_elements(int64_t n) { return __mmask32((uint64_t(1) << n) - 1); }

// acc[r KEYS + k] += the lane-wise pair products of q row r and key k over the spans of 32
// elements from `from` to `to` (Tail: masked).
template <int RP, int KEYS, bool Tail>
ATTN_ALWAYS_INLINE void score_spans(const uint16_t *const *q, const bf16_reader *key, int64_t from,
                                    int64_t to, __mmask32 mask, fbatch (&acc)[RP * KEYS]) {
    for (int64_t d = from; d < to; d += 32) {
        __m512bh qv[RP];
#pragma GCC unroll 4
        for (int r = 0; r < RP; ++r) qv[r] = (__m512bh)span32<Tail>(q[r], d, mask);
#pragma GCC unroll 16
        for (int k = 0; k < KEYS; ++k) {
            const __m512bh kv = (__m512bh)span32<Tail>(key[k].p, d, mask);
#pragma GCC unroll 4
            for (int r = 0; r < RP; ++r) acc[r * KEYS + k] = _mm512_dpbf16_ps(acc[r * KEYS + k], qv[r], kv);
        }
    }
}

// s[r * lds + c] = scale (q_r . k_{j0 + c}) for r < R, c in [lo, hi), q row r's bf16 at q[r].
template <int R>
void pair_scores(const attention_tile &t, const uint16_t *const *qr, int64_t lo, int64_t hi,
                 int64_t j0, float *s, int64_t lds) {
    using arch = xsimd::avx512f;
    constexpr int RP = R == 3 ? 4 : R;  // rows padded to a power of two (a copy of row 0)
    constexpr int KEYS = 16 / RP;
    const int64_t dim = t.dim_qk, whole = dim / 32 * 32;
    const __mmask32 tail = first_elements(dim - whole);
    const uint16_t *q[RP];
    for (int r = 0; r < RP; ++r) q[r] = qr[r < R ? r : 0];
    const fbatch scale(t.scale);
    const row_prefetch ahead(t, dim, t.dim_v, j0, R);
    const bf16_walk keys(t.k, j0);
    bf16_reader key[KEYS];
    keys.prime(KEYS, key);
    int64_t c = lo;
    for (; c + KEYS <= hi; c += KEYS) {
        ahead.fetch_scores<arch>(j0, c, KEYS, hi);
        keys.readers(c, KEYS, key);
        fbatch acc[RP * KEYS];
#pragma GCC unroll 16
        for (int i = 0; i < RP * KEYS; ++i) acc[i] = fbatch(0.0f);
        score_spans<RP, KEYS, false>(q, key, 0, whole, 0, acc);
        if (whole < dim) score_spans<RP, KEYS, true>(q, key, whole, whole + 32, tail, acc);
        alignas(64) float sum[16];
        (transpose_sum_inlined<arch>(acc) * scale).store_aligned(sum);
        for (int r = 0; r < R; ++r) std::memcpy(s + r * lds + c, sum + r * KEYS, sizeof(float) * KEYS);
    }
    for (; c < hi; ++c) {  // the last few keys one at a time
        bf16_reader one[1];
        keys.prime(1, one);
        keys.readers(c, 1, one);
        for (int r = 0; r < R; ++r) {
            fbatch acc[1] = {fbatch(0.0f)};
            score_spans<1, 1, false>(q + r, one, 0, whole, 0, acc);
            if (whole < dim) score_spans<1, 1, true>(q + r, one, whole, whole + 32, tail, acc);
            s[r * lds + c] = _mm512_reduce_add_ps(acc[0]) * t.scale;
        }
    }
}

// acc[r][2 i], acc[r][2 i + 1] += P V for V span i of NS spans from element d (Tail: one masked
// span) and the keys of one pair: rows a and b (Alone: a alone, paired with zeros), p[r] the
// row's (p_a, p_b) bf16 words, broadcast.
template <int R, int NS, bool Tail, bool Alone = false>
ATTN_ALWAYS_INLINE void pv_pair(const uint16_t *a, const uint16_t *b, const __m512i (&p)[R], int64_t d,
                                __mmask32 mask, __m512 (&acc)[R][2 * NS]) {
#pragma GCC unroll 4
    for (int i = 0; i < NS; ++i) {
        const __m512i x = span32<Tail>(a, d + 32 * i, mask);
        const __m512i y = Alone ? _mm512_setzero_si512() : span32<Tail>(b, d + 32 * i, mask);
        const __m512bh lo = (__m512bh)_mm512_unpacklo_epi16(x, y), hi = (__m512bh)_mm512_unpackhi_epi16(x, y);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            acc[r][2 * i] = _mm512_dpbf16_ps(acc[r][2 * i], lo, (__m512bh)p[r]);
            acc[r][2 * i + 1] = _mm512_dpbf16_ps(acc[r][2 * i + 1], hi, (__m512bh)p[r]);
        }
    }
}

// o[r] (interleaved, ldo apart) spans [d, d + 32 NS) += sum over the keys [c0, c1) of the
// block (V rows val[c - c0]) of p_r[c] v_c, P in bf16 at p16 + r * ldp16: pairs of keys from
// c0 on (P's two bf16 values read as one word), the last key alone when they are odd.
template <int R, int NS, bool Tail>
ATTN_ALWAYS_INLINE void pv_spans(const bf16_reader *val, int64_t c0, int64_t c1, const uint16_t *p16,
                                 int64_t ldp16, int64_t d, __mmask32 mask, float *o, int64_t ldo,
                                 const attention_decode_detail::v_prefetch &ahead) {
    __m512 acc[R][2 * NS];
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int i = 0; i < 2 * NS; ++i) acc[r][i] = _mm512_loadu_ps(o + r * ldo + d + 16 * i);
    __m512i p[R];
    int64_t c = c0;
    for (; c + 2 <= c1; c += 2) {
        ahead.fetch(c - c0);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            uint32_t w;
            std::memcpy(&w, p16 + r * ldp16 + c, sizeof w);
            p[r] = _mm512_set1_epi32(int(w));
        }
        pv_pair<R, NS, Tail>(val[c - c0].p, val[c + 1 - c0].p, p, d, mask, acc);
    }
    if (c < c1) {  // the last key alone: (p_c, 0)
        for (int r = 0; r < R; ++r) p[r] = _mm512_set1_epi32(p16[r * ldp16 + c]);
        pv_pair<R, NS, Tail, true>(val[c - c0].p, nullptr, p, d, mask, acc);
    }
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int i = 0; i < 2 * NS; ++i) _mm512_storeu_ps(o + r * ldo + d + 16 * i, acc[r][i]);
}

// o[r] = o[r] rescale[r] + sum_{c in [lo, hi)} p_r[c] v_{j0 + c} for r < R (o interleaved, rows
// ldo apart; P in bf16 at (uint16_t *)(p + r * ldp)), in sub-blocks of decode_pv_keys keys whose
// V rows stay in L1 while the spans of dim_v go by, NS at a time in registers.
template <int R>
void pair_pv(const attention_tile &t, int64_t lo, int64_t hi, int64_t j0, const float *p,
             int64_t ldp, float *o, int64_t ldo, const float *rescale) {
    // spans of V in registers: 2 NS accumulators a row, at most 16 for the rows (3 rows counted
    // as 4), and no more than a D128 row's 4
    constexpr int accumulators = 16, per_row = accumulators / (2 * (R == 3 ? 4 : R));
    constexpr int NS = per_row < 4 ? per_row : 4;
    constexpr int64_t keys = attention_decode_detail::decode_pv_keys;
    const int64_t dim_v = t.dim_v, whole = dim_v / 32 * 32;
    const __mmask32 tail = first_elements(dim_v - whole);
    for (int r = 0; r < R; ++r) {
        const __m512 f = _mm512_set1_ps(rescale[r]);
        float *row = o + r * ldo;
        for (int64_t d = 0; d < ldo; d += 16) _mm512_storeu_ps(row + d, _mm512_mul_ps(f, _mm512_loadu_ps(row + d)));
    }
    const uint16_t *p16 = reinterpret_cast<const uint16_t *>(p);
    const int64_t ldp16 = ldp * int64_t(sizeof(float) / sizeof(uint16_t));  // P rows, in bf16 values
    const row_prefetch ahead(t, t.dim_qk, dim_v, j0, R);
    const bf16_walk values(t.v, j0);
    bf16_reader val[keys];
    values.prime(keys, val);
    for (int64_t k0 = lo; k0 < hi; k0 += keys) {
        const int64_t k1 = k0 + keys < hi ? k0 + keys : hi;
        values.readers(k0, k1 - k0, val);
        // V rows ahead, two a pair of keys, in the first pass over the sub-block's keys
        const attention_decode_detail::v_prefetch next = ahead.v_ahead(k0, 2 * ahead.v_bytes), none{};
        int64_t d = 0;
        for (; d + 32 * NS <= whole; d += 32 * NS)
            pv_spans<R, NS, false>(val, k0, k1, p16, ldp16, d, 0, o, ldo, d ? none : next);
        for (; d < whole; d += 32) pv_spans<R, 1, false>(val, k0, k1, p16, ldp16, d, 0, o, ldo, d ? none : next);
        if (whole < dim_v) pv_spans<R, 1, true>(val, k0, k1, p16, ldp16, whole, tail, o, ldo, d ? none : next);
    }
}

// Row r of o (ldo) from the interleaved order back to dims in order, each 32 floats in place:
// the unpacks' words 4 L + j (low) and 4 L + j (high) of 128-bit lane L are dims 8 L + j and
// 8 L + 4 + j.
inline void o_in_order(float *o, int64_t rows, int64_t ldo) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t d = 0; d < ldo; d += 32) {
            const __m512 lo = _mm512_loadu_ps(o + r * ldo + d), hi = _mm512_loadu_ps(o + r * ldo + d + 16);
            const __m512 a = _mm512_shuffle_f32x4(lo, hi, 0x44), b = _mm512_shuffle_f32x4(lo, hi, 0xEE);
            _mm512_storeu_ps(o + r * ldo + d, _mm512_shuffle_f32x4(a, a, 0xD8));
            _mm512_storeu_ps(o + r * ldo + d + 16, _mm512_shuffle_f32x4(b, b, 0xD8));
        }
}

}  // namespace attention_decode_pairs_detail

// The tile (attention_args.hpp's contract) over a bf16 cache, products on bf16 pairs; with
// ExactScores, S of f32 queries as the decode entry forms it (q scaled in f32, K widened in
// registers, exact products: attention_decode_quantized.hpp's score pass), P (by the f32
// exponential, for the f32 weights tile) rounded to bf16 and P V on pairs all the same, as
// attn.h allows where V is bf16.
template <class Arch, bool ExactScores>
void attention_decode_tile_pairs_of(const attention_tile &t) {
    using namespace attention_decode_pairs_detail;
    using attention_decode_detail::decode_block_keys;
    constexpr int64_t B = decode_block_keys;
    static_assert(attention_decode_detail::scores_fit<Arch>(), "decode scores must fit the tile's scores region");
    const attention_detail::scratch_layout<Arch> at(t.dim_qk, t.dim_v);
    float *qs = t.scratch + at.q_tile;  // q rows (bf16 pairs, or scaled f32) where the weights tile finds them
    float *s = t.scratch + at.scores;   // row r of the block's scores (then P) at s + r * B
    float *o = t.scratch + at.o_tile;   // interleaved, rows ldo apart
    float *m = t.scratch + at.row_max;
    float *l = t.scratch + at.row_sum;
    float *rescale = t.scratch + at.rescale;
    const int64_t rows = t.rows, ldo = attention_detail::round_up(t.dim_v, 32);

    const uint16_t *q[attention_direct_rows];
    if constexpr (ExactScores) {
        attention_detail::load_scaled_q<Arch>(t, qs);  // row r at qs + r * dim_qk
    } else {
        attention_bf16_detail::bf16_scores<Arch>::load_q(t, qs);  // row r at pair word r * pairs
        for (int64_t r = 0; r < rows; ++r)
            q[r] = reinterpret_cast<const uint16_t *>(reinterpret_cast<const uint32_t *>(qs) +
                                                      r * attention_bf16_detail::pairs_of(t.dim_qk));
    }
    attention_decode_detail::start_rows<Arch>(t, o, ldo, m, l);
    const key_range any = attention_decode_detail::keys_some_row_sees(t);
    for (int64_t j0 = any.lo; j0 < any.hi; j0 += B) {
        const int64_t cols = any.hi - j0 < B ? any.hi - j0 : B;
        key_range seen[attention_direct_rows];
        for (int64_t r = 0; r < rows; ++r) seen[r] = attention_detail::tile_columns(t, r, j0, cols);
        const int64_t lo = seen[0].lo, hi = seen[0].hi;
        const bool shared = attention_decode_detail::rows_share(rows, seen, lo, hi);
        if constexpr (ExactScores) {
            using attention_decode_detail::scores_in_registers;
            if (shared)
                scores_in_registers<Arch, core::bf16_format>(t, rows, qs, lo, hi, j0, s, B);
            else
                for (int64_t r = 0; r < rows; ++r)
                    scores_in_registers<Arch, core::bf16_format>(t, 1, qs + r * t.dim_qk, seen[r].lo,
                                                                 seen[r].hi, j0, s + r * B, B);
        } else {
            if (shared)
                with_rows(rows, [&](auto r) { pair_scores<decltype(r)::value>(t, q, lo, hi, j0, s, B); });
            else
                for (int64_t r = 0; r < rows; ++r)
                    pair_scores<1>(t, q + r, seen[r].lo, seen[r].hi, j0, s + r * B, B);
        }
        attention_decode_detail::block_softmax<Arch>(
            t, s, B, seen, j0, cols, m, l, rescale, [&](float *s_row, int64_t r, float m_new) {
                return attention_bf16_detail::exp_row_pairs<Arch, ExactScores>(t, s_row, seen[r], m_new,
                                                                              r, j0, cols, nullptr);
            });
        if (shared)
            with_rows(rows, [&](auto r) { pair_pv<decltype(r)::value>(t, lo, hi, j0, s, B, o, ldo, rescale); });
        else
            for (int64_t r = 0; r < rows; ++r)
                pair_pv<1>(t, seen[r].lo, seen[r].hi, j0, s + r * B, B, o + r * ldo, ldo, rescale + r);
    }
    o_in_order(o, rows, ldo);
    // out = O / l, lse = m + log l (l is 0 for a row that saw no key or only -inf scores)
    attention_detail::write_rows<Arch>(t, o, ldo, m, l);
}

// The entry (attention_impl.hpp): the decode entry's sequences over a bf16 cache, in calls that
// allow bf16 products, where several rows share a KV head (one row reads each K and V element
// once, bound by memory: the decode entry, exact, reads it at the same speed), tried before it.
template <class Arch>
attention_impl attention_decode_pairs_entry() {
    attention_impl e = attention_decode_entry<Arch>();
    e.name = "decode_pairs";
    e.pair_products = true;
    e.bf16_kv_only = true;
    e.min_shared_rows = 2;
    e.forward_tile = &attention_decode_tile_pairs_of<Arch, false>;
    e.weights_tile = &attention_weights_tile_bf16<Arch>;
    return e;
}

// The entry of the same sequences where the products must be exact in f32 (f32 or f16
// queries): S as the decode entry forms it, P rounded to bf16 and P V on pairs (V is bf16), at
// four query heads a KV head 8 VDPBF16PS and 4 unpacks a key for P V against 32 multiply-adds
// and 8 widening operations; the weights are the decode entry's. Tried after decode_pairs.
template <class Arch>
attention_impl attention_decode_pv_pairs_entry() {
    attention_impl e = attention_decode_entry<Arch>();
    e.name = "decode_pv_pairs";
    e.bf16_kv_only = true;
    e.min_shared_rows = 2;
    e.forward_tile = &attention_decode_tile_pairs_of<Arch, true>;
    return e;
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
