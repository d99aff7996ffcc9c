// The fused attention backward on AMX tiles, for the amx and amx_emulated levels: the tile loop
// of attention_backward.hpp (one key tile of bk keys against one head's query rows, in steps
// of br rows; the same row statistics and the same gradient_row for P and dS between the
// products), with its five products in bf16 on tiles, summed in f32:
//   S  = Q K^T     A: Q rows in bf16 [br][dq32]        B: K^T pairs [dq32/2][bk][2]
//   dP = dO V^T    A: dO rows in bf16 [br][dv32]       B: V^T pairs [dv32/2][bk][2]
//   dV += P^T dO   A: (P z)^T in bf16 [bk][br]          B: dO pairs of rows [br/2][dv32][2]
//   dK += dS^T Q   A: dS^T in bf16 [bk][br]             B: Q pairs of rows [br/2][dq32][2]
//   dQ += dS K     A: dS rows in bf16 [br][bk]          B: K pairs of keys [bk/2][dq32][2]
// (dq32, dv32: the dims rounded up to 32, one A row of a tile; zeros past the dims, the keys
// and the step's rows). The driver takes this kernel only when every product may be bf16: q,
// k, v, out stored in bf16 (S and dP are then exact products of stored values; P is rounded
// for dV as out is bf16, dS for dQ as k is and for dK as q is), or ATTN_FPMATH_BF16 (f32 and
// f16 values rounded to bf16 once, when loaded). S is scaled in f32 after its product (Q is
// not scaled in bf16, which would round again), so it has the amx forward's bits; dK is
// scaled when written, dQ by the driver.
// Each tile product runs over the rows (or keys) some row (key) of its 16-row block sees, in
// whole 32-row (32-key) steps: P and dS are 0 for the hidden pairs inside, so they add
// nothing, and work hidden from a whole block (window, causal limit) is skipped. Unlike the
// f32 kernel, which cuts each product per row, a key (or query row) hidden from one row of a
// block but seen by another is read for it, times a zero: a non-finite value stored there
// reaches that row's gradient.
// The same source runs on the real tiles and on the model (Tiles, tiles.hpp); every tile is
// 16 rows x 64 bytes, configured where the kernel starts and released where it ends.
// Needs the avx512_bf16 flags; included by src/kernels/amx/tables.cpp only.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/amx/attention_amx.hpp"
#include "kernels/amx/tiles.hpp"
#include "kernels/attention_backward.hpp"
#include "kernels/elements.hpp"

namespace attn::kernels::amx {
namespace backward_amx_detail {

using attention_amx_detail::dp_steps;
constexpr int64_t bk = backward_bk;  // keys per tile
// Query rows per step: four 32-row depth steps of dV and dK's products per load and store of
// their accumulator tiles.
constexpr int64_t br = 128;
constexpr int64_t block = 16;        // rows of a tile
constexpr int64_t depth = 32;        // bf16 of an A tile's row
static_assert(br % depth == 0 && bk % depth == 0, "whole depth steps");
using step_ranges = backward_detail::step_ranges_of<br>;

inline int64_t up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The scratch, in floats (a float holds two bf16), 64-byte aligned regions.
struct amx_layout {
    int64_t dq32, dv32, d32;
    int64_t k_rows, k_t, v_t, k_pairs, dk_acc, dv_acc, q_rows, do_rows, q_pairs, do_pairs,
        dq_tile, s, dp, p_t, ds_t, ds_rows, total;  // dq_tile: 16 rows
    amx_layout(int64_t dim_qk, int64_t dim_v) {
        dq32 = up(dim_qk, depth);
        dv32 = up(dim_v, depth);
        d32 = dq32 > dv32 ? dq32 : dv32;
        int64_t at = 0;
        auto take = [&at](int64_t floats) {
            const int64_t here = at;
            at += up(floats, 16);
            return here;
        };
        k_rows = take(bk * d32 / 2);
        k_t = take(bk * dq32 / 2);
        v_t = take(bk * dv32 / 2);
        k_pairs = take(bk * dq32 / 2);
        dk_acc = take(bk * dq32);
        dv_acc = take(bk * dv32);
        q_rows = take(br * dq32 / 2);
        do_rows = take(br * dv32 / 2);
        q_pairs = take(br * dq32 / 2);
        do_pairs = take(br * dv32 / 2);
        dq_tile = take(block * dq32);
        s = take(br * bk);
        dp = take(br * bk);
        p_t = take(bk * br / 2);
        ds_t = take(bk * br / 2);
        ds_rows = take(br * bk / 2);
        total = at;
    }
};

inline uint16_t *halves(float *x) { return reinterpret_cast<uint16_t *>(x); }
inline const uint32_t *words(const float *x) { return reinterpret_cast<const uint32_t *>(x); }

// dst[0 .. pad) = the row's dim elements of type t in bf16 (as stored, or rounded once),
// zeros past dim; all zeros when src is null.
inline void row_bf16(const void *src, attn_dtype t, int64_t dim, int64_t pad, uint16_t *dst) {
    int64_t c = 0;
    if (src && t == ATTN_DTYPE_BF16) {
        std::memcpy(dst, src, size_t(dim) * sizeof(uint16_t));
        c = dim;
    } else if (src) {
        for (; c < dim; ++c) dst[c] = attention_bf16_detail::bf16_bits(src, t, c);
    }
    for (; c < pad; ++c) dst[c] = 0;
}

// The 16 x 16 transpose of r (rows in, columns out), bits untouched.
inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    auto lo = [](__m512 a, __m512 b) {
        return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    auto hi = [](__m512 a, __m512 b) {
        return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    for (int i = 0; i < 4; ++i) {  // r[4i + j], 128-bit lane L: rows 4i .. 4i+3 of column 4L+j
        r[4 * i] = lo(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = hi(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = lo(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = hi(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int j = 0; j < 4; ++j) {
        const __m512 a = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        const __m512 b = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
        const __m512 c = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        const __m512 d = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
        t[j] = _mm512_shuffle_f32x4(a, c, 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(b, d, 0x88);
        t[8 + j] = _mm512_shuffle_f32x4(a, c, 0xdd);
        t[12 + j] = _mm512_shuffle_f32x4(b, d, 0xdd);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// dst[x][c] = src[c][x] for 32-bit words, c < 16 * row_blocks rows of src, x < 16 * col_blocks.
inline void transpose_words(const float *src, int64_t src_ld, int64_t row_blocks,
                            int64_t col_blocks, float *dst, int64_t dst_ld) {
    __m512 r[16];
    for (int64_t c0 = 0; c0 < 16 * row_blocks; c0 += 16)
        for (int64_t x0 = 0; x0 < 16 * col_blocks; x0 += 16) {
            for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(src + (c0 + i) * src_ld + x0);
            transpose16(r);
            for (int i = 0; i < 16; ++i) _mm512_store_ps(dst + (x0 + i) * dst_ld + c0, r[i]);
        }
}

// dst[c][r] = bf16(src[r][c]) (f32 src [rows][bk]) for r < rows32 (a multiple of 32), c < keys16.
inline void transpose_bf16(const float *src, int64_t rows32, int64_t keys16, uint16_t *dst) {
    __m512 lo[16], hi[16];
    for (int64_t r0 = 0; r0 < rows32; r0 += 32)
        for (int64_t c0 = 0; c0 < keys16; c0 += 16) {
            for (int i = 0; i < 16; ++i) {
                lo[i] = _mm512_load_ps(src + (r0 + i) * bk + c0);
                hi[i] = _mm512_load_ps(src + (r0 + 16 + i) * bk + c0);
            }
            transpose16(lo);
            transpose16(hi);
            for (int c = 0; c < 16; ++c)
                _mm512_store_si512(dst + (c0 + c) * br + r0,
                                   (__m512i)_mm512_cvtne2ps_pbh(hi[c], lo[c]));
        }
}

// dst[x][2c + h] = row (2x + h)'s element c: rows paired for the B tiles, x < rows / 2.
inline void pair_rows(const uint16_t *src, int64_t ld, int64_t rows, uint16_t *dst) {
    alignas(64) static const uint16_t lo_idx[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5,
                                                    37, 6, 38, 7, 39, 8, 40, 9, 41, 10, 42,
                                                    11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i lo = _mm512_load_si512(lo_idx);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int64_t x = 0; x < rows / 2; ++x)
        for (int64_t c = 0; c < ld; c += 32) {
            const __m512i a = _mm512_loadu_si512(src + 2 * x * ld + c);
            const __m512i b = _mm512_loadu_si512(src + (2 * x + 1) * ld + c);
            _mm512_storeu_si512(dst + x * 2 * ld + 2 * c, _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512(dst + x * 2 * ld + 2 * c + 32, _mm512_permutex2var_epi16(a, hi, b));
        }
}

template <class Tiles, int NV>
void product_nv(bool accumulate, float *c, int64_t ldc, const uint32_t *a, int64_t a_ld,
                const uint16_t *b, int64_t b_ld, int64_t steps) {
    using namespace attention_amx_detail;
    if (accumulate) load_c<Tiles, 0, NV>(c, ldc * 4);
    else zero_c<Tiles, 0, NV>();
    // A: rows a_ld words apart, a step 16 words on; B: rows b_ld words, a step 16 rows on
    dp_steps<Tiles, NV>(a, 16, a_ld * 4, b, 16 * b_ld * 2, b_ld * 4, steps);
    store_c<Tiles, 0, NV>(c, ldc * 4);
}

// c[16 x 16 nv] (f32 rows ldc apart) (+)= a[16 x 32 steps] b: A in bf16 rows of a_ld words,
// B in pair rows of b_ld words (16 pair rows a step), tiles of 16 columns side by side.
template <class Tiles>
void product(int64_t nv, bool accumulate, float *c, int64_t ldc, const uint32_t *a,
             int64_t a_ld, const uint16_t *b, int64_t b_ld, int64_t steps) {
    for (int64_t v = 0; v < nv; v += 4) {
        const int64_t n = nv - v < 4 ? nv - v : 4;
        float *cv = c + v * 16;
        const uint16_t *bv = b + v * 32;
        if (n == 4) product_nv<Tiles, 4>(accumulate, cv, ldc, a, a_ld, bv, b_ld, steps);
        else if (n == 3) product_nv<Tiles, 3>(accumulate, cv, ldc, a, a_ld, bv, b_ld, steps);
        else if (n == 2) product_nv<Tiles, 2>(accumulate, cv, ldc, a, a_ld, bv, b_ld, steps);
        else product_nv<Tiles, 1>(accumulate, cv, ldc, a, a_ld, bv, b_ld, steps);
    }
}

// The key tile, once per head group: K^T and V^T pairs (S, dP), K pairs of keys (dQ), the
// dK, dV accumulators zeroed.
inline void load_key_tile(const struct attention_backward_tile &t, const amx_layout &at,
                          float *base) {
    const size_t kv = attn_dtype_size(t.kv_type);
    auto key_rows = [&](const void *x, int64_t ld, int64_t dim, int64_t pad) {
        const char *bytes = static_cast<const char *>(x);
        for (int64_t c = 0; c < bk; ++c)
            row_bf16(c < t.keys ? bytes + size_t(c * ld) * kv : nullptr, t.kv_type, dim, pad,
                     halves(base + at.k_rows) + c * pad);
    };
    key_rows(t.k, t.k_ld, t.dim_qk, at.dq32);
    transpose_words(base + at.k_rows, at.dq32 / 2, bk / 16, at.dq32 / 32, base + at.k_t, bk);
    pair_rows(halves(base + at.k_rows), at.dq32, bk, halves(base + at.k_pairs));
    key_rows(t.v, t.v_ld, t.dim_v, at.dv32);
    transpose_words(base + at.k_rows, at.dv32 / 2, bk / 16, at.dv32 / 32, base + at.v_t, bk);
    std::memset(base + at.dk_acc, 0, sizeof(float) * size_t(bk * at.dq32));
    std::memset(base + at.dv_acc, 0, sizeof(float) * size_t(bk * at.dv32));
}

// The step's operands: Q and dO rows in bf16 (zero past `rows` and for rows without
// gradient), and their pairs of rows.
inline void load_rows(const struct attention_backward_tile &t, const amx_layout &at, float *base,
                      int64_t i0, int64_t rows) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const size_t qb = attn_dtype_size(t.q_type), ob = attn_dtype_size(t.out_type);
    for (int64_t r = 0; r < br; ++r) {
        const bool live = r < rows && t.row_max[i0 + r] != neg_inf;
        const char *q = static_cast<const char *>(t.q) + size_t((i0 + r) * t.q_ld) * qb;
        const char *g = static_cast<const char *>(t.dout) + size_t((i0 + r) * t.dout_ld) * ob;
        row_bf16(live ? q : nullptr, t.q_type, t.dim_qk, at.dq32,
                 halves(base + at.q_rows) + r * at.dq32);
        row_bf16(live ? g : nullptr, t.out_type, t.dim_v, at.dv32,
                 halves(base + at.do_rows) + r * at.dv32);
    }
    pair_rows(halves(base + at.q_rows), at.dq32, br, halves(base + at.q_pairs));
    pair_rows(halves(base + at.do_rows), at.dv32, br, halves(base + at.do_pairs));
}

// S (scaled) and dP for the 16-row blocks and 16-key tiles some row of the block sees.
template <class Tiles>
void score_products(const step_ranges &seen, float scale, const amx_layout &at, float *base) {
    const __m512 scale_v = _mm512_set1_ps(scale);
    for (int64_t r0 = 0; r0 < seen.rows; r0 += block) {
        const int64_t last = (seen.rows - r0 < block ? seen.rows : r0 + block) - 1;
        const int64_t lo = seen.row_lo[r0] / block * block, hi = up(seen.row_hi[last], block);
        if (hi <= lo) continue;
        const int64_t nv = (hi - lo) / block;
        float *s = base + at.s + r0 * bk + lo;
        product<Tiles>(nv, false, s, bk, words(base + at.q_rows) + r0 * at.dq32 / 2, at.dq32 / 2,
                       halves(base + at.k_t) + 2 * lo, bk, at.dq32 / depth);
        product<Tiles>(nv, false, base + at.dp + r0 * bk + lo, bk,
                       words(base + at.do_rows) + r0 * at.dv32 / 2, at.dv32 / 2,
                       halves(base + at.v_t) + 2 * lo, bk, at.dv32 / depth);
        for (int64_t r = 0; r < block; ++r)
            for (int64_t c = 0; c < hi - lo; c += 16)
                _mm512_store_ps(s + r * bk + c,
                                _mm512_mul_ps(_mm512_load_ps(s + r * bk + c), scale_v));
    }
}

// acc[keys x dim] += A^T b over the rows each 16-key block is seen by: A^T = a_t [bk][br] bf16,
// b the step's pairs of rows [br/2][dim32][2].
template <class Tiles>
void key_products(const step_ranges &seen, int64_t keys, const float *a_t, const float *b,
                  int64_t dim32, float *acc) {
    for (int64_t c0 = 0; c0 < keys; c0 += block) {
        const int64_t last = (keys - c0 < block ? keys : c0 + block) - 1;
        const int64_t lo = seen.key_first[c0] / depth * depth, hi = up(seen.key_end[last], depth);
        if (hi <= lo) continue;
        product<Tiles>(dim32 / 16, true, acc + c0 * dim32, dim32, words(a_t) + c0 * br / 2 + lo / 2,
                       br / 2, reinterpret_cast<const uint16_t *>(b) + lo * dim32, dim32,
                       (hi - lo) / depth);
    }
}

// dq[rows x dim] += dS K over the keys each 16-row block sees: on dq's rows in place when a
// block has 16 rows of whole tiles, else on a padded copy of them.
template <class Tiles>
void query_products(const struct attention_backward_tile &t, const step_ranges &seen,
                    int64_t i0, const amx_layout &at, float *base) {
    for (int64_t r0 = 0; r0 < seen.rows; r0 += block) {
        const int64_t rr = seen.rows - r0 < block ? seen.rows - r0 : block;
        const int64_t lo = seen.row_lo[r0] / depth * depth;
        const int64_t hi = up(seen.row_hi[r0 + rr - 1], depth);
        if (hi <= lo) continue;
        float *dq = t.dq + (i0 + r0) * t.dq_ld;
        const bool in_place = rr == block && t.dim_qk == at.dq32;
        float *c = in_place ? dq : base + at.dq_tile;
        const int64_t ldc = in_place ? t.dq_ld : at.dq32;
        if (!in_place)
            for (int64_t r = 0; r < rr; ++r) {
                std::memcpy(c + r * ldc, dq + r * t.dq_ld, sizeof(float) * size_t(t.dim_qk));
                for (int64_t x = t.dim_qk; x < at.dq32; ++x) c[r * ldc + x] = 0.0f;
            }
        product<Tiles>(at.dq32 / 16, true, c, ldc, words(base + at.ds_rows) + r0 * bk / 2 + lo / 2,
                       bk / 2, halves(base + at.k_pairs) + lo * at.dq32, at.dq32,
                       (hi - lo) / depth);
        if (!in_place)
            for (int64_t r = 0; r < rr; ++r)
                std::memcpy(dq + r * t.dq_ld, c + r * ldc, sizeof(float) * size_t(t.dim_qk));
    }
}

// One step of rows [i0, i0 + rows).
template <class Arch, class Tiles>
void backward_step(const struct attention_backward_tile &t, const amx_layout &at, int64_t i0,
                   int64_t rows) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    float *base = t.scratch;
    load_rows(t, at, base, i0, rows);
    const step_ranges seen(t, i0, rows);
    score_products<Tiles>(seen, t.scale, at, base);
    float *p = base + at.s, *ds = base + at.dp;
    const int64_t rows32 = up(rows, depth), keys16 = up(t.keys, block);
    for (int64_t r = 0; r < rows32; ++r) {
        if (r < rows) {
            const bool none = t.row_max[i0 + r] == neg_inf;
            backward_detail::gradient_row<Arch>(t, i0 + r, none ? key_range{0, 0} : seen.row(r),
                                                p + r * bk, ds + r * bk);
        } else {
            std::memset(p + r * bk, 0, sizeof(float) * size_t(bk));
            std::memset(ds + r * bk, 0, sizeof(float) * size_t(bk));
        }
        uint16_t *ds16 = halves(base + at.ds_rows) + r * bk;
        for (int64_t c = 0; c < bk; c += 32)
            _mm512_store_si512(ds16 + c,
                               (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(ds + r * bk + c + 16),
                                                            _mm512_load_ps(ds + r * bk + c)));
    }
    transpose_bf16(p, rows32, keys16, halves(base + at.p_t));
    transpose_bf16(ds, rows32, keys16, halves(base + at.ds_t));
    // dV += (P z)^T dO and dK += dS^T Q (Q unscaled: dK is scaled when written)
    key_products<Tiles>(seen, t.keys, base + at.p_t, base + at.do_pairs, at.dv32, base + at.dv_acc);
    key_products<Tiles>(seen, t.keys, base + at.ds_t, base + at.q_pairs, at.dq32, base + at.dk_acc);
    query_products<Tiles>(t, seen, i0, at, base);
}

// dK = scale acc_k, dV = acc_v, rounded once to kv_type.
template <class Arch>
void write_key_gradients(const struct attention_backward_tile &t, const amx_layout &at) {
    const size_t kv = attn_dtype_size(t.kv_type);
    float *acc_k = t.scratch + at.dk_acc, *acc_v = t.scratch + at.dv_acc;
    for (int64_t c = 0; c < t.keys; ++c) {
        float *k_row = acc_k + c * at.dq32;
        for (int64_t x = 0; x < t.dim_qk; ++x) k_row[x] *= t.scale;
        narrow_row<Arch>(k_row, t.dim_qk, static_cast<char *>(t.dk) + size_t(c * t.dk_ld) * kv,
                         t.kv_type);
        narrow_row<Arch>(acc_v + c * at.dv32, t.dim_v,
                         static_cast<char *>(t.dv) + size_t(c * t.dv_ld) * kv, t.kv_type);
    }
}

}  // namespace backward_amx_detail

// ---- entry points (the amx and amx_emulated levels' attention_backward_*_bf16) -------------

inline int64_t attention_backward_scratch_floats_amx(int64_t dim_qk, int64_t dim_v) {
    return backward_amx_detail::amx_layout(dim_qk, dim_v).total;
}

template <class Arch, class Tiles>
void attention_backward_tile_amx(const struct attention_backward_tile &t) {
    using namespace backward_amx_detail;
    const amx_layout at(t.dim_qk, t.dim_v);
    const tile_guard<Tiles> guard(attention_amx_detail::attention_config());
    if (t.first_head) load_key_tile(t, at, t.scratch);
    for (int64_t i0 = t.row_begin; i0 < t.row_end; i0 += br)
        backward_step<Arch, Tiles>(t, at, i0, t.row_end - i0 < br ? t.row_end - i0 : br);
    if (t.last_head) write_key_gradients<Arch>(t, at);
}

}  // namespace attn::kernels::amx
