// Fused scaled dot-product attention, flash-attention style, templated on the xsimd Arch.
//
// One call of attention_forward_tile handles a tile of at most br query rows of one
// (batch, query head) and streams the keys in tiles of bc:
//   S  = (scale Q) K_tile^T                      register-blocked, K packed in panels of nr
//   S += mask; hidden keys (causal, range) -> -inf
//   m' = max(m, rowmax S);  P = exp(S - m');  l = l exp(m - m') + rowsum P   (online softmax;
//   l kept lane-wise and summed across the lanes once at the end)
//   P *= dropout factors
//   O  = O exp(m - m') + P V_tile                V rows as whole vectors of dim_v
// and finally out = O / l, lse = m + log l. Only the br x bc tile S is ever stored.
//
// Everything here is a template on Arch (see vec_math.hpp for why no plain inline functions).
#pragma once

#include <cstdint>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "kernels/attention_args.hpp"
#include "kernels/attention_merge.hpp"
#include "kernels/attention_micro.hpp"
#include "kernels/elements.hpp"
#include "kernels/vec_math.hpp"
#include "ref/dropout.hpp"  // column_multiplier only: the vector fmix32 below mirrors it

namespace attn::kernels {

namespace attention_detail {

// Where each piece of a tile lives in the scratch (offsets in floats, 64-byte multiples).
template <class Arch>
struct scratch_layout {
    int64_t q_tile, scores, o_tile, row_max, row_sum, rescale, prev_max, sum_lanes, tile_lanes,
        score_max, k_panels, v_tile, total;
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
        k_panels = take(blk::bc * dim_qk);
        v_tile = take(blk::bc * dv_pad);
        total = at;
    }
};

// ---- tile steps -------------------------------------------------------------------------

// Rows this far ahead are prefetched while copying or packing K and V.
inline constexpr int64_t pack_prefetch_rows = 8;

// Asks for the cache lines of row[0 .. count) (elements of T), for reading or (Write) for
// writing.
template <class Arch, bool Write, class T>
inline void prefetch_row(const T *row, int64_t count) {
    constexpr int64_t per_line = 64 / sizeof(T);
    for (int64_t i = 0; i < count; i += per_line) __builtin_prefetch(row + i, Write ? 1 : 0, 3);
    if (count > 0) __builtin_prefetch(row + count - 1, Write ? 1 : 0, 3);
}

// The same for a row of type t at element offset i of base.
template <class Arch, bool Write>
inline void prefetch_row(const void *base, attn_dtype t, int64_t i, int64_t count) {
    if (t == ATTN_DTYPE_F32)
        prefetch_row<Arch, Write>(static_cast<const float *>(base) + i, count);
    else
        prefetch_row<Arch, Write>(static_cast<const uint16_t *>(base) + i, count);
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

// Panels of nr keys, [dim][nr] each, from rows k + j * k_ld (j < keys; zero for j >= keys),
// elements of type E widened to f32. On AVX-512, 16 keys x 16 dims at a time through a
// register transpose (16 loads and 16 stores instead of 256 of each); elsewhere, and at the
// edges, element by element.
template <class Arch, class E>
void pack_k_panels(const typename E::storage *k, int64_t k_ld, int64_t keys, int64_t dim,
                   int64_t panels, float *packed) {
    constexpr int nr = panel_keys<Arch>;
    for (int64_t p = 0; p < panels; ++p) {
        float *panel = packed + p * nr * dim;
        int n = 0;
        if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
            for (; n + 16 <= nr && p * nr + n + 16 <= keys; n += 16) {
                const int64_t j0 = p * nr + n;
                // K comes from far caches or memory: fetch the next 16 rows meanwhile
                for (int64_t i = 0; i < 16 && j0 + 16 + i < keys; ++i)
                    prefetch_row<Arch, false>(k + (j0 + 16 + i) * k_ld, dim);
                int64_t d = 0;
                for (; d + 16 <= dim; d += 16) {
                    xsimd::batch<float, Arch> r[16];
                    for (int i = 0; i < 16; ++i) r[i] = widen<Arch, E>(k + (j0 + i) * k_ld + d);
                    transpose_16x16<Arch>(r);
                    for (int c = 0; c < 16; ++c) r[c].store_unaligned(panel + (d + c) * nr + n);
                }
                for (; d < dim; ++d)
                    for (int i = 0; i < 16; ++i)
                        panel[d * nr + n + i] = widen_one<Arch, E>(k + (j0 + i) * k_ld + d);
            }
        }
        for (; n < nr; ++n) {
            const int64_t j = p * nr + n;
            if (j < keys) {
                const typename E::storage *row = k + j * k_ld;
                // K comes from far caches or memory, one row at a time: fetch rows ahead
                if (j + pack_prefetch_rows < keys)
                    prefetch_row<Arch, false>(row + pack_prefetch_rows * k_ld, dim);
                for (int64_t d = 0; d < dim; ++d) panel[d * nr + n] = widen_one<Arch, E>(row + d);
            } else {
                for (int64_t d = 0; d < dim; ++d) panel[d * nr + n] = 0.0f;
            }
        }
    }
}

// The same with K's type known at run time; k at key 0 of the rows to pack.
template <class Arch>
void pack_k_panels(const void *k, attn_dtype k_type, int64_t k_ld, int64_t keys, int64_t dim,
                   int64_t panels, float *packed) {
    switch (k_type) {
    case ATTN_DTYPE_BF16:
        pack_k_panels<Arch, bf16_elements>(static_cast<const uint16_t *>(k), k_ld, keys, dim,
                                           panels, packed);
        break;
    case ATTN_DTYPE_F16:
        pack_k_panels<Arch, f16_elements>(static_cast<const uint16_t *>(k), k_ld, keys, dim,
                                          panels, packed);
        break;
    default:
        pack_k_panels<Arch, f32_elements>(static_cast<const float *>(k), k_ld, keys, dim, panels,
                                          packed);
        break;
    }
}

// S[rows x panels*nr] (leading dimension bc) = qs[rows x dim] K^T for the given panels, and
// score_max[r][0..W) the lane-wise max of row r's computed scores (NaN left out).
// Column c is visible to row r only if c <= r + last_col0 (causal); a (row block, panel)
// pair entirely past that is skipped, and on the diagonal only the key vectors the block's
// last row sees are computed: the scores past them are never read.
template <class Arch>
void tile_scores(const float *qs, int64_t dim, int64_t rows, const float *panels_at,
                 int64_t panels, int64_t last_col0, float *s, float *score_max) {
    using blk = attention_blocking<Arch>;
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int nr = panel_keys<Arch>;
    constexpr int W = lanes<Arch>;
    const fbatch neg_inf(-std::numeric_limits<float>::infinity());
    for (int64_t r = 0; r < rows; ++r) neg_inf.store_aligned(score_max + r * W);
    for (int64_t p = 0; p < panels; ++p)  // one K panel stays in L1 across the row blocks
        for (int64_t r0 = 0; r0 < rows; r0 += blk::mr_s) {
            const int rr = static_cast<int>(rows - r0 < blk::mr_s ? rows - r0 : blk::mr_s);
            const int64_t seen = r0 + rr + last_col0 - p * nr;  // keys of the panel in view
            if (seen <= 0) continue;
            const int vectors = seen >= nr ? blk::nr_vectors : static_cast<int>((seen + W - 1) / W);
            score_block_rows<Arch, blk::mr_s>(rr, vectors, qs + r0 * dim, dim,
                                              panels_at + p * nr * dim, dim,
                                              s + r0 * blk::bc + p * nr, blk::bc,
                                              score_max + r0 * W);
        }
}

// Row r of S for keys j0 + c, c < visible: adds the mask, sets lanes c >= visible to -inf,
// returns the row max (-inf when visible == 0, NaN when a score is NaN). Only the first
// round_up(visible, W) columns are touched.
template <class Arch>
float mask_score_row(float *s_row, int64_t visible, const float *mask_row) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const fbatch index = lane_index<Arch>();
    fbatch row_max(neg_inf);
    xsimd::batch_bool<float, Arch> nan_seen(false);
    for (int64_t c = 0; c < visible; c += W) {
        fbatch x = fbatch::load_aligned(s_row + c);
        if (mask_row) {
            if (c + W <= visible) {
                x += fbatch::load_unaligned(mask_row + c);
            } else {
                alignas(64) float part[W] = {};
                for (int64_t i = 0; i < visible - c; ++i) part[i] = mask_row[c + i];
                x += fbatch::load_aligned(part);
            }
        }
        if (c + W > visible)
            x = xsimd::select(index < fbatch(static_cast<float>(visible - c)), x, fbatch(neg_inf));
        x.store_aligned(s_row + c);
        row_max = xsimd::max(x, row_max);  // x86 max returns its second operand on NaN
        nan_seen = nan_seen | xsimd::isnan(x);
    }
    if (xsimd::any(nan_seen)) return std::numeric_limits<float>::quiet_NaN();
    return reduce_max<Arch>(row_max);
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

template <class Arch>
inline int64_t visible_keys(const attention_tile &t, int64_t r, int64_t j0, int64_t cols) {
    int64_t n = t.first_row + r + t.causal_offset + 1 - j0;  // keys j0 .. j0+n-1 pass causal
    if (n > cols) n = cols;
    return n < 0 ? 0 : n;
}

// V rows for keys j0 .. j0+keys-1 readable as full f32 vectors: in place when they are
// (f32, and padded or dim_v a whole number of vectors), else widened, zero padded, into the
// scratch.
template <class Arch>
const float *v_tile_rows(const attention_tile &t, int64_t j0, int64_t keys, float *v_pad,
                         int64_t *ldv) {
    constexpr int W = lanes<Arch>;
    if (t.v_type == ATTN_DTYPE_F32 && (t.v_padded || t.dim_v % W == 0)) {
        *ldv = t.v_ld;
        return static_cast<const float *>(t.v) + j0 * t.v_ld;
    }
    const int64_t dv_pad = round_up(t.dim_v, W);
    for (int64_t j = 0; j < keys; ++j) {
        float *dst = v_pad + j * dv_pad;
        widen_row<Arch>(element_at(t.v, t.v_type, (j0 + j) * t.v_ld), t.v_type, t.dim_v, dst);
        for (int64_t c = t.dim_v; c < dv_pad; ++c) dst[c] = 0.0f;
    }
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
    switch (b_type) {
    case ATTN_DTYPE_BF16: return dot<Arch, bf16_elements>(a, static_cast<const uint16_t *>(b), n);
    case ATTN_DTYPE_F16: return dot<Arch, f16_elements>(a, static_cast<const uint16_t *>(b), n);
    default: return dot<Arch, f32_elements>(a, static_cast<const float *>(b), n);
    }
}

// S[r, c] = qs[r, :] . K[j0 + c, :] for c < cols, straight from the K rows (k at key j0):
// for a few query rows (decoding) packing K would cost more than the products themselves.
template <class Arch>
void tile_scores_direct(const float *qs, int64_t dim, int64_t rows, const void *k,
                        attn_dtype k_type, int64_t k_ld, int64_t cols, float *s) {
    for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 0; r < rows; ++r)
            s[r * attention_blocking<Arch>::bc + c] =
                dot<Arch>(qs + r * dim, element_at(k, k_type, c * k_ld), k_type, dim);
}

// S = (scale Q) K^T for the keys j0 .. j0+cols-1: K from the packed head, or straight from
// its rows for a few query rows, or packed now into k_buf. Returns whether score_max holds
// each row's max over the tile's whole panels (not on the direct path).
template <class Arch>
bool tile_scores_for(const attention_tile &t, const float *qs, int64_t j0, int64_t cols,
                     float *s, float *k_buf, float *score_max) {
    constexpr int nr = panel_keys<Arch>;
    const int64_t panels = (cols + nr - 1) / nr;
    const int64_t last_col0 = t.first_row + t.causal_offset - j0;
    const void *k_at = element_at(t.k, t.k_type, j0 * t.k_ld);
    if (t.k_packed) {
        tile_scores<Arch>(qs, t.dim_qk, t.rows, t.k_packed + (j0 / nr) * nr * t.dim_qk, panels,
                          last_col0, s, score_max);
    } else if (t.rows <= attention_direct_rows) {
        tile_scores_direct<Arch>(qs, t.dim_qk, t.rows, k_at, t.k_type, t.k_ld, cols, s);
        return false;
    } else {
        pack_k_panels<Arch>(k_at, t.k_type, t.k_ld, t.len_kv - j0, t.dim_qk, panels, k_buf);
        tile_scores<Arch>(qs, t.dim_qk, t.rows, k_buf, panels, last_col0, s, score_max);
    }
    return true;
}

// The running row max after a tile whose max is x: a NaN x (a NaN score: NaN in q, k or the
// mask) makes it NaN, so the row becomes NaN rather than reading as "nothing visible".
template <class Arch>
inline float running_max(float m, float x) { return x > m || x != x ? x : m; }

// Row r's first `visible` scores of the key tile at j0 become P = e^(S - m) in place, times the dropout factors when t drops; returns the lane-wise sum of P (taken
// before dropout). Whole vectors: scores past `visible` in the last one must be -inf.
template <class Arch>
xsimd::batch<float, Arch> exp_scores_row(float *s_row, int64_t visible, float m,
                                         const attention_tile &t, int64_t r, int64_t j0) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    // e^(S - m) by exp on the unrounded difference: 2^((S - m) log2e) rounds the product, an
    // error of |S - m| 2^-24 in the exponent (and log2e's own rounding, 1.3e-8 relative), which
    // for scores of magnitude ~100 is several times the rounding of S itself.
    const fbatch shift(m);
    fbatch sum(0.0f);
    if (!t.dropout_keys) {
        for (int64_t c = 0; c < visible; c += W) {
            const fbatch p = kernels::exp<Arch>(fbatch::load_aligned(s_row + c) - shift);
            sum += p;
            p.store_aligned(s_row + c);
        }
    } else {
        const uint32_t key = t.dropout_keys[r];
        for (int64_t c = 0; c < visible; c += W) {
            const fbatch p = kernels::exp<Arch>(fbatch::load_aligned(s_row + c) - shift);
            sum += p;
            apply_dropout<Arch>(p, key, j0 + c, t.dropout_threshold, t.dropout_keep)
                .store_aligned(s_row + c);
        }
    }
    return sum;
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
            // the keys every row of the block sees, for the whole block; then, near the
            // causal diagonal, each row's few further keys alone: a key hidden from a row
            // is never read for it (a NaN or inf in its V row cannot leak backwards)
            const int64_t shared = visible_keys<Arch>(t, r0, j0, cols);
            pv_block_any<Arch, blk::mr_o>(rr, nvec, s + r0 * blk::bc, blk::bc, shared,
                                          v_at + c0 * W, ldv, o + r0 * dv_pad + c0 * W, dv_pad,
                                          rescale + r0);
            for (int64_t r = r0 + 1; r < r0 + rr; ++r) {
                const int64_t more = visible_keys<Arch>(t, r, j0, cols) - shared;
                if (more <= 0) continue;
                pv_block_vectors<Arch, 1, blk::nv>(nvec, s + r * blk::bc + shared, blk::bc, more,
                                                   v_at + shared * ldv + c0 * W, ldv,
                                                   o + r * dv_pad + c0 * W, dv_pad,
                                                   &unit_rescale);
            }
        }
    }
}

// How a tile's scores are formed, the one part of the tile loop that depends on the compute
// type: f32 products here (Q scaled and widened into the q region, K packed in f32 panels);
// attention_bf16.hpp has the bf16-pair one. load_q fills the scratch's q region for the tile;
// tile writes S = scale Q K^T for keys j0 .. j0+cols-1 (see tile_scores_for); pv adds P V
// (see pv_tile_f32; s may be overwritten).
template <class Arch>
struct f32_scores {
    static void load_q(const attention_tile &t, float *q_region) { load_scaled_q<Arch>(t, q_region); }
    static bool tile(const attention_tile &t, const float *q_region, int64_t j0, int64_t cols,
                     float *s, float *k_buf, float *score_max) {
        return tile_scores_for<Arch>(t, q_region, j0, cols, s, k_buf, score_max);
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

// The packed K of one head: panels of nr keys (see attention_tile::k_packed), from rows of
// k_type.
template <class Arch>
void attention_pack_k(const void *k, attn_dtype k_type, int64_t k_ld, int64_t keys,
                      int64_t dim_qk, int64_t panels, float *packed) {
    attention_detail::pack_k_panels<Arch>(k, k_type, k_ld, keys, dim_qk, panels, packed);
}

// V rows [keys x dim_v] of v_type widened into padded[j * padded_ld] (f32), zero to padded_ld.
template <class Arch>
void attention_pad_v(const void *v, attn_dtype v_type, int64_t v_ld, int64_t keys,
                     int64_t dim_v, float *padded, int64_t padded_ld) {
    using namespace attention_detail;
    for (int64_t j = 0; j < keys; ++j) {
        float *dst = padded + j * padded_ld;
        if (j + pack_prefetch_rows < keys)
            prefetch_row<Arch, false>(v, v_type, (j + pack_prefetch_rows) * v_ld, dim_v);
        widen_row<Arch>(element_at(v, v_type, j * v_ld), v_type, dim_v, dst);
        for (int64_t c = dim_v; c < padded_ld; ++c) dst[c] = 0.0f;
    }
}

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
    const int64_t dv_pad = round_up(t.dim_v, W);
    constexpr int nr = panel_keys<Arch>;

    Scores::load_q(t, qs);
    for (int64_t i = 0; i < t.rows * dv_pad; i += W) fbatch(0.0f).store_aligned(o + i);
    // all br rows, so the rescale below runs on whole vectors (rows past t.rows stay empty)
    for (int64_t r = 0; r < blk::br; ++r) {
        m[r] = m_prev[r] = neg_inf;
        fbatch(0.0f).store_aligned(l_lanes + r * W);
    }

    for (int64_t j0 = t.key_begin; j0 < t.key_end; j0 += blk::bc) {
        const int64_t cols = t.key_end - j0 < blk::bc ? t.key_end - j0 : blk::bc;

        // S = (scale Q) K^T for this tile, and its row maxima over whole panels
        const bool maxima =
            Scores::tile(t, qs, j0, cols, s, t.scratch + at.k_panels, score_max) && cols % nr == 0;

        // online softmax: m' = max(m, rowmax S), P = exp(S - m'), sum P
        const bool last_tile = j0 + blk::bc >= t.key_end;
        for (int64_t r = 0; r < t.rows; ++r) {
            if (last_tile) {  // the output rows and the next Q rows, a row per row
                prefetch_row<Arch, true>(t.out, t.out_type, r * t.out_ld, t.dim_v);
                if (t.next_q && r < t.next_q_rows)
                    prefetch_row<Arch, false>(t.next_q, t.q_type, r * t.q_ld, t.dim_qk);
            }
            float *s_row = s + r * blk::bc;
            const int64_t visible = visible_keys<Arch>(t, r, j0, cols);
            const float *mask_row = t.mask ? t.mask + r * t.mask_ld + j0 : nullptr;
            // every key visible and unmasked: the max from S = Q K^T stands; else (or when
            // it is -inf: all scores -inf or NaN) a pass over the row masks it and finds it
            float tile_max = neg_inf;
            if (maxima && !mask_row && visible == cols)
                tile_max = reduce_max<Arch>(fbatch::load_aligned(score_max + r * W));
            if (tile_max == neg_inf) tile_max = mask_score_row<Arch>(s_row, visible, mask_row);
            const float m_new = running_max<Arch>(m[r], tile_max);
            int64_t c = 0;
            m_prev[r] = m[r];
            fbatch sum(0.0f);
            if (m_new != neg_inf) {  // else nothing visible yet: P = 0, O stays 0
                sum = exp_scores_row<Arch>(s_row, visible, m_new, t, r, j0);
                c = round_up(visible, W);
                m[r] = m_new;
            }
            sum.store_aligned(tile_lanes + r * W);
            for (; c < cols; c += W) fbatch(0.0f).store_aligned(s_row + c);
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
        for (int64_t j = t.key_end > t.key_begin ? t.key_end : t.key_begin; j < t.len_kv; ++j)
            w_row[j] = 0.0f;
    }
    for (int64_t j0 = t.key_begin; j0 < t.key_end; j0 += blk::bc) {
        const int64_t cols = t.key_end - j0 < blk::bc ? t.key_end - j0 : blk::bc;
        Scores::tile(t, qs, j0, cols, s, t.scratch + at.k_panels, t.scratch + at.score_max);
        for (int64_t r = 0; r < t.rows; ++r) {
            float *s_row = s + r * blk::bc;
            float *w_row = weights + r * weights_ld + j0;
            const float row_max = after_forward ? m[r] : t.lse[r];
            const int64_t visible = row_max == neg_inf ? 0 : visible_keys<Arch>(t, r, j0, cols);
            const float *mask_row = t.mask ? t.mask + r * t.mask_ld + j0 : nullptr;
            mask_score_row<Arch>(s_row, visible, mask_row);
            const fbatch shift(row_max), sum(after_forward ? l[r] : 1.0f);
            int64_t c = 0;
            for (; c < visible; c += W) {
                const fbatch p = kernels::exp<Arch>(fbatch::load_aligned(s_row + c) - shift) / sum;
                if (c + W <= cols) {
                    p.store_unaligned(w_row + c);
                } else {  // the tile's last, partial vector
                    p.store_aligned(s_row + c);
                    for (int64_t i = c; i < cols; ++i) w_row[i] = s_row[i];
                }
            }
            for (c = visible; c < cols; ++c) w_row[c] = 0.0f;
        }
    }
}

template <class Arch>
void attention_weights_tile(const attention_tile &t, float *weights, int64_t weights_ld,
                            bool after_forward) {
    attention_weights_tile_with<Arch, attention_detail::f32_scores<Arch>>(t, weights, weights_ld,
                                                                         after_forward);
}

}  // namespace attn::kernels
