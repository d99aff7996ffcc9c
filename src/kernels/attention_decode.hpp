// Attention for a few query rows (decoding: len_q 1..4 against a long KV cache, or a tile of
// 4 rows of a sequence of up to decode_few_queries), where the time goes into reading K and V,
// not into packing them. Same contract as attention_forward_tile (attention_args.hpp) for
// t.rows <= attention_direct_rows and K read in place (t.k_packed null). The keys are taken
// in blocks of decode_block_keys:
//   S[r, c]  = (scale q_r) . k_{j0+c}       W keys at a time, W independent sums
//   S  = softcap, + mask, - ALiBi (core/scores.hpp); keys outside row r's window,
//        causal limit or kv_len hidden (never read, K or V)
//   m' = max(m, rowmax S);  P = exp(S - m');  l = l e^(m - m') + rowsum P   (online softmax,
//        from m = sink, l = 1 with a sink)
//   P *= dropout factors
//   O  = O e^(m - m') + P V                  row r summing only the keys it sees
// then out = O / l and lse = m + log l. Each K row and each V row is read from memory once
// for all the tile's rows (later rows find it in L1), with software prefetch ahead.
//
// Scratch: the regions of attention_forward_tile's layout are reused, so that
// attention_weights_tile(after_forward = true) finds the scaled Q rows, m and l where it
// expects them; the block's scores, rows x decode_block_keys, live in its scores region.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "kernels/attention.hpp"
#include "kernels/attention_args.hpp"
#include "kernels/attention_decode_quantized.hpp"
#include "kernels/attention_micro.hpp"
#include "kernels/elements.hpp"
#include "kernels/row_reader.hpp"
#include "kernels/vec_math.hpp"

ATTN_KERNELS_BEGIN

namespace attention_decode_detail {

using attention_detail::lanes;
using attention_detail::round_up;

// Keys per block: the scores of 4 rows (8 KB) stay in L1 between the passes over them.
inline constexpr int64_t decode_block_keys = 512;

// Keys per P V sub-block: their V rows (16 KB at dim_v 128) stay in L1 across dim_v.
inline constexpr int64_t decode_pv_keys = 32;

// The block's scores fit the scores region of the layout, each row 64-byte aligned.
template <class Arch>
constexpr bool scores_fit() {
    using blk = attention_blocking<Arch>;
    return attention_direct_rows * decode_block_keys <= int64_t(blk::br) * blk::bc &&
           decode_block_keys % 16 == 0;
}

// s[c] = q . k_c for the W keys c = 0 .. W-1 at rows[c] (elements of E, widened in
// registers): their dot products accumulate lane-wise side by side, independent chains, then
// summed across their lanes all at once (transpose_sum; xsimd 8.1's haddp permutes lanes on
// AVX-512). Dims past the last whole vector one by one.
template <class Arch, class E>
inline void score_group(const float *q, int64_t dim, const typename E::storage *const *rows,
                        float *s) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const int64_t dim_vec = dim / W * W;
    fbatch acc[W];
#pragma GCC unroll 16
    for (int n = 0; n < W; ++n) acc[n] = fbatch(0.0f);
    for (int64_t d = 0; d < dim_vec; d += W) {
        const fbatch qv = fbatch::load_unaligned(q + d);
#pragma GCC unroll 16
        for (int n = 0; n < W; ++n) acc[n] = xsimd::fma(qv, widen<Arch, E>(rows[n] + d), acc[n]);
    }
    transpose_sum<Arch>(acc).store_unaligned(s);
    if (dim_vec < dim)
        for (int n = 0; n < W; ++n)
            for (int64_t d = dim_vec; d < dim; ++d) s[n] += q[d] * widen_one<Arch, E>(rows[n] + d);
}

// s[r * lds + c] = qs_r . k_c for c in seen[r] (K row c at k[c], qs rows dim apart), a group
// of W keys at a time for all rows, so that the group's K rows come from memory once and stay
// in L1 for the other rows; a group a row sees only in part goes key by key. Keys a row does
// not see are not read for it. The K and V rows decode_prefetch_keys ahead are prefetched,
// below key prefetch_end, for the streams asked (fetch_k, fetch_v): V (dim_v elements at
// v[c]) is needed right after this pass and comes from as far.
template <class Arch, class E>
void score_rows(const float *qs, int64_t dim, int64_t rows, const key_range *seen,
                const typename E::storage *const *k, const typename E::storage *const *v,
                int64_t dim_v, bool fetch_k, bool fetch_v, int64_t prefetch_end, float *s,
                int64_t lds) {
    constexpr int W = lanes<Arch>;
    int64_t from = seen[0].lo, to = seen[0].hi;
    for (int64_t r = 1; r < rows; ++r) {
        if (seen[r].lo < from) from = seen[r].lo;
        if (seen[r].hi > to) to = seen[r].hi;
    }
    for (int64_t c = from; c < to; c += W) {
        for (int64_t j = c + decode_prefetch_keys; j < c + decode_prefetch_keys + W; ++j) {
            if (j >= prefetch_end) break;
            if (fetch_k) attention_detail::prefetch_row<Arch>(k[j], dim);
            if (fetch_v) attention_detail::prefetch_row<Arch>(v[j], dim_v);
        }
        for (int64_t r = 0; r < rows; ++r) {
            const float *q = qs + r * dim;
            float *s_row = s + r * lds;
            if (c >= seen[r].lo && c + W <= seen[r].hi) {
                score_group<Arch, E>(q, dim, k + c, s_row + c);
            } else {
                const int64_t lo = c > seen[r].lo ? c : seen[r].lo;
                const int64_t hi = c + W < seen[r].hi ? c + W : seen[r].hi;
                for (int64_t j = lo; j < hi; ++j) s_row[j] = attention_detail::dot<Arch, E>(q, k[j], dim);
            }
        }
    }
}

// o[rows x dim_v] (leading dimension ldo) = o * rescale[r] + sum_{c < visible[r]} p[r][c] v_c,
// V row c at v[c] (type E, widened in registers). Row r sums exactly the keys it sees: a key
// hidden from it (but seen by a later row) is never multiplied into it, even with weight 0,
// so a NaN there stays out. Keys go in sub-blocks of decode_pv_keys whose V rows stay in L1
// while the register-blocked pv micro-kernel sweeps dim_v a few vectors at a time; a partial
// last vector (rows not padded to whole vectors) goes column by column.
template <class Arch, class E>
void pv_rows(int64_t rows, const int64_t *visible, const float *p, int64_t ldp,
             const typename E::storage *const *v, int64_t dim_v, bool whole_vectors, float *o,
             int64_t ldo, const float *rescale) {
    using blk = attention_blocking<Arch>;
    constexpr int W = lanes<Arch>;
    alignas(64) static constexpr float ones[attention_direct_rows] = {1.0f, 1.0f, 1.0f, 1.0f};
    const int64_t vectors = whole_vectors ? round_up(dim_v, W) / W : dim_v / W;
    const attention_detail::listed_rows<typename E::storage> v_rows{v, 0};
    for (int64_t k0 = 0; k0 == 0 || k0 < visible[rows - 1]; k0 += decode_pv_keys) {
        // segment r: keys [visible[r-1], visible[r]) of this sub-block, rows r .. rows-1
        // (visible grows with r); the first call of the first sub-block rescales every row
        const int64_t k1 = k0 + decode_pv_keys;
        for (int64_t r = 0; r < rows; ++r) {
            int64_t from = r == 0 ? 0 : visible[r - 1], to = visible[r];
            from = from < k0 ? k0 : from;
            to = to > k1 ? k1 : to;
            const bool first = k0 == 0 && r == 0;
            if (to <= from && !first) continue;
            const int rr = static_cast<int>(rows - r);
            const int64_t at = to > from ? from : k0;  // where an empty first call points
            for (int64_t c0 = 0; c0 < vectors; c0 += blk::nv) {
                const int nvec = static_cast<int>(vectors - c0 < blk::nv ? vectors - c0 : blk::nv);
                attention_detail::pv_block_any<Arch, attention_direct_rows, E>(
                    rr, nvec, p + r * ldp + at, ldp, to > from ? to - from : 0,
                    v_rows.from(at, c0 * W), o + r * ldo + c0 * W, ldo, first ? rescale : ones);
            }
        }
    }
    for (int64_t x = vectors * W; x < dim_v; ++x)  // columns of a partial last vector
        for (int64_t r = 0; r < rows; ++r) {
            float acc = o[r * ldo + x] * rescale[r];
            for (int64_t c = 0; c < visible[r]; ++c)
                acc += p[r * ldp + c] * widen_one<Arch, E>(v[c] + x);
            o[r * ldo + x] = acc;
        }
}

// The same for rows whose visible keys are ranges seen[r] of the block: every range starting
// where the first does (no window, or rows that are heads) as one group, else row by row.
template <class Arch, class E>
void pv_ranges(int64_t rows, const key_range *seen, const float *p, int64_t ldp,
               const typename E::storage *const *v, int64_t dim_v, bool whole_vectors, float *o,
               int64_t ldo, const float *rescale) {
    bool same_start = true;
    int64_t count[attention_direct_rows];
    for (int64_t r = 0; r < rows; ++r) {
        same_start = same_start && seen[r].lo == seen[0].lo;
        count[r] = seen[r].hi - seen[r].lo;
    }
    for (int64_t r = 1; r < rows && same_start; ++r) same_start = count[r] >= count[r - 1];
    if (same_start) {
        pv_rows<Arch, E>(rows, count, p + seen[0].lo, ldp, v + seen[0].lo, dim_v, whole_vectors,
                         o, ldo, rescale);
        return;
    }
    for (int64_t r = 0; r < rows; ++r)
        pv_rows<Arch, E>(1, count + r, p + r * ldp + seen[r].lo, ldp, v + seen[r].lo, dim_v,
                         whole_vectors, o + r * ldo, ldo, rescale + r);
}

// Whether every row of the block sees exactly [lo, hi).
inline bool rows_share(int64_t rows, const key_range *seen, int64_t lo, int64_t hi) {
    for (int64_t r = 0; r < rows; ++r)
        if (seen[r].lo != lo || seen[r].hi != hi) return false;
    return true;
}

// The block's two passes where they read each K and V vector once for every row. Rows that all
// see the same keys of the block (the heads of one KV head, or one row), whatever the cache's
// type, take the passes of attention_decode_quantized.hpp, widening (or dequantizing) in
// registers once for every row. Other rows (different windows or causal limits) of a quantized
// cache take the block's keys in sub-blocks of decode_pv_keys, each sub-block's K rows (then V
// rows) dequantized once by the row reader (kernels/row_reader.hpp) into f32 rows in the
// tile's K (V) scratch, where they stay in L1 for the f32 passes above, each row summing only
// the keys it sees (f32 and 16-bit rows take those passes in place). Either way the cache is
// read from memory once, at its own size.
template <class Arch, class E>
struct block_passes {
    const attention_tile &t;
    float *k_rows, *v_rows;  // decode_pv_keys rows of dim_qk, of dv_pad
    int64_t dv_pad;

    // keys [c0, c1) of the block at j0 dequantized, rows ld apart, listed at at[c]
    void read(const kv_rows &x, int64_t dim, int64_t ld, int64_t j0, int64_t c0, int64_t c1,
              float *buf, const float **at) const {
        for (int64_t c = c0; c < c1; ++c) {
            float *row = buf + (c - c0) * ld;
            read_row<Arch, E>(x, j0 + c, dim, row);
            for (int64_t d = dim; d < ld; ++d) row[d] = 0.0f;
            at[c] = row;
        }
    }
    static void clip(int64_t rows, const key_range *seen, int64_t c0, int64_t c1, key_range *out) {
        for (int64_t r = 0; r < rows; ++r) {
            out[r].lo = seen[r].lo > c0 ? seen[r].lo : c0;
            out[r].hi = seen[r].hi < c1 ? seen[r].hi : c1;
            if (out[r].hi < out[r].lo) out[r].hi = out[r].lo;
        }
    }
    void scores(const float *qs, int64_t rows, const key_range *seen, int64_t lo, int64_t hi,
                int64_t j0, const float **at, float *s) const {
        if (rows_share(rows, seen, lo, hi))  // every row sees [lo, hi): dequantized in registers
            return scores_in_registers<Arch, E>(t, rows, qs, lo, hi, j0, s, decode_block_keys);
        key_range part[attention_direct_rows];
        for (int64_t c0 = lo; c0 < hi; c0 += decode_pv_keys) {
            const int64_t c1 = c0 + decode_pv_keys < hi ? c0 + decode_pv_keys : hi;
            read(t.k, t.dim_qk, t.dim_qk, j0, c0, c1, k_rows, at);
            clip(rows, seen, c0, c1, part);
            score_rows<Arch, f32_elements>(qs, t.dim_qk, rows, part, at, at, 0, false, false, 0,
                                           s, decode_block_keys);
        }
    }
    void pv(int64_t rows, const key_range *seen, int64_t lo, int64_t hi, int64_t j0,
            const float **at, const float *p, float *o, const float *rescale) const {
        if (rows_share(rows, seen, lo, hi))
            return pv_in_registers<Arch, E>(t, rows, lo, hi, j0, p, decode_block_keys, o, dv_pad,
                                            rescale, decode_pv_keys);
        alignas(64) static constexpr float ones[attention_direct_rows] = {1.0f, 1.0f, 1.0f, 1.0f};
        key_range part[attention_direct_rows];
        for (int64_t c0 = lo; c0 == lo || c0 < hi; c0 += decode_pv_keys) {
            const int64_t c1 = c0 + decode_pv_keys < hi ? c0 + decode_pv_keys : hi;
            read(t.v, t.dim_v, dv_pad, j0, c0, c1, v_rows, at);
            clip(rows, seen, c0, c1, part);
            pv_ranges<Arch, f32_elements>(rows, part, p, decode_block_keys, at, t.dim_v, true, o,
                                          dv_pad, c0 == lo ? rescale : ones);
        }
    }
};

// Every row's O (rows ldo apart) zero, and its m and l as its sink starts them (m = sink, l = 1;
// no sink: -inf and 0).
template <class Arch>
void start_rows(const attention_tile &t, float *o, int64_t ldo, float *m, float *l) {
    using fbatch = xsimd::batch<float, Arch>;
    for (int64_t i = 0; i < t.rows * ldo; i += lanes<Arch>) fbatch(0.0f).store_aligned(o + i);
    for (int64_t r = 0; r < t.rows; ++r) {
        m[r] = attention_detail::row_sink(t, r);
        l[r] = m[r] == -std::numeric_limits<float>::infinity() ? 0.0f : 1.0f;
    }
}

// The online softmax of a block's rows (scores ldp apart from s, row r's visible columns
// seen[r]): S finished (core/scores.hpp's softcap, mask, ALiBi), m' = max(m, rowmax S),
// P = exp_row(s_row, r, m') in place of S (returning P's lane-wise sums), l = l e^(m - m') +
// sum P, rescale = e^(m - m'). A row with no finite score keeps P = 0: zeros where its
// scores were, for the cols of the block.
template <class Arch, class Exp>
void block_softmax(const attention_tile &t, float *s, int64_t ldp, const key_range *seen,
                   int64_t j0, int64_t cols, float *m, float *l, float *rescale, Exp &&exp_row) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < t.rows; ++r) {
        float *s_row = s + r * ldp;
        const float *mask_row = t.mask ? t.mask + r * t.mask_ld + j0 : nullptr;
        const float block_max =
            attention_detail::finish_score_row<Arch>(t, r, s_row, seen[r], mask_row, j0);
        const float m_new = attention_detail::running_max<Arch>(m[r], block_max);
        float factor = 1.0f, sum_p = 0.0f;
        if (m_new != neg_inf) {  // else P = 0 (already so: all visible scores are -inf)
            sum_p = reduce_add<Arch>(exp_row(s_row, r, m_new));
            factor = __builtin_expf(m[r] - m_new);  // e^(-inf) = 0 for the first block
        } else {
            for (int64_t c = 0; c < round_up(cols, 2 * W); c += W) fbatch(0.0f).store_aligned(s_row + c);
        }
        rescale[r] = factor;
        l[r] = l[r] * factor + sum_p;
        m[r] = m_new;
    }
}

// The keys from the first some row of the tile sees to the last (lo >= hi: none).
inline key_range keys_some_row_sees(const attention_tile &t) {
    key_range any{t.key_end, t.key_begin};
    for (int64_t r = 0; r < t.rows; ++r) {
        const key_range k = t.keys_of(r);
        if (k.hi <= k.lo) continue;
        if (k.lo < any.lo) any.lo = k.lo;
        if (k.hi > any.hi) any.hi = k.hi;
    }
    return any;
}

}  // namespace attention_decode_detail

template <class Arch, class E>
void attention_decode_tile_of(const attention_tile &t) {
    using namespace attention_decode_detail;
    constexpr int W = lanes<Arch>;
    constexpr int64_t B = decode_block_keys;
    static_assert(scores_fit<Arch>(), "decode scores must fit the tile's scores region");
    const attention_detail::scratch_layout<Arch> at(t.dim_qk, t.dim_v);
    float *qs = t.scratch + at.q_tile;
    float *s = t.scratch + at.scores;  // row r of the block's scores at s + r * B
    float *o = t.scratch + at.o_tile;
    float *m = t.scratch + at.row_max;
    float *l = t.scratch + at.row_sum;
    float *rescale = t.scratch + at.rescale;
    const int64_t rows = t.rows;
    const int64_t dv_pad = round_up(t.dim_v, W);
    const bool whole_vectors = t.v_padded || t.dim_v % W == 0;
    using storage = typename E::storage;

    attention_detail::load_scaled_q<Arch>(t, qs);
    start_rows<Arch>(t, o, dv_pad, m, l);
    const bool fetch_k = rows_share_pages(t.k), fetch_v = rows_share_pages(t.v);
    const block_passes<Arch, E> passes{t, t.scratch + at.k_panels, t.scratch + at.v_tile, dv_pad};
    const float *deq_at[B];  // a quantized cache's dequantized rows, by block column
    // Keys no row sees (window, causal) are never read, K or V, nor prefetched.
    const key_range any = keys_some_row_sees(t);
    const int64_t first_seen = any.lo, last_seen = any.hi;
    // K and V rows of the block through the addressing function (paged or not): the same
    // arithmetic on the same values wherever the rows live
    const storage *k_at[B + decode_prefetch_keys + W], *v_at[B + decode_prefetch_keys + W];

    for (int64_t j0 = first_seen; j0 < last_seen; j0 += B) {
        const int64_t cols = last_seen - j0 < B ? last_seen - j0 : B;
        key_range seen[attention_direct_rows];
        for (int64_t r = 0; r < rows; ++r) seen[r] = attention_detail::tile_columns(t, r, j0, cols);
        const int64_t listed = last_seen - j0 < B + decode_prefetch_keys + W
                                   ? last_seen - j0 : B + decode_prefetch_keys + W;
        int64_t lo = cols, hi = 0;  // the block's columns some row sees
        for (int64_t r = 0; r < rows; ++r)
            if (seen[r].hi > seen[r].lo) {
                lo = seen[r].lo < lo ? seen[r].lo : lo;
                hi = seen[r].hi > hi ? seen[r].hi : hi;
            }
        if (hi < lo) hi = lo = 0;

        // Rows seeing the same keys (and every quantized cache) take the passes that read each
        // K and V vector once for all rows (attention_decode_quantized.hpp), which find their
        // rows by reader; the others, the block's rows listed here.
        const bool shared = rows_share(rows, seen, lo, hi);
        if constexpr (!E::quantized)
            if (!shared) {
                t.k.rows_as<storage>(j0, listed, k_at);
                t.v.rows_as<storage>(j0, listed, v_at);
            }

        // S = (scale Q) K^T for the block; its V rows are fetched meanwhile
        if (E::quantized || shared)
            passes.scores(qs, rows, seen, lo, hi, j0, deq_at, s);
        else if constexpr (!E::quantized)
            score_rows<Arch, E>(qs, t.dim_qk, rows, seen, k_at, v_at, t.dim_v, fetch_k, fetch_v,
                                listed, s, B);

        // online softmax per row: m' = max(m, rowmax S), P = exp(S - m'), l = l e^(m-m') + sum P
        block_softmax<Arch>(t, s, B, seen, j0, cols, m, l, rescale, [&](float *s_row, int64_t r, float m_new) {
            return attention_detail::exp_scores_row<Arch>(s_row, seen[r], m_new, t, r, j0);
        });

        // O = O rescale + P V, every V row read once for all rows
        if (E::quantized || shared)
            passes.pv(rows, seen, lo, hi, j0, deq_at, s, o, rescale);
        else if constexpr (!E::quantized)
            pv_ranges<Arch, E>(rows, seen, s, B, v_at, t.dim_v, whole_vectors, o, dv_pad, rescale);
    }

    // out = O / l, lse = m + log l (l is 0 for a row that saw no key or only -inf scores)
    attention_detail::write_rows<Arch>(t, o, dv_pad, m, l);
}

// The decode tile for K and V of t.k_type (== t.v_type: a KV cache is one type), specialised
// on it so that the in-place reads widen in registers.
template <class Arch>
void attention_decode_tile(const attention_tile &t) {
    core::with_kv_format(t.k.type, [&](auto format) { attention_decode_tile_of<Arch, decltype(format)>(t); });
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
