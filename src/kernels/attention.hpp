// Fused scaled dot-product attention, flash-attention style, templated on the xsimd Arch.
//
// One call of attention_forward_tile handles a tile of at most br query rows of one
// (batch, query head) and streams the keys in tiles of bc:
//   S  = (scale Q) K_tile^T                      register-blocked, K packed in panels of nr
//   S  = softcap, + mask, - ALiBi (core/scores.hpp); hidden keys (window, causal,
//        kv_len) -> -inf, and key tiles or panels hidden from every row never computed
//   m' = max(m, rowmax S);  P = exp(S - m');  l = l exp(m - m') + rowsum P   (online softmax
//   starting from m = sink, l = 1 with a sink; l kept lane-wise and summed across the lanes
//   once at the end)
//   P *= dropout factors
//   O  = O exp(m - m') + P V_tile                V rows as whole vectors of dim_v
// and finally out = O / l, lse = m + log l. Only the br x bc tile S is ever stored. A scores
// policy may form P with S (tile_with_p: the bf16-pair tiles, attention_bf16.hpp), from an
// offset m' taken before the tile's max is known; m is then that offset, out and lse the same.
//
// Everything here is a template on Arch (see vec_math.hpp for why no plain inline functions).
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "kernels/attention_args.hpp"
#include "kernels/attention_merge.hpp"
#include "kernels/attention_micro.hpp"
#include "kernels/attention_pack.hpp"
#include "kernels/attention_score_row.hpp"
#include "kernels/elements.hpp"
#include "kernels/vec_math.hpp"

ATTN_KERNELS_BEGIN

namespace attention_detail {

// Where each piece of a tile lives in the scratch (offsets in floats, 64-byte multiples).
template <class Arch>
struct scratch_layout {
    int64_t q_tile, scores, o_tile, row_max, row_sum, rescale, prev_max, sum_lanes, tile_lanes,
        score_max, key_factors, k_panels, v_tile, total;
    scratch_layout(int64_t dim_qk, int64_t dim_v) {
        using blk = attention_blocking<Arch>;
        const int64_t dv_pad = round_up(dim_v, lanes<Arch>);
        int64_t at = 0;
        auto take = [&at](int64_t floats) {
            const int64_t here = at;
            at += round_up(floats, 16);
            return here;
        };
        q_tile = take(blk::br * dim_qk);
        scores = take(blk::br * blk::bc);
        o_tile = take(blk::br * dv_pad);
        row_max = take(blk::br);
        row_sum = take(blk::br);
        rescale = take(blk::br);
        prev_max = take(blk::br);
        sum_lanes = take(blk::br * lanes<Arch>);   // l of row r, lane-wise
        tile_lanes = take(blk::br * lanes<Arch>);  // rowsum P of this key tile, lane-wise
        score_max = take(blk::br * lanes<Arch>);
        key_factors = take(blk::bc + 32);  // the scores policy's per-key factors of a tile
        k_panels = take(blk::bc * dim_qk);
        v_tile = take(blk::bc * dv_pad);
        total = at;
    }
};

// ---- tile steps -------------------------------------------------------------------------

// S[rows x panels*nr] (leading dimension bc) = qs[rows x dim] K^T for the given panels of
// the key tile at j0, and score_max[r][0..W) the lane-wise max of row r's visible scores
// (NaN left out), block by block (score_blocks): a (row block, panel) pair hidden from every
// row of the block (window, causal limit) is skipped, and only the key vectors up to the
// block's last row's limit are computed (the scores outside them are never read); in a block
// some row does not wholly see, its hidden lanes are -inf.
template <class Arch>
void tile_scores(const attention_tile &t, int64_t j0, int64_t cols, const float *qs, int64_t dim,
                 const float *panels_at, int64_t panels, float *s, float *score_max) {
    using blk = attention_blocking<Arch>;
    constexpr int nr = panel_keys<Arch>;
    score_blocks<Arch, blk::mr_s>(
        t, j0, cols, panels, s, score_max,
        [&](int64_t r0, int64_t rr, int64_t p, int vectors, float *s_at, float *row_max) {
            score_block_rows<Arch, blk::mr_s>(static_cast<int>(rr), vectors, qs + r0 * dim, dim,
                                              panels_at + p * nr * dim, dim, s_at, blk::bc,
                                              row_max);
        });
}

// V rows for keys j0 .. j0+keys-1 readable as full f32 vectors: in place when they are
// (f32, and padded or dim_v a whole number of vectors), else widened, zero padded, into the
// scratch.
// (Paged rows are always copied: the same values, so the same bits, as in place.)
template <class Arch>
const float *v_tile_rows(const attention_tile &t, int64_t j0, int64_t keys, float *v_pad,
                         int64_t *ldv) {
    constexpr int W = lanes<Arch>;
    if (t.v.type == ATTN_DTYPE_F32 && !t.v.pages && (t.v_padded || t.dim_v % W == 0)) {
        *ldv = t.v.ld;
        return t.v.row_as<float>(j0);
    }
    const int64_t dv_pad = round_up(t.dim_v, W);
    pad_v_rows<Arch>(t.v, j0, keys, t.dim_v, v_pad, dv_pad);
    *ldv = dv_pad;
    return v_pad;
}

// a . b over n elements, a f32 and b of type E (widened in registers).
template <class Arch, class E = f32_elements>
inline float dot(const float *a, const typename E::storage *b, int64_t n) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    fbatch acc(0.0f);
    int64_t d = 0;
    for (; d + W <= n; d += W) acc = xsimd::fma(fbatch::load_unaligned(a + d), widen<Arch, E>(b + d), acc);
    float sum = reduce_add<Arch>(acc);
    for (; d < n; ++d) sum += a[d] * widen_one<Arch, E>(b + d);
    return sum;
}

// a . b with b's type known at run time.
template <class Arch>
inline float dot(const float *a, const void *b, attn_dtype b_type, int64_t n) {
    return core::with_format(b_type, [&](auto format) {
        using E = decltype(format);
        return dot<Arch, E>(a, static_cast<const typename E::storage *>(b), n);
    });
}

// S[r, c] = qs[r, :] . K[j0 + c, :] for c < cols, straight from the K rows (k at key j0),
// each read by its row reader (widened or dequantized in registers; for f32, bf16 and f16
// the arithmetic of dot above): for a few query rows (decoding) packing K would cost more
// than the products themselves.
template <class Arch>
void tile_scores_direct(const float *qs, int64_t dim, int64_t rows, const kv_rows &k, int64_t j0,
                        int64_t cols, float *s) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    core::with_kv_format(k.type, [&](auto format) {
        for (int64_t c = 0; c < cols; ++c) {
            const row_reader<Arch, decltype(format)> key(k, j0 + c);
            for (int64_t r = 0; r < rows; ++r) {
                const float *a = qs + r * dim;
                fbatch acc(0.0f);
                int64_t d = 0;
                for (; d + W <= dim; d += W) acc = xsimd::fma(fbatch::load_unaligned(a + d), key.vec(d), acc);
                float sum = reduce_add<Arch>(acc);
                for (; d < dim; ++d) sum += a[d] * key.one(d);
                s[r * attention_blocking<Arch>::bc + c] = sum;
            }
        }
    });
}

// S = (scale Q) K^T for the keys j0 .. j0+cols-1: K from the packed head, or straight from
// its rows for a few query rows, or packed now into k_buf. Returns whether score_max holds
// each row's max over its visible scores (tile_scores; not on the direct path).
template <class Arch>
bool tile_scores_for(const attention_tile &t, const float *qs, int64_t j0, int64_t cols,
                     float *s, float *k_buf, float *score_max) {
    constexpr int nr = panel_keys<Arch>;
    const int64_t panels = (cols + nr - 1) / nr;
    if (t.k_packed) {
        tile_scores<Arch>(t, j0, cols, qs, t.dim_qk, t.k_packed + (j0 / nr) * nr * t.dim_qk,
                          panels, s, score_max);
    } else if (t.rows <= attention_direct_rows) {
        tile_scores_direct<Arch>(qs, t.dim_qk, t.rows, t.k, j0, cols, s);
        return false;
    } else {
        pack_k_panels<Arch>(t.k, j0, t.len_kv, t.dim_qk, panels, k_buf);
        tile_scores<Arch>(t, j0, cols, qs, t.dim_qk, k_buf, panels, s, score_max);
    }
    return true;
}

// out = O / l, lse = m + log l for every row of the tile (O rows dv_pad apart); a row with
// l == 0 saw no key (or only -inf scores): zeros, whatever O holds, and lse -inf. A 16-bit
// output row is formed in f32 (in place in O) and rounded once.
template <class Arch>
void write_rows(const attention_tile &t, float *o, int64_t dv_pad, const float *m,
                const float *l) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    for (int64_t r = 0; r < t.rows; ++r) {
        float *o_row = o + r * dv_pad;
        const bool empty = l[r] == 0.0f;
        const fbatch inv(empty ? 0.0f : 1.0f / l[r]);
        void *out_row = element_at(t.out, t.out_type, r * t.out_ld);
        float *dst = t.out_type == ATTN_DTYPE_F32 ? static_cast<float *>(out_row) : o_row;
        int64_t c = 0;
        for (; c + W <= t.dim_v; c += W)
            (empty ? fbatch(0.0f) : fbatch::load_aligned(o_row + c) * inv).store_unaligned(dst + c);
        for (; c < t.dim_v; ++c) dst[c] = empty ? 0.0f : o_row[c] * inv.get(0);
        if (t.out_type != ATTN_DTYPE_F32) narrow_row<Arch>(o_row, t.dim_v, out_row, t.out_type);
        t.lse[r] = empty ? -std::numeric_limits<float>::infinity() : m[r] + __builtin_logf(l[r]);
        if (t.row_max) {
            t.row_max[r] = empty ? -std::numeric_limits<float>::infinity() : m[r];
            t.row_sum[r] = l[r];
        }
    }
}

// qs = scale * Q tile, rows x dim_qk dense (Q widened from its type).
template <class Arch>
void load_scaled_q(const attention_tile &t, float *qs) {
    for (int64_t r = 0; r < t.rows; ++r) {
        float *row = qs + r * t.dim_qk;
        widen_row<Arch>(element_at(t.q, t.q_type, r * t.q_ld), t.q_type, t.dim_qk, row);
        for (int64_t d = 0; d < t.dim_qk; ++d) row[d] = t.scale * row[d];
    }
}

// O[rows x dv_pad] = O * rescale + P V for the keys j0 .. j0+cols-1 of a tile, P the tile's
// probabilities in s (rows bc apart, zero past each row's visible keys), V rows in f32 (in
// place or widened into v_buf); a dim_v chunk of V stays in L1 across the row blocks.
template <class Arch>
void pv_tile_f32(const attention_tile &t, int64_t j0, int64_t cols, const float *s, float *o,
                 int64_t dv_pad, const float *rescale, float *v_buf) {
    using blk = attention_blocking<Arch>;
    constexpr int W = lanes<Arch>;
    const float unit_rescale = 1.0f;
    int64_t ldv = 0;
    const float *v_at = v_tile_rows<Arch>(t, j0, cols, v_buf, &ldv);
    const int64_t vectors = dv_pad / W;
    for (int64_t c0 = 0; c0 < vectors; c0 += blk::nv) {
        const int nvec = static_cast<int>(vectors - c0 < blk::nv ? vectors - c0 : blk::nv);
        for (int64_t r0 = 0; r0 < t.rows; r0 += blk::mr_o) {
            const int rr = static_cast<int>(t.rows - r0 < blk::mr_o ? t.rows - r0 : blk::mr_o);
            // the keys every row of the block sees, for the whole block (and its rescale);
            // then each row's further keys alone, near the causal diagonal and the window's
            // left edge: a key hidden from a row is never read for it (a NaN or inf in its V
            // row cannot leak into the row)
            const key_range shared = shared_columns(t, r0, r0 + rr, j0, cols);
            const strided_rows<float> v_rows{v_at, ldv};
            pv_block_any<Arch, blk::mr_o, f32_elements>(
                rr, nvec, s + r0 * blk::bc + shared.lo, blk::bc, shared.hi - shared.lo,
                v_rows.from(shared.lo, c0 * W), o + r0 * dv_pad + c0 * W, dv_pad, rescale + r0);
            if (shared.lo == 0 && shared.hi == cols) continue;  // no row sees more
            for (int64_t r = r0; r < r0 + rr; ++r) {
                const key_range own = tile_columns(t, r, j0, cols);
                const key_range parts[2] = {
                    {own.lo, shared.hi > shared.lo ? shared.lo : own.hi},
                    {shared.hi > shared.lo ? shared.hi : own.hi, own.hi}};
                for (const key_range &part : parts) {
                    if (part.hi <= part.lo) continue;
                    pv_block_vectors<Arch, 1, blk::nv, f32_elements>(
                        nvec, s + r * blk::bc + part.lo, blk::bc, part.hi - part.lo,
                        v_rows.from(part.lo, c0 * W), o + r * dv_pad + c0 * W, dv_pad,
                        &unit_rescale);
                }
            }
        }
    }
}

// How a tile's scores are formed, the one part of the tile loop that depends on the compute
// type: f32 products here (Q scaled and widened into the q region, K packed in f32 panels);
// attention_bf16.hpp has the bf16-pair one. load_q fills the scratch's q region for the tile;
// tile writes S = scale Q K^T for keys j0 .. j0+cols-1 (see tile_scores_for) and may leave
// per-key factors of the tile in key_factors (bc + 32 floats) for exp_row; exp_row turns row
// r's scores into P in the form pv reads (exp_tile_row: f32, 0 outside the visible keys) and
// returns their lane-wise sum; exp is the same exponential, for the weights; pv adds P V (see
// pv_tile_f32; s may be overwritten).
template <class Arch>
struct f32_scores {
    using fbatch = xsimd::batch<float, Arch>;
    static void load_q(const attention_tile &t, float *q_region) { load_scaled_q<Arch>(t, q_region); }
    static bool tile(const attention_tile &t, const float *q_region, int64_t j0, int64_t cols,
                     float *s, float *k_buf, float *score_max, float * /*key_factors*/) {
        return tile_scores_for<Arch>(t, q_region, j0, cols, s, k_buf, score_max);
    }
    static fbatch exp(const fbatch &x) { return softmax_exp<Arch>(x); }
    static fbatch exp_row(const attention_tile &t, float *s_row, key_range seen, float m,
                          int64_t r, int64_t j0, int64_t cols, const float * /*key_factors*/) {
        return exp_tile_row<Arch>(s_row, seen, m, t, r, j0, cols);
    }
    static void pv(const attention_tile &t, int64_t j0, int64_t cols, float *s, float *o,
                   int64_t dv_pad, const float *rescale, float *v_buf) {
        pv_tile_f32<Arch>(t, j0, cols, s, o, dv_pad, rescale, v_buf);
    }
};

}  // namespace attention_detail

// ---- entry points (in the kernel table) -----------------------------------------------------

template <class Arch>
int64_t attention_scratch_floats(int64_t dim_qk, int64_t dim_v) {
    return attention_detail::scratch_layout<Arch>(dim_qk, dim_v).total;
}

// The packed K of one head: panels of nr keys (see attention_tile::k_packed) from key rows
// first .. keys_end - 1 (zero past them), through the addressing function.
template <class Arch>
void attention_pack_k(const kv_rows &k, int64_t first, int64_t keys_end, int64_t dim_qk,
                      int64_t panels, float *packed) {
    attention_detail::pack_k_panels<Arch>(k, first, keys_end, dim_qk, panels, packed);
}

// V rows first .. first+keys-1 widened into padded[j * padded_ld] (f32), zero to padded_ld.
template <class Arch>
void attention_pad_v(const kv_rows &v, int64_t first, int64_t keys, int64_t dim_v, float *padded,
                     int64_t padded_ld) {
    attention_detail::pad_v_rows<Arch>(v, first, keys, dim_v, padded, padded_ld);
}

// Whether a scores policy may form P with S (a static tile_with_p, as bf16_scores has).
template <class Scores, class = void>
struct forms_p : std::false_type {};
template <class Scores>
struct forms_p<Scores, std::void_t<decltype(&Scores::tile_with_p)>> : std::true_type {};

template <class Arch, class Scores>
void attention_forward_tile_with(const attention_tile &t) {
    using namespace attention_detail;
    using blk = attention_blocking<Arch>;
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const scratch_layout<Arch> at(t.dim_qk, t.dim_v);
    float *qs = t.scratch + at.q_tile;
    float *s = t.scratch + at.scores;
    float *o = t.scratch + at.o_tile;
    float *m = t.scratch + at.row_max;
    float *l = t.scratch + at.row_sum;
    float *rescale = t.scratch + at.rescale;
    float *m_prev = t.scratch + at.prev_max;
    float *l_lanes = t.scratch + at.sum_lanes;
    float *tile_lanes = t.scratch + at.tile_lanes;
    float *score_max = t.scratch + at.score_max;
    float *key_factors = t.scratch + at.key_factors;
    const int64_t dv_pad = round_up(t.dim_v, W);

    Scores::load_q(t, qs);
    for (int64_t i = 0; i < t.rows * dv_pad; i += W) fbatch(0.0f).store_aligned(o + i);
    // all br rows, so the rescale below runs on whole vectors (rows past t.rows stay empty);
    // a row with a sink starts from it: m = sink, l = e^(sink - m) = 1 (in lane 0)
    for (int64_t r = 0; r < blk::br; ++r) {
        const float sink = r < t.rows ? row_sink(t, r) : neg_inf;
        m[r] = m_prev[r] = sink;
        fbatch(0.0f).store_aligned(l_lanes + r * W);
        if (sink != neg_inf) l_lanes[r * W] = 1.0f;
    }
    const bool plain_scores = !has_score_terms(t) && !t.mask;

    for (int64_t j0 = t.key_begin; j0 < t.key_end; j0 += blk::bc) {
        const int64_t cols = t.key_end - j0 < blk::bc ? t.key_end - j0 : blk::bc;

        // a policy that forms P with S (tile_with_p) leaves m, m_prev and the sums of P as the
        // steps below would, where it can
        bool p_formed = false;
        if constexpr (forms_p<Scores>::value)
            p_formed = Scores::tile_with_p(t, qs, j0, cols, s, t.scratch + at.k_panels, score_max,
                                           m, m_prev, tile_lanes, key_factors);

        // S = (scale Q) K^T for this tile, and (when it says so) each row's max over its
        // visible scores
        const bool maxima = !p_formed && Scores::tile(t, qs, j0, cols, s, t.scratch + at.k_panels,
                                                      score_max, key_factors);

        // online softmax: m' = max(m, rowmax S), P = exp(S - m'), sum P
        for (int64_t r = 0; r < t.rows && !p_formed; ++r) {
            float *s_row = s + r * blk::bc;
            const key_range seen = tile_columns(t, r, j0, cols);
            const float *mask_row = t.mask ? t.mask + r * t.mask_ld + j0 : nullptr;
            // plain scaled scores: the max from S = Q K^T stands (hidden lanes -inf already),
            // or without one a pass for it, rewriting only the vectors cut by the row's ends;
            // else (or when it is -inf: all scores -inf or NaN) a pass over the row applies
            // the score definition (softcap, mask, ALiBi, hiding) and finds it
            float tile_max = neg_inf;
            if (plain_scores && seen.hi > seen.lo)
                tile_max = maxima ? reduce_max<Arch>(fbatch::load_aligned(score_max + r * W))
                                  : plain_row_max<Arch>(s_row, seen);
            if (tile_max == neg_inf) tile_max = finish_score_row<Arch>(t, r, s_row, seen, mask_row, j0);
            const float m_new = running_max<Arch>(m[r], tile_max);
            m_prev[r] = m[r];
            if (m_new != neg_inf) m[r] = m_new;  // else nothing visible yet: P = 0, O stays 0
            Scores::exp_row(t, s_row, seen, m_new, r, j0, cols, key_factors)
                .store_aligned(tile_lanes + r * W);
        }
        // rescale = e^(m - m') (1 while nothing is visible), for W rows at once; then
        // l = l rescale + sum P, lane-wise per row
        for (int64_t r0 = 0; r0 < t.rows; r0 += W) {
            const fbatch m_new = fbatch::load_aligned(m + r0);
            const fbatch factor =
                xsimd::select(m_new == fbatch(neg_inf), fbatch(1.0f),
                              kernels::exp<Arch>(fbatch::load_aligned(m_prev + r0) - m_new));
            factor.store_aligned(rescale + r0);
        }
        for (int64_t r = 0; r < t.rows; ++r)
            xsimd::fma(fbatch::load_aligned(l_lanes + r * W), fbatch(rescale[r]),
                       fbatch::load_aligned(tile_lanes + r * W))
                .store_aligned(l_lanes + r * W);

        // O = O * rescale + P V for this tile
        Scores::pv(t, j0, cols, s, o, dv_pad, rescale, t.scratch + at.v_tile);
    }

    // out = O / l, lse = m + log l, with l summed across its lanes
    for (int64_t r = 0; r < t.rows; ++r)
        l[r] = reduce_add<Arch>(fbatch::load_aligned(l_lanes + r * W));
    write_rows<Arch>(t, o, dv_pad, m, l);
}

template <class Arch>
void attention_forward_tile(const attention_tile &t) {
    attention_forward_tile_with<Arch, attention_detail::f32_scores<Arch>>(t);
}

// weights row r, keys [0, len_kv) = exp(S_rj - m_r) / l_r where key j is visible, 0
// elsewhere (the softmax before dropout), recomputing S. after_forward: the tile's
// attention_forward_tile just ran on this scratch, which still holds every row's max m and
// sum l; else m = t.lse[r] and l = 1 (rows merged from split keys).
template <class Arch, class Scores>
void attention_weights_tile_with(const attention_tile &t, float *weights, int64_t weights_ld,
                                 bool after_forward) {
    using namespace attention_detail;
    using blk = attention_blocking<Arch>;
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const scratch_layout<Arch> at(t.dim_qk, t.dim_v);
    float *qs = t.scratch + at.q_tile;
    float *s = t.scratch + at.scores;
    const float *m = t.scratch + at.row_max;
    const float *l = t.scratch + at.row_sum;

    if (!after_forward) Scores::load_q(t, qs);  // else still there
    for (int64_t r = 0; r < t.rows; ++r) {
        float *w_row = weights + r * weights_ld;
        for (int64_t j = 0; j < t.key_begin; ++j) w_row[j] = 0.0f;
        for (int64_t j = t.key_end > t.key_begin ? t.key_end : t.key_begin; j < weights_ld; ++j)
            w_row[j] = 0.0f;
    }
    for (int64_t j0 = t.key_begin; j0 < t.key_end; j0 += blk::bc) {
        const int64_t cols = t.key_end - j0 < blk::bc ? t.key_end - j0 : blk::bc;
        Scores::tile(t, qs, j0, cols, s, t.scratch + at.k_panels, t.scratch + at.score_max,
                     t.scratch + at.key_factors);
        for (int64_t r = 0; r < t.rows; ++r) {
            float *s_row = s + r * blk::bc;
            float *w_row = weights + r * weights_ld + j0;
            const float row_max = after_forward ? m[r] : t.lse[r];
            const key_range seen =
                row_max == neg_inf ? key_range{0, 0} : tile_columns(t, r, j0, cols);
            const float *mask_row = t.mask ? t.mask + r * t.mask_ld + j0 : nullptr;
            finish_score_row<Arch>(t, r, s_row, seen, mask_row, j0);
            const fbatch shift(row_max), sum(after_forward ? l[r] : 1.0f);
            for (int64_t c = 0; c < seen.lo; ++c) w_row[c] = 0.0f;
            int64_t c = seen.lo / W * W;
            for (; c < seen.hi; c += W) {
                const fbatch p = Scores::exp(fbatch::load_aligned(s_row + c) - shift) / sum;
                if (c >= seen.lo && c + W <= cols) {
                    p.store_unaligned(w_row + c);
                } else {  // a vector cut by the window's left edge or the tile's end
                    p.store_aligned(s_row + c);
                    for (int64_t i = c > seen.lo ? c : seen.lo; i < cols && i < c + W; ++i)
                        w_row[i] = s_row[i];
                }
            }
            for (c = seen.hi; c < cols; ++c) w_row[c] = 0.0f;
        }
    }
}

template <class Arch>
void attention_weights_tile(const attention_tile &t, float *weights, int64_t weights_ld,
                            bool after_forward) {
    attention_weights_tile_with<Arch, attention_detail::f32_scores<Arch>>(t, weights, weights_ld,
                                                                         after_forward);
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
