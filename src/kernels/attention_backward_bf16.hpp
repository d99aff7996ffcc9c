// The fused backward with its products on bf16 pairs (VDPBF16PS), for the avx512_bf16 level
// (the amx levels run theirs on tiles: amx/attention_backward_amx.hpp): the tile loop of
// attention_backward.hpp (same steps, same row statistics, the same gradient_row for P and dS),
// with the five products formed from bf16 values two at a time and summed in f32. The driver
// takes this kernel only when every product may be on pairs: q, k, v, out stored in bf16
// (S = Q K^T and dP = dO V^T are then exact products of stored values; P is rounded to bf16 for
// dV = P^T dO as out is bf16, dS for dQ = dS K as k is and for dK = dS^T Q as q is) or
// ATTN_FPMATH_BF16 (f32 and f16 inputs rounded to bf16 once, when loaded or packed).
//
// Operands, as 32-bit words of two bf16 (low half first):
//   S  = scale (Q K^T)   Q rows [rows][dk_pad/2] words, K in the forward's pair panels
//                        (attention_bf16.hpp: S has the bf16 forward's bits)
//   dP = dO V^T          dO rows likewise, V in pair panels
//   dV += P^T dO         P paired over two query rows [row pair][bk], dO rows paired likewise
//                        [row pair][dv_pad]
//   dK += dS^T Q         dS and Q paired over two query rows; scaled by `scale` when written
//   dq += dS K           dS paired over two keys [row][bk/2], K paired over two keys
//                        [key pair][dk_pad]
// Each product runs over the rows (or keys) some row (key) of its register block sees: P and dS
// are 0 for the hidden pairs inside that range, so they add nothing, and work hidden from a
// whole block (window, causal limit) is skipped. Unlike the f32 kernel, which cuts each product
// per row, a key (or query row) hidden from one row of a block but seen by another is read for
// it, times a zero: a non-finite value stored there reaches that row's gradient.
// Needs -mavx512bf16: included only by src/kernels/arch/avx512_bf16.cpp.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <immintrin.h>

#include <cstdint>

#include "kernels/attention_backward.hpp"
#include "kernels/attention_bf16.hpp"
#include "kernels/elements.hpp"

ATTN_KERNELS_BEGIN

namespace backward_bf16_detail {

using attention_detail::lanes;
using attention_detail::panel_keys;
using attention_detail::round_up;
using backward_detail::step_ranges;

static_assert(backward_br % 2 == 0 && backward_bk % 32 == 0, "whole pairs of rows and keys");

template <class Arch>
struct pair_layout {
    int64_t dk_pad, dv_pad;  // whole vectors of f32, so even: rows of whole pairs
    int64_t k_panels, v_panels, k_key_pairs, dk_acc, dv_acc, q_rows, do_rows, q_row_pairs,
        do_row_pairs, dq_tile, p, ds, p_row_pairs, ds_row_pairs, ds_key_pairs, score_max, total;
    explicit pair_layout(int64_t dim_qk, int64_t dim_v) {
        dk_pad = round_up(dim_qk, lanes<Arch>);
        dv_pad = round_up(dim_v, lanes<Arch>);
        int64_t at = 0;
        auto take = [&at](int64_t floats) {  // a float is one word of two bf16
            const int64_t here = at;
            at += round_up(floats, 16);
            return here;
        };
        k_panels = take(backward_bk * dk_pad / 2);
        v_panels = take(backward_bk * dv_pad / 2);
        k_key_pairs = take(backward_bk / 2 * dk_pad);
        dk_acc = take(backward_bk * dk_pad);
        dv_acc = take(backward_bk * dv_pad);
        q_rows = take(backward_br * dk_pad / 2);
        do_rows = take(backward_br * dv_pad / 2);
        q_row_pairs = take(backward_br / 2 * dk_pad);
        do_row_pairs = take(backward_br / 2 * dv_pad);
        dq_tile = take(backward_br * dk_pad);
        p = take(backward_br * backward_bk);
        ds = take(backward_br * backward_bk);
        p_row_pairs = take(backward_br / 2 * backward_bk);
        ds_row_pairs = take(backward_br / 2 * backward_bk);
        ds_key_pairs = take(backward_br * backward_bk / 2);
        score_max = take(backward_br * lanes<Arch>);
        total = at;
    }
};

inline uint32_t *words(float *x) { return reinterpret_cast<uint32_t *>(x); }
inline const uint32_t *words(const float *x) { return reinterpret_cast<const uint32_t *>(x); }

// dst[r][0 .. pad) bf16 = row r of src (rows of `type`, ld elements apart), rounded once when
// not bf16, zero past dim; rows past `rows` up to `all`, and rows with zero[r], are zero.
inline void load_rows_bf16(const void *src, attn_dtype type, int64_t ld, int64_t rows,
                           int64_t all, int64_t dim, const bool *zero, uint16_t *dst,
                           int64_t pad) {
    for (int64_t r = 0; r < all; ++r) {
        uint16_t *d = dst + r * pad;
        int64_t c = 0;
        if (r < rows && !zero[r]) {
            const void *row = element_at(src, type, r * ld);
            if (type == ATTN_DTYPE_BF16) {
                const uint16_t *s = static_cast<const uint16_t *>(row);
                for (; c < dim; ++c) d[c] = s[c];
            } else {
                for (; c < dim; ++c) d[c] = attention_bf16_detail::bf16_bits(row, type, c);
            }
        }
        for (; c < pad; ++c) d[c] = 0;
    }
}

// out[m][0 .. n) words = (a[2m][x], a[2m + 1][x]) for m < pairs: two rows of bf16 (ld apart,
// n a multiple of 16) interleaved, 16 at a time.
inline void pair_rows(const uint16_t *a, int64_t ld, int64_t pairs, int64_t n, uint32_t *out,
                      int64_t out_ld) {
    for (int64_t m = 0; m < pairs; ++m) {
        const uint16_t *lo = a + 2 * m * ld, *hi = lo + ld;
        for (int64_t x = 0; x < n; x += 16) {
            const __m512i l = _mm512_cvtepu16_epi32(
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(lo + x)));
            const __m512i h = _mm512_cvtepu16_epi32(
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(hi + x)));
            _mm512_storeu_si512(out + m * out_ld + x, _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
        }
    }
}

// An f32 tile t[rows x bk] (rows even) rounded to bf16 once, paired over two rows:
// out[m][c] = (t[2m][c], t[2m + 1][c]).
inline void round_row_pairs(const float *t, int64_t rows, uint32_t *out) {
    for (int64_t m = 0; m < rows / 2; ++m) {
        const float *lo = t + 2 * m * backward_bk, *hi = lo + backward_bk;
        for (int64_t c = 0; c < backward_bk; c += 16) {
            const __m512i l =
                _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(lo + c)));
            const __m512i h =
                _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(hi + c)));
            _mm512_storeu_si512(out + m * backward_bk + c,
                                _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
        }
    }
}

// The same tile rounded to bf16 in its own row order: out row r = bk bf16 = bk/2 key pairs.
inline void round_key_pairs(const float *t, int64_t rows, uint32_t *out) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < backward_bk; c += 32) {
            const __m512 x0 = _mm512_load_ps(t + r * backward_bk + c);
            const __m512 x1 = _mm512_load_ps(t + r * backward_bk + c + 16);
            _mm512_storeu_si512(out + r * (backward_bk / 2) + c / 2,
                                (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
        }
}

// s[rows x bk] = scale (a K^T) from pair rows a (ld words) and pair panels, except (row block,
// panel) pairs hidden from every row of the block and key vectors past the block's last row's
// limit (panel_products of attention_backward.hpp on pairs).
template <class Arch>
void panel_products_pairs(const uint32_t *a, int64_t lda, int64_t pairs, const step_ranges &seen,
                          const uint16_t *panels, int64_t n_panels, float scale, float *s,
                          float *score_max) {
    using blk = attention_blocking<Arch>;
    constexpr int nr = panel_keys<Arch>;
    constexpr int W = lanes<Arch>;
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t r = 0; r < seen.rows; ++r) _mm512_store_ps(score_max + r * W, neg_inf);
    alignas(64) float col_scale[backward_bk];  // the score blocks' factor a key
    for (float &f : col_scale) f = scale;
    for (int64_t p = 0; p < n_panels; ++p)
        for (int64_t r0 = 0; r0 < seen.rows; r0 += blk::mr_s) {
            const int rr =
                static_cast<int>(seen.rows - r0 < blk::mr_s ? seen.rows - r0 : blk::mr_s);
            const int64_t lo = seen.row_lo[r0], hi = seen.row_hi[r0 + rr - 1], c0 = p * nr;
            if (c0 >= hi || c0 + nr <= lo) continue;
            const int vectors = hi - c0 >= nr ? nr / W : static_cast<int>((hi - c0 + W - 1) / W);
            attention_bf16_detail::score_block_pairs_any<Arch, blk::mr_s, blk::nr_vectors>(
                rr, vectors, a + r0 * lda, lda, panels + p * nr * pairs * 2, pairs,
                col_scale + c0, s + r0 * backward_bk + c0, backward_bk, score_max + r0 * W);
        }
}

// acc[keys x dim] += A^T b over the step's row pairs: A paired over rows ([row pair][bk]),
// b paired over rows ([row pair][dim_pad] words); each block of keys takes the row pairs that
// hold any row seeing one of its keys.
template <class Arch>
void key_products_pairs(const step_ranges &seen, const uint32_t *a, const uint32_t *b,
                        int64_t dim_pad, float *acc) {
    const int64_t keys = seen.keys;
    using blk = attention_blocking<Arch>;
    constexpr int W = lanes<Arch>;
    const int64_t vectors = dim_pad / W;
    for (int64_t v0 = 0; v0 < vectors; v0 += blk::nv) {
        const int nvec = static_cast<int>(vectors - v0 < blk::nv ? vectors - v0 : blk::nv);
        for (int64_t c0 = 0; c0 < keys; c0 += blk::mr_o) {
            const int cc = static_cast<int>(keys - c0 < blk::mr_o ? keys - c0 : blk::mr_o);
            const int64_t first = seen.key_first[c0] / 2, end = (seen.key_end[c0 + cc - 1] + 1) / 2;
            attention_bf16_detail::dp_block_pairs_any<Arch, blk::mr_o, blk::nv>(
                cc, nvec, a + first * backward_bk + c0, 1, backward_bk, end - first,
                b + first * dim_pad + v0 * W, dim_pad, acc + c0 * dim_pad + v0 * W, dim_pad,
                nullptr);
        }
    }
}

// dq[rows x dim] += dS K over the key pairs some row of each block sees: dS paired over keys
// ([row][bk/2]), K paired over keys ([key pair][dim_pad] words).
template <class Arch>
void query_products_pairs(const step_ranges &seen, const uint32_t *ds, const uint32_t *k,
                          int64_t dim_pad, float *dqs) {
    using blk = attention_blocking<Arch>;
    constexpr int W = lanes<Arch>;
    const int64_t vectors = dim_pad / W;
    for (int64_t v0 = 0; v0 < vectors; v0 += blk::nv) {
        const int nvec = static_cast<int>(vectors - v0 < blk::nv ? vectors - v0 : blk::nv);
        for (int64_t r0 = 0; r0 < seen.rows; r0 += blk::mr_o) {
            const int rr =
                static_cast<int>(seen.rows - r0 < blk::mr_o ? seen.rows - r0 : blk::mr_o);
            const int64_t first = seen.row_lo[r0] / 2, end = (seen.row_hi[r0 + rr - 1] + 1) / 2;
            if (end <= first) continue;
            attention_bf16_detail::dp_block_pairs_any<Arch, blk::mr_o, blk::nv>(
                rr, nvec, ds + r0 * (backward_bk / 2) + first, backward_bk / 2, 1, end - first,
                k + first * dim_pad + v0 * W, dim_pad, dqs + r0 * dim_pad + v0 * W, dim_pad,
                nullptr);
        }
    }
}

// Loads the key tile: K and V in pair panels (for S and dP), K paired over keys (for dq), and
// zeroes the dK, dV accumulators.
template <class Arch>
void load_key_tile_pairs(const struct attention_backward_tile &t, const pair_layout<Arch> &at) {
    constexpr int nr = panel_keys<Arch>;
    float *base = t.scratch;
    kv_rows k_rows, v_rows;
    k_rows.base = t.k;
    k_rows.type = t.kv_type;
    k_rows.ld = t.k_ld;
    v_rows.base = t.v;
    v_rows.type = t.kv_type;
    v_rows.ld = t.v_ld;
    auto *k_panels = reinterpret_cast<uint16_t *>(base + at.k_panels);
    auto *v_panels = reinterpret_cast<uint16_t *>(base + at.v_panels);
    attention_bf16_detail::pack_k_pairs<Arch>(k_rows, 0, t.keys, t.dim_qk, backward_bk / nr,
                                              k_panels);
    attention_bf16_detail::pack_k_pairs<Arch>(v_rows, 0, t.keys, t.dim_v, backward_bk / nr,
                                              v_panels);
    auto *k_pairs = reinterpret_cast<uint16_t *>(base + at.k_key_pairs);
    attention_bf16_detail::pack_v_pairs<Arch>(k_rows, 0, t.keys, t.dim_qk, at.dk_pad, at.dk_pad, k_pairs);
    for (int64_t x = (t.keys + 1) / 2 * at.dk_pad; x < backward_bk / 2 * at.dk_pad; ++x)
        base[at.k_key_pairs + x] = 0.0f;  // key pairs past the tile's keys
    for (int64_t x = 0; x < backward_bk * at.dk_pad; ++x) base[at.dk_acc + x] = 0.0f;
    for (int64_t x = 0; x < backward_bk * at.dv_pad; ++x) base[at.dv_acc + x] = 0.0f;
}

// dK (times scale: Q entered unscaled) and dV of the tile's keys, rounded once to kv_type.
template <class Arch>
void write_key_gradients(const struct attention_backward_tile &t, const pair_layout<Arch> &at) {
    float *dk = t.scratch + at.dk_acc, *dv = t.scratch + at.dv_acc;
    for (int64_t c = 0; c < t.keys; ++c) {
        float *row = dk + c * at.dk_pad;
        for (int64_t x = 0; x < t.dim_qk; ++x) row[x] *= t.scale;
        narrow_row<Arch>(row, t.dim_qk, element_at(t.dk, t.kv_type, c * t.dk_ld), t.kv_type);
        narrow_row<Arch>(dv + c * at.dv_pad, t.dim_v, element_at(t.dv, t.kv_type, c * t.dv_ld),
                         t.kv_type);
    }
}

}  // namespace backward_bf16_detail

template <class Arch>
int64_t attention_backward_scratch_floats_bf16(int64_t dim_qk, int64_t dim_v) {
    return backward_bf16_detail::pair_layout<Arch>(dim_qk, dim_v).total;
}

template <class Arch>
void attention_backward_tile_bf16(const struct attention_backward_tile &t) {
    using namespace backward_bf16_detail;
    constexpr int nr = panel_keys<Arch>;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const pair_layout<Arch> at(t.dim_qk, t.dim_v);
    float *s = t.scratch;
    if (t.first_head) load_key_tile_pairs<Arch>(t, at);
    const int64_t n_panels = round_up(t.keys, nr) / nr;
    const int64_t qp = attention_bf16_detail::pairs_of(t.dim_qk);
    const int64_t vp = attention_bf16_detail::pairs_of(t.dim_v);
    auto *q16 = reinterpret_cast<uint16_t *>(s + at.q_rows);
    auto *do16 = reinterpret_cast<uint16_t *>(s + at.do_rows);

    for (int64_t i0 = t.row_begin; i0 < t.row_end; i0 += backward_br) {
        const int64_t rows = t.row_end - i0 < backward_br ? t.row_end - i0 : backward_br;
        const int64_t even = round_up(rows, 2);
        // a row without gradient (fully masked) contributes nothing, whatever its q and dO hold
        bool none[backward_br];
        for (int64_t r = 0; r < rows; ++r) none[r] = t.row_max[i0 + r] == neg_inf;
        load_rows_bf16(element_at(t.q, t.q_type, i0 * t.q_ld), t.q_type, t.q_ld, rows, even,
                       t.dim_qk, none, q16, at.dk_pad);
        load_rows_bf16(element_at(t.dout, t.out_type, i0 * t.dout_ld), t.out_type, t.dout_ld, rows,
                       even, t.dim_v, none, do16, at.dv_pad);
        pair_rows(q16, at.dk_pad, even / 2, at.dk_pad, words(s + at.q_row_pairs), at.dk_pad);
        pair_rows(do16, at.dv_pad, even / 2, at.dv_pad, words(s + at.do_row_pairs), at.dv_pad);
        float *dqs = s + at.dq_tile, *p = s + at.p, *ds = s + at.ds;
        backward_detail::copy_padded<Arch>(t.dq + i0 * t.dq_ld, t.dq_ld, rows, rows, t.dim_qk,
                                           1.0f, dqs, at.dk_pad);

        // S = scale (Q K^T) and dP = dO V^T for the step, where some row of a block sees a key
        const step_ranges seen(t, i0, rows);
        panel_products_pairs<Arch>(words(s + at.q_rows), at.dk_pad / 2, qp, seen,
                                   reinterpret_cast<const uint16_t *>(s + at.k_panels), n_panels,
                                   t.scale, p, s + at.score_max);
        panel_products_pairs<Arch>(words(s + at.do_rows), at.dv_pad / 2, vp, seen,
                                   reinterpret_cast<const uint16_t *>(s + at.v_panels), n_panels,
                                   1.0f, ds, s + at.score_max);
        for (int64_t r = 0; r < rows; ++r)
            backward_detail::gradient_row<Arch>(t, i0 + r, none[r] ? key_range{0, 0} : seen.row(r),
                                                p + r * backward_bk, ds + r * backward_bk);
        for (int64_t r = rows; r < even; ++r)
            for (int64_t c = 0; c < backward_bk; ++c)
                p[r * backward_bk + c] = ds[r * backward_bk + c] = 0.0f;

        // P z and dS rounded to bf16 once, in the pairings their products read
        round_row_pairs(p, even, words(s + at.p_row_pairs));
        round_row_pairs(ds, even, words(s + at.ds_row_pairs));
        round_key_pairs(ds, rows, words(s + at.ds_key_pairs));

        // dV += (P z)^T dO and dK += dS^T Q, key block by key block over the row pairs
        key_products_pairs<Arch>(seen, words(s + at.p_row_pairs),
                                 words(s + at.do_row_pairs), at.dv_pad, s + at.dv_acc);
        key_products_pairs<Arch>(seen, words(s + at.ds_row_pairs),
                                 words(s + at.q_row_pairs), at.dk_pad, s + at.dk_acc);
        // dq += dS K, row block by row block over the key pairs
        query_products_pairs<Arch>(seen, words(s + at.ds_key_pairs), words(s + at.k_key_pairs),
                                   at.dk_pad, dqs);
        backward_detail::copy_rows_out<Arch>(dqs, at.dk_pad, rows, t.dim_qk, t.dq + i0 * t.dq_ld,
                                             t.dq_ld);
    }
    if (t.last_head) write_key_gradients<Arch>(t, at);
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
