// The score definition of core/scores.hpp in vector form, for a row of a key tile, and
// the online-softmax steps on it; shared by the tile loop (attention.hpp, both score
// policies) and the decode kernel. Templated on the xsimd Arch.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "kernels/attention_args.hpp"
#include "kernels/attention_micro.hpp"
#include "core/scores.hpp"
#include "kernels/vec_math.hpp"
#include "core/dropout.hpp"  // column_multiplier only: the vector fmix32 below mirrors it

ATTN_KERNELS_BEGIN
namespace attention_detail {

// Row r's visible keys in the key tile [j0, j0 + cols), as tile columns [lo, hi); {0, 0}
// when it sees none there.
inline key_range tile_columns(const attention_tile &t, int64_t r, int64_t j0, int64_t cols) {
    const key_range k = t.keys_of(r);
    int64_t lo = k.lo - j0, hi = k.hi - j0;
    if (lo < 0) lo = 0;
    if (hi > cols) hi = cols;
    if (hi <= lo) return {0, 0};
    return {lo, hi};
}

// The columns every row of rows [r0, r1) sees in the tile; {x, x} (empty, x <= cols) when
// they share none. A row's range [lo(i), hi(i)) only moves right as i grows (core/scores.hpp:
// both ends are non-decreasing in i; rows_are_heads: one range for all), so the shared
// columns are the last row's left end to the first row's right end, and any row between
// holds them.
inline key_range shared_columns(const attention_tile &t, int64_t r0, int64_t r1, int64_t j0,
                                int64_t cols) {
    const key_range first = t.keys_of(r0), last = t.keys_of(r1 - 1);
    int64_t lo = last.lo - j0, hi = first.hi - j0;
    if (first.hi <= first.lo) hi = 0;  // the first row sees nothing here
    if (lo < 0) lo = 0;
    if (lo > cols) lo = cols;
    if (hi > cols) hi = cols;
    if (hi < lo) hi = lo;
    return {lo, hi};
}

// Key vectors of the panel at tile columns [c0, c0 + nr) that rows [r0, r0 + rr) need
// computed: 0 when the panel is hidden from each of them (wholly left of the window of the
// first, which sees least to the left, or right of the last's limit), else up to the last
// row's limit. The scores past it, or in a skipped panel, are never read.
template <class Arch>
inline int panel_vectors(const attention_tile &t, int64_t r0, int64_t rr, int64_t j0, int64_t c0) {
    constexpr int W = lanes<Arch>;
    constexpr int nr = panel_keys<Arch>;
    const int64_t lo = t.keys_of(r0).lo - j0, hi = t.keys_of(r0 + rr - 1).hi - j0;
    if (c0 >= hi || c0 + nr <= lo) return 0;
    const int64_t seen = hi - c0;
    return seen >= nr ? nr / W : static_cast<int>((seen + W - 1) / W);
}

// Whether the scores of row r need more than the scaled dot products (softcap, ALiBi).
inline bool has_score_terms(const attention_tile &t) { return t.softcap > 0.0f || t.alibi_slopes; }

// x, the scores of tile columns c .. c+W-1, with the lanes outside cols = [lo, hi) -inf.
template <class Arch>
inline xsimd::batch<float, Arch> hide_outside(const xsimd::batch<float, Arch> &x, int64_t c,
                                              key_range cols) {
    using fbatch = xsimd::batch<float, Arch>;
    const fbatch col = fbatch(static_cast<float>(c)) + lane_index<Arch>();
    return xsimd::select(col >= fbatch(static_cast<float>(cols.lo)) &&
                             col < fbatch(static_cast<float>(cols.hi)),
                         x, fbatch(-std::numeric_limits<float>::infinity()));
}

// Whether every row of [r0, r0 + rr) sees all of the tile's columns [c0, c1): then a score
// block over them needs no hiding (hide_block).
inline bool block_sees_all(const attention_tile &t, int64_t r0, int64_t rr, int64_t j0,
                           int64_t cols, int64_t c0, int64_t c1) {
    const key_range shared = shared_columns(t, r0, r0 + rr, j0, cols);
    return shared.lo <= c0 && c1 <= shared.hi;
}

// The scores just formed for rows [r0, r0 + rr) over the tile's columns [c0, c0 + vectors W)
// (row r0 + i at s_block + i * lds), where some row does not see them all (the causal
// diagonal, a window's edge, a panel's keys past cols): the lanes outside each row's visible
// columns -> -inf, and score_max[r][0..W) raised lane-wise by the rest, NaN left out as the
// score kernels leave it. The kernel that formed them raised other maxima (not score_max), so
// score_max holds each row's max over its visible scores only, and the tile loop needs no
// pass over a row for it.
template <class Arch>
void hide_block(const attention_tile &t, int64_t r0, int64_t rr, int64_t j0, int64_t cols,
                int64_t c0, int vectors, float *s_block, int64_t lds, float *score_max) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    for (int64_t i = 0; i < rr; ++i) {
        const key_range own = tile_columns(t, r0 + i, j0, cols);
        float *row = s_block + i * lds;
        fbatch m = fbatch::load_aligned(score_max + (r0 + i) * W);
        for (int v = 0; v < vectors; ++v) {
            const int64_t c = c0 + v * W;
            fbatch x = fbatch::load_aligned(row + v * W);
            if (c < own.lo || c + W > own.hi) {
                x = hide_outside<Arch>(x, c, own);
                x.store_aligned(row + v * W);
            }
            m = xsimd::max(x, m);  // x86 max returns its second operand on NaN
        }
        m.store_aligned(score_max + (r0 + i) * W);
    }
}

// The blocks of up to Rows rows of the key tile at j0 (cols keys) over its panel p, in order:
// visit(r0, rr, vectors, whole) for rows r0 .. r0+rr-1, with the panel's first `vectors` key
// vectors those rows need (panel_vectors; 0: the panel is hidden from every row of the block)
// and whether every row of the block sees them all (block_sees_all; false where vectors is 0).
template <class Arch, int Rows, class Visit>
void panel_blocks(const attention_tile &t, int64_t j0, int64_t cols, int64_t p, Visit visit) {
    constexpr int W = lanes<Arch>;
    constexpr int nr = panel_keys<Arch>;
    constexpr int nrv = attention_blocking<Arch>::nr_vectors;
    // a whole panel every row sees (no causal diagonal, window edge or end of keys in it):
    // every block whole, without asking each block (the tiles of a plain call are all so)
    const key_range all = shared_columns(t, 0, t.rows, j0, cols);
    const bool every_whole = all.lo <= p * nr && p * nr + nr <= all.hi;
    for (int64_t r0 = 0; r0 < t.rows; r0 += Rows) {
        const int rr = static_cast<int>(t.rows - r0 < Rows ? t.rows - r0 : Rows);
        if (every_whole) {
            visit(r0, rr, nrv, true);
            continue;
        }
        const int vectors = panel_vectors<Arch>(t, r0, rr, j0, p * nr);
        const bool whole = vectors > 0 && block_sees_all(t, r0, rr, j0, cols, p * nr, p * nr + vectors * W);
        visit(r0, rr, vectors, whole);
    }
}

// One score block of panel_blocks (vectors > 0): its S formed by form(r0, rr, p, vectors, s_at,
// row_max), S of row r0 at s_at = s + r0 bc + p nr (rows bc apart), raising the lane-wise
// maxima at row_max: score_max's rows where the block is whole, else scratch ones (set only
// for a cut block, never read) and hide_block hides the lanes and raises score_max.
template <class Arch, int Rows, class Form>
void score_block(const attention_tile &t, int64_t j0, int64_t cols, int64_t p, int64_t r0, int rr,
                 int vectors, bool whole, float *s, float *score_max, Form &form) {
    constexpr int W = lanes<Arch>;
    constexpr int nr = panel_keys<Arch>;
    constexpr int64_t bc = attention_blocking<Arch>::bc;
    alignas(64) float cut_max[Rows * W];
    if (!whole) std::fill_n(cut_max, Rows * W, 0.0f);
    float *s_at = s + r0 * bc + p * nr;
    form(r0, rr, p, vectors, s_at, whole ? score_max + r0 * W : cut_max);
    if (!whole) hide_block<Arch>(t, r0, rr, j0, cols, p * nr, vectors, s_at, bc, score_max);
}

// The score blocks of the key tile at j0 (cols keys, `panels` panels), for every scores
// policy: score_max[r] set to -inf, then for each panel p (one K panel stays in L1 across the
// row blocks) each block of panel_blocks its rows see some of, by score_block. So score_max
// ends as each row's max over its visible scores (NaN left out), whatever forms the products.
template <class Arch, int Rows, class Form>
void score_blocks(const attention_tile &t, int64_t j0, int64_t cols, int64_t panels, float *s,
                  float *score_max, Form form) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    for (int64_t r = 0; r < t.rows; ++r)
        fbatch(-std::numeric_limits<float>::infinity()).store_aligned(score_max + r * W);
    for (int64_t p = 0; p < panels; ++p)
        panel_blocks<Arch, Rows>(t, j0, cols, p, [&](int64_t r0, int rr, int vectors, bool whole) {
            if (vectors > 0) score_block<Arch, Rows>(t, j0, cols, p, r0, rr, vectors, whole, s, score_max, form);
        });
}

// Row r of S for keys j0 + c, c in cols = [lo, hi) (a range of tile_columns): the score
// definition applied to the scaled scores in s_row, in its order: softcap, + mask (mask_row
// at key j0), - ALiBi slope |i' - j| (the distance an integer, converted once: exact up to
// 2^24); lanes outside [lo, hi) -> -inf. Returns the max over [lo, hi) (-inf when empty, NaN
// when a score is NaN). Only vectors from round_down(lo) to round_up(hi) are touched.
template <class Arch>
float finish_score_row(const attention_tile &t, int64_t r, float *s_row, key_range cols,
                       const float *mask_row, int64_t j0) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const fbatch index = lane_index<Arch>();
    const bool cap = t.softcap > 0.0f;
    const fbatch softcap(t.softcap);
    const float slope = t.alibi_slopes ? t.alibi_slopes[r * t.head_step()] : 0.0f;
    const int64_t at = t.query(r) + t.visibility.offset;  // i', the query on the key axis
    fbatch row_max(neg_inf);
    xsimd::batch_bool<float, Arch> nan_seen(false);
    for (int64_t c = cols.lo / W * W; c < cols.hi; c += W) {
        fbatch x = fbatch::load_aligned(s_row + c);
        if (cap) x = softcap * kernels::tanh<Arch>(x / softcap);
        if (mask_row) {
            if (c + W <= cols.hi) {
                x += fbatch::load_unaligned(mask_row + c);
            } else {
                alignas(64) float part[W] = {};
                for (int64_t i = 0; i < cols.hi - c; ++i) part[i] = mask_row[c + i];
                x += fbatch::load_aligned(part);
            }
        }
        if (t.alibi_slopes) {  // |i' - j| for j = j0 + c + lane: i' - j0 - c exact, minus lanes
            const fbatch distance = xsimd::abs(fbatch(static_cast<float>(at - j0 - c)) - index);
            x -= fbatch(slope) * distance;
        }
        if (c < cols.lo || c + W > cols.hi) x = hide_outside<Arch>(x, c, cols);
        x.store_aligned(s_row + c);
        row_max = xsimd::max(x, row_max);  // x86 max returns its second operand on NaN
        nan_seen = nan_seen | xsimd::isnan(x);
    }
    if (xsimd::any(nan_seen)) return std::numeric_limits<float>::quiet_NaN();
    return reduce_max<Arch>(row_max);
}

// finish_score_row for plain scaled scores (no softcap, mask or ALiBi) where a row sees part
// of the tile (the causal diagonal, a window's edge): only the vectors cut by an end of
// [lo, hi) are rewritten (-inf outside), the others read for the max and left as they are.
// Returns the max over [lo, hi), NaN left out as the score kernels' lane-wise maxima leave
// it (a NaN score still makes the row's P, sum and output NaN through e^(S - m)); -inf when
// nothing visible is finite, which the caller hands to finish_score_row to tell a NaN row.
template <class Arch>
float plain_row_max(float *s_row, key_range cols) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const int64_t first = cols.lo / W * W, last = (cols.hi - 1) / W * W;
    auto hide = [&](int64_t c) {  // one vector, -inf outside [lo, hi)
        const fbatch x = hide_outside<Arch>(fbatch::load_aligned(s_row + c), c, cols);
        x.store_aligned(s_row + c);
        return x;
    };
    fbatch m0 = xsimd::max(hide(first), fbatch(neg_inf)), m1(neg_inf);
    int64_t c = first + W;
    for (; c + W < last; c += 2 * W) {  // two chains of maxima
        m0 = xsimd::max(fbatch::load_aligned(s_row + c), m0);
        m1 = xsimd::max(fbatch::load_aligned(s_row + c + W), m1);
    }
    for (; c < last; c += W) m0 = xsimd::max(fbatch::load_aligned(s_row + c), m0);
    if (last > first) m1 = xsimd::max(hide(last), m1);
    return reduce_max<Arch>(xsimd::max(m0, m1));
}

// The running row max after a tile whose max is x: a NaN x (a NaN score: NaN in q, k or the
// mask) makes it NaN, so the row becomes NaN rather than reading as "nothing visible".
template <class Arch>
inline float running_max(float m, float x) { return x > m || x != x ? x : m; }

// Row r's sink logit (-inf: none), with which its running max and sum start: m = sink,
// l = e^(sink - m) = 1 (0 without a sink).
inline float row_sink(const attention_tile &t, int64_t r) {
    return t.sinks ? t.sinks[r * t.head_step()] : -std::numeric_limits<float>::infinity();
}

// p *= dropout factor of keys j0 + c .. j0 + c + W - 1 for a row whose generator key is
// row_key: fmix32(row_key ^ j * column_multiplier) < threshold drops (as dropout::dropped).
template <class Arch>
inline xsimd::batch<float, Arch> apply_dropout(const xsimd::batch<float, Arch> &p,
                                               uint32_t row_key, int64_t j, uint32_t threshold,
                                               float keep) {
    using fbatch = xsimd::batch<float, Arch>;
    using ubatch = xsimd::batch<uint32_t, Arch>;
    using ibatch = xsimd::batch<int32_t, Arch>;
    alignas(64) static constexpr uint32_t index[16] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                       8, 9, 10, 11, 12, 13, 14, 15};
    const ubatch cols = ubatch(static_cast<uint32_t>(j)) + ubatch::load_aligned(index);
    ubatch x = ubatch(row_key) ^ (cols * ubatch(dropout::column_multiplier));
    x ^= x >> 16;
    x *= ubatch(0x85ebca6bU);
    x ^= x >> 13;
    x *= ubatch(0xc2b2ae35U);
    x ^= x >> 16;
    // Unsigned x >= threshold, as a signed compare after flipping the sign bits.
    const ibatch xs = xsimd::bitwise_cast<ibatch>(x ^ ubatch(0x80000000U));
    const ibatch ts(static_cast<int32_t>(threshold ^ 0x80000000U));
    const ibatch keep_bits = xsimd::select(xs >= ts, xsimd::bitwise_cast<ibatch>(fbatch(keep)),
                                           ibatch(0));
    return p * xsimd::bitwise_cast<fbatch>(keep_bits);
}

// e^x for the f32 softmax's P, x = S - m <= 0: 2^(x log2 e) (exp2, 1.5 ulp), cheaper than
// exp by its range reduction (4 vector operations of 14). Rounding x log2 e adds |x| 2^-24
// (and log2 e's own rounding 1.3e-8 |x|) to P's relative error, but P = e^x weighs it: the
// error it brings to the output is at most max |x| e^x 7.3e-8 = 2.7e-8 of the largest weight
// (at x = -1), under f32's half unit (attn-compare's errors against float64 unchanged).
template <class Arch>
ATTN_ALWAYS_INLINE xsimd::batch<float, Arch> softmax_exp(const xsimd::batch<float, Arch> &x) {
    return kernels::exp2<Arch>(x * xsimd::batch<float, Arch>(1.44269504088896341f));
}

// Row r's scores in columns [round_down(lo), hi) of the key tile at j0 become P = e^(S - m)
// in place, times the dropout factors when t drops; returns the lane-wise sum of P (taken
// before dropout). Scores outside [lo, hi) in those vectors must be -inf (finish_score_row).
// P = softmax_exp(S - m).
template <class Arch>
xsimd::batch<float, Arch> exp_scores_row(float *s_row, key_range cols, float m,
                                         const attention_tile &t, int64_t r, int64_t j0) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const fbatch shift(m);
    fbatch sum(0.0f);
    const int64_t from = cols.lo / W * W;
    if (!t.dropout_keys) {
        for (int64_t c = from; c < cols.hi; c += W) {
            const fbatch p = softmax_exp<Arch>(fbatch::load_aligned(s_row + c) - shift);
            sum += p;
            p.store_aligned(s_row + c);
        }
    } else {
        const uint32_t key = t.dropout_keys[r];
        for (int64_t c = from; c < cols.hi; c += W) {
            const fbatch p = softmax_exp<Arch>(fbatch::load_aligned(s_row + c) - shift);
            sum += p;
            apply_dropout<Arch>(p, key, j0 + c, t.dropout_threshold, t.dropout_keep)
                .store_aligned(s_row + c);
        }
    }
    return sum;
}

// The vectors of a tile row that hold P, as columns [lo, hi) in whole vectors: those of the
// visible columns `seen`, none while nothing is visible (m = -inf).
template <class Arch>
inline key_range p_vectors(key_range seen, float m) {
    constexpr int W = lanes<Arch>;
    if (m == -std::numeric_limits<float>::infinity()) return {0, 0};
    const int64_t from = seen.lo / W * W;
    return {from, seen.hi > seen.lo ? round_up(seen.hi, W) : from};
}

// Row r's P over the keys j0 .. j0+cols-1 of a tile, as f32 in place of its scores: e^(S - m)
// in the vectors holding the visible columns (exp_scores_row), 0 in every other vector up to
// cols; with nothing visible yet (m = -inf) all 0. Returns the lane-wise sum of P.
template <class Arch>
xsimd::batch<float, Arch> exp_tile_row(float *s_row, key_range seen, float m,
                                       const attention_tile &t, int64_t r, int64_t j0,
                                       int64_t cols) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const key_range held = p_vectors<Arch>(seen, m);
    const fbatch sum = held.hi > held.lo ? exp_scores_row<Arch>(s_row, seen, m, t, r, j0) : fbatch(0.0f);
    for (int64_t c = 0; c < held.lo; c += W) fbatch(0.0f).store_aligned(s_row + c);
    for (int64_t c = held.hi; c < cols; c += W) fbatch(0.0f).store_aligned(s_row + c);
    return sum;
}

}  // namespace attention_detail
ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
