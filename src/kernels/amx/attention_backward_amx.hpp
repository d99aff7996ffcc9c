// The fused attention backward on AMX tiles, for the amx and amx_emulated levels: the tile loop
// of attention_backward.hpp (one key tile of bk keys against one head's query rows, in steps
// of br rows; the same row statistics and the same gradient_row for P and dS between the
// products), with its five products in bf16 on tiles, summed in f32:
//   S  = Q K^T          A: Q rows in bf16 [br][dq32]    B: K^T pairs [dq32/2][bk][2]
//   dP = dO V^T         A: dO rows in bf16 [br][dv32]   B: V^T pairs [dv32/2][bk][2]
//   dV^T += dO^T (P z)  A: dO^T, bf16 [rows/32][dv32][32]  B: P z pairs of rows [br/2][bk][2]
//   dK^T += Q^T dS      A: Q^T, bf16 [rows/32][dq32][32]   B: dS pairs of rows [br/2][bk][2]
//   dQ += dS K          A: dS rows in bf16 [br][bk]     B: K pairs of keys [bk/2][dq32][2]
// (dq32, dv32: the dims rounded up to 32, one A row of a tile; zeros past the dims, the keys
// and the step's rows). Q^T and dO^T are the driver's, transposed once per head in blocks of
// 32 rows, so that an A tile is 1 KiB in one piece (attention_backward_pack_t_amx); steps
// start at a multiple of 32 rows (the rows before the first that sees a key of the tile see
// none: their P and dS are zero). dK and dV accumulate transposed, [dim32][bk] in f32, and
// are transposed back when written. The driver takes this kernel only when every product may
// be bf16: q, k, v, out stored in bf16 (S and dP are then exact products of stored values; P
// is rounded for dV as out is bf16, dS for dQ as k is and for dK as q is), or
// ATTN_FPMATH_BF16 (f32 and f16 values rounded to bf16 once, when loaded). S is scaled in f32
// after its product (Q is not scaled in bf16, which would round again): where the forward's
// tiles take the dims (dim_qk a multiple of 32) it has the amx forward's bits. dK is scaled
// when written, dQ by the driver.
// Each tile product runs over the rows (or keys) some row (key) of its block sees (16 query
// rows for S, dP and dQ; 64 keys for dV and dK), in whole steps of 32 rows (keys): P and dS
// are 0 for the hidden pairs inside, so they add nothing, and work hidden from a whole block
// (window, causal limit) is skipped. Unlike the f32 kernel, which cuts each product per row,
// a key (or query row) hidden from one row of a block but seen by another is read for it,
// times a zero: a non-finite value stored there reaches that row's gradient.
// The same source runs on the real tiles and on the model (Tiles, tiles.hpp); every tile is
// 16 rows x 64 bytes, configured where the kernel starts and released where it ends.
// Needs the avx512_bf16 flags; included by src/kernels/amx/tables.cpp only.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/amx/attention_amx.hpp"
#include "kernels/amx/backward_layouts_amx.hpp"
#include "kernels/amx/tiles.hpp"
#include "kernels/attention_backward.hpp"
#include "kernels/elements.hpp"

namespace attn::kernels::amx {
namespace backward_amx_detail {

constexpr int64_t bk = backward_bk;  // keys per tile
// Query rows per step: four 32-row depth steps of the dV and dK products per load and store
// of their accumulator tiles.
constexpr int64_t br = 128;
constexpr int64_t block = 16;        // rows of a tile
constexpr int64_t depth = 32;        // bf16 of an A tile's row
static_assert(br % depth == 0 && bk % depth == 0, "whole depth steps");
using step_ranges = backward_detail::step_ranges_of<br>;

inline int64_t up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The scratch, in floats (a float holds two bf16), 64-byte aligned regions.
struct amx_layout {
    int64_t dq32, dv32, d32;
    int64_t k_rows, k_t, v_t, k_pairs, dk_acc, dv_acc, q_rows, do_rows, dq_tile, s, dp,
        p_pairs, ds_pairs, ds_rows, total;  // dq_tile, k_rows (also dK, dV rows out): 16 rows
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
        k_rows = take(bk * d32 / 2 > 16 * d32 ? bk * d32 / 2 : 16 * d32);
        k_t = take(bk * dq32 / 2);
        v_t = take(bk * dv32 / 2);
        k_pairs = take(bk * dq32 / 2);
        dk_acc = take(bk * dq32);
        dv_acc = take(bk * dv32);
        q_rows = take(br * dq32 / 2);
        do_rows = take(br * dv32 / 2);
        dq_tile = take(block * dq32);
        s = take(br * bk);
        dp = take(br * bk);
        p_pairs = take(br * bk / 2);
        ds_pairs = take(br * bk / 2);
        ds_rows = take(br * bk / 2);
        total = at;
    }
};

inline uint16_t *halves(float *x) { return reinterpret_cast<uint16_t *>(x); }

// Tiles: accumulators tmm0 .. tmm3, A tiles tmm4 and tmm5 by turns of depth, B tiles tmm6 and
// tmm7 by turns of column (attention_amx.hpp's assignment).
template <class Tiles, int A, int V, int NV>
inline void dp_columns(const char *b, int64_t b_stride) {
    if constexpr (V < NV) {
        Tiles::template load<6 + V % 2>(b + V * 64, b_stride);
        Tiles::template dpbf16ps<V, A, 6 + V % 2>();
        dp_columns<Tiles, A, V + 1, NV>(b, b_stride);
    }
}

template <class Tiles, int NV>
void product_nv(bool accumulate, float *c, int64_t ldc, const char *a, int64_t a_stride,
                int64_t a_step, const char *b, int64_t b_stride, int64_t steps) {
    using namespace attention_amx_detail;
    if (accumulate) load_c<Tiles, 0, NV>(c, ldc * 4);
    else zero_c<Tiles, 0, NV>();
    int64_t k = 0;  // a depth step: a_step bytes on in A, 16 rows on down B
    for (; k + 2 <= steps; k += 2) {
        Tiles::template load<4>(a + k * a_step, a_stride);
        dp_columns<Tiles, 4, 0, NV>(b + k * 16 * b_stride, b_stride);
        Tiles::template load<5>(a + (k + 1) * a_step, a_stride);
        dp_columns<Tiles, 5, 0, NV>(b + (k + 1) * 16 * b_stride, b_stride);
    }
    if (k < steps) {
        Tiles::template load<4>(a + k * a_step, a_stride);
        dp_columns<Tiles, 4, 0, NV>(b + k * 16 * b_stride, b_stride);
    }
    store_c<Tiles, 0, NV>(c, ldc * 4);
}

// c[16 x 16 nv] (f32 rows ldc apart) (+)= a[16 x 32 steps] b: A as 16 rows of bf16, a_stride
// bytes apart, its depth steps a_step bytes apart (64: along the rows); B as rows of bf16
// pairs b_stride bytes apart, 16 rows a depth step; the tiles of 16 columns side by side (64
// bytes apart in B's rows).
template <class Tiles>
void product(int64_t nv, bool accumulate, float *c, int64_t ldc, const void *a,
             int64_t a_stride, int64_t a_step, const void *b, int64_t b_stride, int64_t steps) {
    const char *ab = static_cast<const char *>(a);
    for (int64_t v = 0; v < nv; v += 4) {
        const int64_t n = nv - v < 4 ? nv - v : 4;
        float *cv = c + v * 16;
        const char *bv = static_cast<const char *>(b) + v * 64;
        auto run = [&](auto nv_tiles) {
            product_nv<Tiles, decltype(nv_tiles)::value>(accumulate, cv, ldc, ab, a_stride,
                                                         a_step, bv, b_stride, steps);
        };
        if (n == 4) run(std::integral_constant<int, 4>());
        else if (n == 3) run(std::integral_constant<int, 3>());
        else if (n == 2) run(std::integral_constant<int, 2>());
        else run(std::integral_constant<int, 1>());
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

// Whether the tiles read the rows of x (of type t, dim elements) where they are stored: bf16
// rows of whole A tiles.
inline bool rows_in_place(attn_dtype t, int64_t dim, int64_t dim32) {
    return t == ATTN_DTYPE_BF16 && dim == dim32;
}

// The step's operands the tiles do not read in place: Q and dO rows in bf16 (zero past `rows`
// and for rows without gradient), all of them, or those of the last 16-row block when it is
// partial (whole blocks of bf16 rows are read where they are stored).
inline void load_rows(const struct attention_backward_tile &t, const amx_layout &at, float *base,
                      int64_t i0, int64_t rows) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const size_t qb = attn_dtype_size(t.q_type), ob = attn_dtype_size(t.out_type);
    const int64_t whole = rows / block * block;
    const int64_t q_from = rows_in_place(t.q_type, t.dim_qk, at.dq32) ? whole : 0;
    const int64_t g_from = rows_in_place(t.out_type, t.dim_v, at.dv32) ? whole : 0;
    for (int64_t r = q_from < g_from ? q_from : g_from; r < br; ++r) {
        const bool live = r < rows && t.row_max[i0 + r] != neg_inf;
        const char *q = static_cast<const char *>(t.q) + size_t((i0 + r) * t.q_ld) * qb;
        const char *g = static_cast<const char *>(t.dout) + size_t((i0 + r) * t.dout_ld) * ob;
        if (r >= q_from)
            row_bf16(live ? q : nullptr, t.q_type, t.dim_qk, at.dq32,
                     halves(base + at.q_rows) + r * at.dq32);
        if (r >= g_from)
            row_bf16(live ? g : nullptr, t.out_type, t.dim_v, at.dv32,
                     halves(base + at.do_rows) + r * at.dv32);
    }
}

// S (scaled) and dP for the 16-row blocks and 16-key tiles some row of the block sees, 64 keys
// at a time across the row blocks (their K^T and V^T tiles stay in L1). A row without
// gradient read in place gives S and dP that gradient_row never reads.
template <class Tiles>
void score_products(const struct attention_backward_tile &t, const step_ranges &seen,
                    int64_t i0, const amx_layout &at, float *base) {
    const __m512 scale_v = _mm512_set1_ps(t.scale);
    const bool q_in_place = rows_in_place(t.q_type, t.dim_qk, at.dq32);
    const bool g_in_place = rows_in_place(t.out_type, t.dim_v, at.dv32);
    for (int64_t k0 = 0; k0 < bk; k0 += 4 * block)
        for (int64_t r0 = 0; r0 < seen.rows; r0 += block) {
            const int64_t last = (seen.rows - r0 < block ? seen.rows : r0 + block) - 1;
            int64_t lo = seen.row_lo[r0] / block * block, hi = up(seen.row_hi[last], block);
            lo = lo > k0 ? lo : k0;
            hi = hi < k0 + 4 * block ? hi : k0 + 4 * block;
            if (hi <= lo) continue;
            const int64_t nv = (hi - lo) / block;
            const bool whole = last == r0 + block - 1;
            const uint16_t *q = whole && q_in_place
                                    ? static_cast<const uint16_t *>(t.q) + (i0 + r0) * t.q_ld
                                    : halves(base + at.q_rows) + r0 * at.dq32;
            const uint16_t *g = whole && g_in_place
                                    ? static_cast<const uint16_t *>(t.dout) + (i0 + r0) * t.dout_ld
                                    : halves(base + at.do_rows) + r0 * at.dv32;
            const int64_t q_ld = whole && q_in_place ? t.q_ld : at.dq32;
            const int64_t g_ld = whole && g_in_place ? t.dout_ld : at.dv32;
            float *s = base + at.s + r0 * bk + lo;
            product<Tiles>(nv, false, s, bk, q, q_ld * 2, 64, halves(base + at.k_t) + 2 * lo,
                           bk * 4, at.dq32 / depth);
            product<Tiles>(nv, false, base + at.dp + r0 * bk + lo, bk, g, g_ld * 2, 64,
                           halves(base + at.v_t) + 2 * lo, bk * 4, at.dv32 / depth);
            for (int64_t r = 0; r < block; ++r)
                for (int64_t c = 0; c < hi - lo; c += 16)
                    _mm512_store_ps(s + r * bk + c,
                                    _mm512_mul_ps(_mm512_load_ps(s + r * bk + c), scale_v));
        }
}

// acc_t[dim32 x keys] += a_t b over the rows each group of 64 keys is seen by: a_t the
// transposed rows from the step's first (blocks of 32 rows, [dim32][32] each), b the step's
// pairs of rows [br/2][bk][2] of P z or dS.
template <class Tiles>
void key_products(const step_ranges &seen, const uint16_t *a_t, const float *b, int64_t dim32,
                  float *acc_t) {
    const int64_t keys = seen.keys;
    for (int64_t c0 = 0; c0 < keys; c0 += 4 * block) {
        const int64_t last = (keys - c0 < 4 * block ? keys : c0 + 4 * block) - 1;
        const int64_t lo = seen.key_first[c0] / depth * depth, hi = up(seen.key_end[last], depth);
        if (hi <= lo) continue;
        const int64_t nv = (last - c0) / block + 1;
        for (int64_t d0 = 0; d0 < dim32; d0 += block)
            product<Tiles>(nv, true, acc_t + d0 * bk + c0, bk, a_t + lo * dim32 + d0 * depth,
                           depth * 2, dim32 * depth * 2,
                           reinterpret_cast<const uint16_t *>(b) + lo * bk + 2 * c0, bk * 4,
                           (hi - lo) / depth);
    }
}

// dq[rows x dim] += dS K over the keys each 16-row block sees: whole 16-row blocks of whole
// tiles on dq's rows in place, 64 dims at a time across the blocks (their K tiles stay in
// L1); other blocks on a padded copy of their rows.
template <class Tiles>
void query_products(const struct attention_backward_tile &t, const step_ranges &seen,
                    int64_t i0, const amx_layout &at, float *base) {
    auto keys_of = [&](int64_t r0, int64_t rr, int64_t &lo, int64_t &hi) {
        lo = seen.row_lo[r0] / depth * depth;
        hi = up(seen.row_hi[r0 + rr - 1], depth);
        return hi > lo;
    };
    const bool whole_dims = t.dim_qk == at.dq32;
    const int64_t whole_rows = whole_dims ? seen.rows / block * block : 0;
    int64_t lo, hi;
    for (int64_t v0 = 0; v0 < at.dq32 / 16; v0 += 4)
        for (int64_t r0 = 0; r0 < whole_rows; r0 += block) {
            if (!keys_of(r0, block, lo, hi)) continue;
            product<Tiles>(at.dq32 / 16 - v0 < 4 ? at.dq32 / 16 - v0 : 4, true,
                           t.dq + (i0 + r0) * t.dq_ld + v0 * 16, t.dq_ld,
                           halves(base + at.ds_rows) + r0 * bk + lo, bk * 2, 64,
                           halves(base + at.k_pairs) + lo * at.dq32 + v0 * 32, at.dq32 * 4,
                           (hi - lo) / depth);
        }
    for (int64_t r0 = whole_rows; r0 < seen.rows; r0 += block) {
        const int64_t rr = seen.rows - r0 < block ? seen.rows - r0 : block;
        if (!keys_of(r0, rr, lo, hi)) continue;
        float *dq = t.dq + (i0 + r0) * t.dq_ld, *c = base + at.dq_tile;
        for (int64_t r = 0; r < rr; ++r) {
            std::memcpy(c + r * at.dq32, dq + r * t.dq_ld, sizeof(float) * size_t(t.dim_qk));
            for (int64_t x = t.dim_qk; x < at.dq32; ++x) c[r * at.dq32 + x] = 0.0f;
        }
        product<Tiles>(at.dq32 / 16, true, c, at.dq32, halves(base + at.ds_rows) + r0 * bk + lo,
                       bk * 2, 64, halves(base + at.k_pairs) + lo * at.dq32, at.dq32 * 4,
                       (hi - lo) / depth);
        for (int64_t r = 0; r < rr; ++r)
            std::memcpy(dq + r * t.dq_ld, c + r * at.dq32, sizeof(float) * size_t(t.dim_qk));
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
    score_products<Tiles>(t, seen, i0, at, base);
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
    pair_rows_bf16(p, bk, rows32, keys16, halves(base + at.p_pairs));
    pair_rows_bf16(ds, bk, rows32, keys16, halves(base + at.ds_pairs));
    // dV^T += dO^T (P z) and dK^T += Q^T dS (Q unscaled: dK is scaled when written)
    key_products<Tiles>(seen, t.dout_t + i0 * at.dv32, base + at.p_pairs, at.dv32,
                        base + at.dv_acc);
    key_products<Tiles>(seen, t.q_t + i0 * at.dq32, base + at.ds_pairs, at.dq32,
                        base + at.dk_acc);
    query_products<Tiles>(t, seen, i0, at, base);
}

// Rows c < keys of dst (type t, ld elements apart) = factor * the columns of acc_t
// [dim32][bk], rounded once to t; 16 keys at a time through out [16][dim32].
template <class Arch>
void write_columns(const float *acc_t, int64_t dim, int64_t dim32, float factor, int64_t keys,
                   attn_dtype t, void *dst, int64_t ld, float *out) {
    const size_t bytes = attn_dtype_size(t);
    const __m512 f = _mm512_set1_ps(factor);
    __m512 r[16];
    for (int64_t c0 = 0; c0 < keys; c0 += 16) {
        for (int64_t d0 = 0; d0 < dim32; d0 += 16) {
            for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(acc_t + (d0 + i) * bk + c0);
            transpose16(r);
            for (int i = 0; i < 16; ++i)
                _mm512_store_ps(out + i * dim32 + d0, _mm512_mul_ps(r[i], f));
        }
        for (int64_t c = c0; c < keys && c < c0 + 16; ++c)
            narrow_row<Arch>(out + (c - c0) * dim32, dim,
                             static_cast<char *>(dst) + size_t(c * ld) * bytes, t);
    }
}

// dK = scale acc_k, dV = acc_v (both transposed back), rounded once to kv_type.
template <class Arch>
void write_key_gradients(const struct attention_backward_tile &t, const amx_layout &at) {
    float *out = t.scratch + at.k_rows;
    write_columns<Arch>(t.scratch + at.dk_acc, t.dim_qk, at.dq32, t.scale, t.keys, t.kv_type,
                        t.dk, t.dk_ld, out);
    write_columns<Arch>(t.scratch + at.dv_acc, t.dim_v, at.dv32, 1.0f, t.keys, t.kv_type, t.dv,
                        t.dv_ld, out);
}

// The driver's transposed rows (kernel_table::attention_backward_pack_t_bf16's contract).
inline void pack_t(const void *rows, attn_dtype t, int64_t ld, int64_t n, int64_t dim,
                   const float *row_max, uint16_t *dst, int64_t rows32) {
    const int64_t dim32 = up(dim, depth);
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const size_t bytes = attn_dtype_size(t);
    alignas(64) uint16_t row[16 * 1024];
    for (int64_t r0 = 0; r0 < rows32; r0 += 16)
        for (int64_t d0 = 0; d0 < dim32; d0 += 1024) {
            const int64_t w = dim32 - d0 < 1024 ? dim32 - d0 : 1024;
            for (int64_t i = 0; i < 16; ++i) {  // rows r0 + i, dims d0 .. d0 + w in bf16
                const int64_t r = r0 + i;
                const bool live = r < n && row_max[r] != neg_inf && d0 < dim;
                const char *src = static_cast<const char *>(rows) + size_t(r * ld + d0) * bytes;
                row_bf16(live ? src : nullptr, t, dim - d0 < w ? dim - d0 : w, w, row + i * 1024);
            }
            for (int64_t c0 = 0; c0 < w; c0 += 16) {
                __m512 r[16];
                for (int i = 0; i < 16; ++i)  // bf16 widened exactly, then transposed
                    r[i] = _mm512_castsi512_ps(_mm512_slli_epi32(
                        _mm512_cvtepu16_epi32(_mm256_load_si256(
                            reinterpret_cast<const __m256i *>(row + i * 1024 + c0))), 16));
                transpose16(r);  // back to bf16 exactly
                uint16_t *at = dst + (r0 / depth * dim32 + d0 + c0) * depth + r0 % depth;
                for (int i = 0; i < 16; ++i)
                    _mm256_storeu_si256(reinterpret_cast<__m256i *>(at + i * depth),
                                        (__m256i)_mm512_cvtneps_pbh(r[i]));
            }
        }
}

}  // namespace backward_amx_detail

// ---- entry points (the amx and amx_emulated levels' attention_backward_*_bf16) -------------

inline int64_t attention_backward_scratch_floats_amx(int64_t dim_qk, int64_t dim_v) {
    return backward_amx_detail::amx_layout(dim_qk, dim_v).total;
}

inline void attention_backward_pack_t_amx(const void *rows, attn_dtype t, int64_t ld, int64_t n,
                                          int64_t dim, const float *row_max, uint16_t *dst,
                                          int64_t rows32) {
    backward_amx_detail::pack_t(rows, t, ld, n, dim, row_max, dst, rows32);
}

template <class Arch, class Tiles>
void attention_backward_tile_amx(const struct attention_backward_tile &t) {
    using namespace backward_amx_detail;
    const amx_layout at(t.dim_qk, t.dim_v);
    const tile_guard<Tiles> guard(attention_amx_detail::attention_config());
    if (t.first_head) load_key_tile(t, at, t.scratch);
    for (int64_t i0 = t.row_begin / depth * depth; i0 < t.row_end; i0 += br)
        backward_step<Arch, Tiles>(t, at, i0, t.row_end - i0 < br ? t.row_end - i0 : br);
    if (t.last_head) write_key_gradients<Arch>(t, at);
}

}  // namespace attn::kernels::amx
