// The fused backward of attention (FlashAttention-2's algorithm), templated on the xsimd Arch.
//
// One call handles one key tile (at most bk keys) of one (batch, kv head) against the query
// rows of one query head, in steps of br rows. Per step, with qs = scale Q (the forward's
// operand, so S has the forward's bits) and the row statistics m, 1/l of the forward:
//   S   = qs K^T                          score_block on K packed in panels, as the forward
//   S   = softcap, + mask, - ALiBi        the score definition of core/scores.hpp, in the
//                                         forward's vector form (the same bits as its S)
//   dP  = dO V^T                          the same micro-kernel on V packed in panels
//   P   = e^(S - m) / l                   0 for hidden keys and rows without gradient
//   dS  = P (dP z - delta) g              delta = rowsum(dO o O) = sum_j P_j z_j dP_j,
//                                         g = 1 - tanh^2 (softcap), else 1
//   dV += (P z)^T dO,  dK += dS^T qs      register blocks over keys x dim, queries summed
//   dq += dS K                            register blocks over queries x dim, keys summed
// Only the br x bk tiles of S and dP are stored; dK, dV of the key tile stay in the scratch
// (L1/L2) while the query rows stream past. A (row block, K panel) pair hidden from every row
// of the block (window, causal limit) is not computed, and every product is cut per row (query
// or key, attention_backward_ranges.hpp) so that a key hidden from a query row is never read
// for it.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "kernels/attention.hpp"
#include "core/kv_rows.hpp"
#include "kernels/attention_args.hpp"
#include "kernels/attention_backward_ranges.hpp"
#include "kernels/attention_micro.hpp"
#include "kernels/attention_score_row.hpp"
#include "kernels/vec_math.hpp"

ATTN_KERNELS_BEGIN

namespace backward_detail {
using attention_detail::lanes;
using attention_detail::panel_keys;
using attention_detail::round_up;

template <class Arch>
struct scratch_layout {
    int64_t dk_pad, dv_pad;
    int64_t k_panels, v_panels, k_rows, dk_acc, dv_acc, q_tile, do_tile, dq_tile, p, ds,
        score_max, total;
    scratch_layout(int64_t dim_qk, int64_t dim_v) {
        dk_pad = round_up(dim_qk, lanes<Arch>);
        dv_pad = round_up(dim_v, lanes<Arch>);
        int64_t at = 0;
        auto take = [&at](int64_t floats) {
            const int64_t here = at;
            at += round_up(floats, 16);
            return here;
        };
        k_panels = take(backward_bk * dim_qk);
        v_panels = take(backward_bk * dim_v);
        k_rows = take(backward_bk * dk_pad);
        dk_acc = take(backward_bk * dk_pad);
        dv_acc = take(backward_bk * dv_pad);
        q_tile = take(backward_br * dk_pad);
        do_tile = take(backward_br * dv_pad);
        dq_tile = take(backward_br * dk_pad);
        p = take(backward_br * backward_bk);
        ds = take(backward_br * backward_bk);
        score_max = take(backward_br * lanes<Arch>);
        total = at;
    }
};

// c[Rows x N vectors] += sum_{x < count} A(r, x) b[x * ldb + n W ...], A(r, x) = a[r * a_rs +
// x * a_xs]: the register block of the three gradient products. a_rs = 1 reads A transposed
// (P^T, dS^T from their row-major tiles) with no copy: a broadcast costs the same from any
// address.
template <class Arch, int Rows, int N>
inline void acc_block(const float *a, int64_t a_rs, int64_t a_xs, int64_t count, const float *b,
                      int64_t ldb, float *c, int64_t ldc) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    fbatch acc[Rows][N];
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
        for (int n = 0; n < N; ++n) acc[r][n] = fbatch::load_aligned(c + r * ldc + n * W);
    for (int64_t x = 0; x < count; ++x) {
        fbatch b_vec[N];
#pragma GCC unroll 8
        for (int n = 0; n < N; ++n) b_vec[n] = fbatch::load_aligned(b + x * ldb + n * W);
#pragma GCC unroll 32
        for (int r = 0; r < Rows; ++r) {
            const fbatch a_val(a[r * a_rs + x * a_xs]);
#pragma GCC unroll 8
            for (int n = 0; n < N; ++n) acc[r][n] = xsimd::fma(a_val, b_vec[n], acc[r][n]);
        }
    }
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
        for (int n = 0; n < N; ++n) acc[r][n].store_aligned(c + r * ldc + n * W);
}

template <class Arch, int Rows, int N>
inline void acc_block_vectors(int vectors, const float *a, int64_t a_rs, int64_t a_xs,
                              int64_t count, const float *b, int64_t ldb, float *c, int64_t ldc) {
    if constexpr (N == 1) {
        acc_block<Arch, Rows, 1>(a, a_rs, a_xs, count, b, ldb, c, ldc);
    } else {
        if (vectors == N) return acc_block<Arch, Rows, N>(a, a_rs, a_xs, count, b, ldb, c, ldc);
        acc_block_vectors<Arch, Rows, N - 1>(vectors, a, a_rs, a_xs, count, b, ldb, c, ldc);
    }
}

template <class Arch, int Rows>
inline void acc_block_any(int rows, int vectors, const float *a, int64_t a_rs, int64_t a_xs,
                          int64_t count, const float *b, int64_t ldb, float *c, int64_t ldc) {
    constexpr int nv = attention_blocking<Arch>::nv;
    if (count <= 0) return;
    if constexpr (Rows == 1) {
        acc_block_vectors<Arch, 1, nv>(vectors, a, a_rs, a_xs, count, b, ldb, c, ldc);
    } else {
        if (rows == Rows)
            return acc_block_vectors<Arch, Rows, nv>(vectors, a, a_rs, a_xs, count, b, ldb, c,
                                                     ldc);
        acc_block_any<Arch, Rows - 1>(rows, vectors, a, a_rs, a_xs, count, b, ldb, c, ldc);
    }
}

// dst rows [rows x dim] (ld dst_ld, zero padded to pad) = factor * src rows (ld src_ld);
// rows past `rows` up to `all` are zero.
template <class Arch>
void copy_padded(const float *src, int64_t src_ld, int64_t rows, int64_t all, int64_t dim,
                 float factor, float *dst, int64_t pad) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const fbatch f(factor);
    for (int64_t r = 0; r < all; ++r) {
        float *d = dst + r * pad;
        int64_t c = 0;
        if (r < rows) {
            const float *s = src + r * src_ld;
            for (; c + W <= dim; c += W) (fbatch::load_unaligned(s + c) * f).store_aligned(d + c);
            for (; c < dim; ++c) d[c] = factor * s[c];
        }
        for (; c < pad; ++c) d[c] = 0.0f;
    }
}

// dst rows (ld dst_ld) = the first dim floats of src rows (ld pad).
template <class Arch>
void copy_rows_out(const float *src, int64_t pad, int64_t rows, int64_t dim, float *dst,
                   int64_t dst_ld) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    for (int64_t r = 0; r < rows; ++r) {
        int64_t c = 0;
        for (; c + W <= dim; c += W)
            fbatch::load_aligned(src + r * pad + c).store_unaligned(dst + r * dst_ld + c);
        for (; c < dim; ++c) dst[r * dst_ld + c] = src[r * pad + c];
    }
}

// S-like tile s[rows x bk] = a[rows x dim] panels^T for whole panels (the forward's kernel),
// except (row block, panel) pairs hidden from every row of the block, and key vectors past the
// block's last row's limit: those scores are never read.
template <class Arch>
void panel_products(const float *a, int64_t lda, const step_ranges &seen, const float *panels,
                    int64_t dim, int64_t n_panels, float *s, float *score_max) {
    using blk = attention_blocking<Arch>;
    constexpr int nr = panel_keys<Arch>;
    constexpr int W = lanes<Arch>;
    const xsimd::batch<float, Arch> neg_inf(-std::numeric_limits<float>::infinity());
    for (int64_t r = 0; r < seen.rows; ++r) neg_inf.store_aligned(score_max + r * W);
    for (int64_t p = 0; p < n_panels; ++p)
        for (int64_t r0 = 0; r0 < seen.rows; r0 += blk::mr_s) {
            const int rr = static_cast<int>(seen.rows - r0 < blk::mr_s ? seen.rows - r0 : blk::mr_s);
            const int64_t lo = seen.row_lo[r0], hi = seen.row_hi[r0 + rr - 1], c0 = p * nr;
            if (c0 >= hi || c0 + nr <= lo) continue;
            const int vectors = hi - c0 >= nr ? nr / W : static_cast<int>((hi - c0 + W - 1) / W);
            attention_detail::score_block_rows<Arch, blk::mr_s>(
                rr, vectors, a + r0 * lda, lda, panels + p * nr * dim, dim,
                s + r0 * backward_bk + c0, backward_bk, score_max + r0 * W);
        }
}

// Row r of the step (query i) over its columns cols = [lo, hi): S = the score definition on
// the scaled scores in p_row (softcap, + mask, - ALiBi: attention_score_row.hpp's order and
// operations, so S has the forward's bits), P (times z) into p_row, dS into ds_row; zeros
// elsewhere to bk. P = e^(S - m) / l with exp (vec_math.hpp) on the unrounded difference S - m,
// 0 below 2^-100.
// Only the vectors from round_down(lo) on are read; lanes outside [lo, hi) are never used.
template <class Arch>
void gradient_row(const attention_backward_tile &t, int64_t i, key_range cols, float *p_row,
                  float *ds_row) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    const fbatch shift(t.row_max[i]), inv_l(t.row_inv_sum[i]), delta(t.row_delta[i]), zero(0.0f);
    const fbatch index = attention_detail::lane_index<Arch>();
    const float *mask_row = t.mask ? t.mask + i * t.mask_ld + t.key0 : nullptr;
    const bool cap = t.softcap > 0.0f;
    const fbatch softcap(t.softcap), one(1.0f);
    const int64_t at = i + t.visibility.offset;  // i', the query on the key axis
    // P < 2^-100 is taken as 0, i.e. S - m < cut: its products (P dO, dS = P (dP - delta) and
    // on) would reach subnormal floats, which x86 multiplies ~100x slower (microcode assists;
    // ALiBi's far keys are full of them), and each is below 2^-76 of the row's largest P
    // (>= 1/keys) times the same factor: under an f32 rounding of the sums it joins.
    const fbatch cut(cols.hi > cols.lo ? -69.31f - __builtin_logf(t.row_inv_sum[i]) : 0.0f);
    const int64_t from = cols.hi > cols.lo ? cols.lo / W * W : 0;
    const int64_t to = cols.hi > cols.lo ? cols.hi : 0;
    for (int64_t c = 0; c < from; c += W) {
        zero.store_aligned(p_row + c);
        zero.store_aligned(ds_row + c);
    }
    for (int64_t c = from; c < to; c += W) {
        fbatch s = fbatch::load_aligned(p_row + c), g = one;
        if (cap) {
            const fbatch th = kernels::tanh<Arch>(s / softcap);
            s = softcap * th;
            g = one - th * th;
        }
        if (mask_row) {
            if (c + W <= to) {
                s += fbatch::load_unaligned(mask_row + c);
            } else {
                alignas(64) float part[W] = {};
                for (int64_t x = 0; x < to - c; ++x) part[x] = mask_row[c + x];
                s += fbatch::load_aligned(part);
            }
        }
        if (t.alibi_slope) {  // |i' - j| for j = key0 + c + lane, as the forward forms it
            const fbatch distance = xsimd::abs(fbatch(static_cast<float>(at - t.key0 - c)) - index);
            s -= fbatch(*t.alibi_slope) * distance;
        }
        const fbatch x = s - shift;
        auto live = x >= cut || xsimd::isnan(x);  // a NaN score stays NaN
        if (c < cols.lo || c + W > cols.hi) {     // a vector the row's visible columns cut
            const fbatch col = fbatch(static_cast<float>(c)) + index;
            live = live && col >= fbatch(static_cast<float>(cols.lo)) &&
                   col < fbatch(static_cast<float>(cols.hi));
        }
        const fbatch p = xsimd::select(live, kernels::exp<Arch>(x) * inv_l, zero);
        fbatch dp = fbatch::load_aligned(ds_row + c), pz = p;
        if (t.dropout_keys) {
            const fbatch z = attention_detail::apply_dropout<Arch>(
                one, t.dropout_keys[i], t.key0 + c, t.dropout_threshold, t.dropout_keep);
            dp *= z;
            pz *= z;
        }
        fbatch ds = p * (dp - delta);
        if (cap) ds *= g;
        xsimd::select(live, ds, zero).store_aligned(ds_row + c);
        pz.store_aligned(p_row + c);
    }
    for (int64_t c = attention_detail::round_up(to, W); c < backward_bk; c += W) {
        zero.store_aligned(p_row + c);
        zero.store_aligned(ds_row + c);
    }
}

// Loads the key tile: K panels (for S), V panels (for dP), K rows padded (for dq), and zeroes
// the dK, dV accumulators.
template <class Arch>
void load_key_tile(const attention_backward_tile &t, const scratch_layout<Arch> &at) {
    constexpr int nr = panel_keys<Arch>;
    float *base = t.scratch;
    // the tile's f32 rows as one page (kv_rows.hpp), packed as the forward packs K
    kv_rows k_rows, v_rows;
    const float *k = static_cast<const float *>(t.k);
    k_rows.base = k;
    k_rows.ld = t.k_ld;
    v_rows.base = t.v;
    v_rows.ld = t.v_ld;
    attention_detail::pack_k_panels<Arch, f32_elements>(k_rows, 0, t.keys, t.dim_qk,
                                                        backward_bk / nr, base + at.k_panels);
    attention_detail::pack_k_panels<Arch, f32_elements>(v_rows, 0, t.keys, t.dim_v,
                                                        backward_bk / nr, base + at.v_panels);
    copy_padded<Arch>(k, t.k_ld, t.keys, backward_bk, t.dim_qk, 1.0f, base + at.k_rows,
                      at.dk_pad);
    for (int64_t x = 0; x < backward_bk * at.dk_pad; ++x) base[at.dk_acc + x] = 0.0f;
    for (int64_t x = 0; x < backward_bk * at.dv_pad; ++x) base[at.dv_acc + x] = 0.0f;
}

// acc[keys x dim] += A^T b over the step's rows, A = a[rows x bk] (P z or dS), b the step's
// rows (dO or qs); key c sums only the rows that see it (seen.key(c)).
template <class Arch>
void key_products(const step_ranges &seen, const float *a, const float *b, int64_t ldb,
                  int64_t dim_pad, float *acc) {
    const int64_t keys = seen.keys;
    using blk = attention_blocking<Arch>;
    constexpr int W = lanes<Arch>;
    const int64_t vectors = dim_pad / W;
    for (int64_t v0 = 0; v0 < vectors; v0 += blk::nv) {
        const int nvec = static_cast<int>(vectors - v0 < blk::nv ? vectors - v0 : blk::nv);
        for (int64_t c0 = 0; c0 < keys; c0 += blk::mr_o) {
            const int cc = static_cast<int>(keys - c0 < blk::mr_o ? keys - c0 : blk::mr_o);
            // rows every key of the block sees, then each key's further rows
            const key_range shared = seen.shared_by_keys(c0, c0 + cc);
            acc_block_any<Arch, blk::mr_o>(cc, nvec, a + shared.lo * backward_bk + c0, 1,
                                           backward_bk, shared.hi - shared.lo,
                                           b + shared.lo * ldb + v0 * W, ldb,
                                           acc + c0 * dim_pad + v0 * W, dim_pad);
            if (shared.lo == 0 && shared.hi == seen.rows) continue;  // every key sees every row
            for (int64_t c = c0; c < c0 + cc; ++c)
                for (const key_range &part : range_parts(seen.key(c), shared).part)
                    acc_block_any<Arch, 1>(1, nvec, a + part.lo * backward_bk + c, 1, backward_bk,
                                           part.hi - part.lo, b + part.lo * ldb + v0 * W, ldb,
                                           acc + c * dim_pad + v0 * W, dim_pad);
        }
    }
}

// dq[rows x dim] += dS K over the tile's keys; row r sums only the keys it sees (seen.row(r)).
template <class Arch>
void query_products(const step_ranges &seen, const float *ds, const float *k_rows,
                    int64_t dim_pad, float *dqs) {
    using blk = attention_blocking<Arch>;
    constexpr int W = lanes<Arch>;
    const int64_t vectors = dim_pad / W;
    for (int64_t v0 = 0; v0 < vectors; v0 += blk::nv) {
        const int nvec = static_cast<int>(vectors - v0 < blk::nv ? vectors - v0 : blk::nv);
        for (int64_t r0 = 0; r0 < seen.rows; r0 += blk::mr_o) {
            const int rr = static_cast<int>(seen.rows - r0 < blk::mr_o ? seen.rows - r0 : blk::mr_o);
            // keys every row of the block sees, then each row's further keys
            const key_range shared = seen.shared_by_rows(r0, r0 + rr);
            acc_block_any<Arch, blk::mr_o>(rr, nvec, ds + r0 * backward_bk + shared.lo,
                                           backward_bk, 1, shared.hi - shared.lo,
                                           k_rows + shared.lo * dim_pad + v0 * W, dim_pad,
                                           dqs + r0 * dim_pad + v0 * W, dim_pad);
            if (shared.lo == 0 && shared.hi == seen.keys) continue;  // every row sees every key
            for (int64_t r = r0; r < r0 + rr; ++r)
                for (const key_range &part : range_parts(seen.row(r), shared).part)
                    acc_block_any<Arch, 1>(1, nvec, ds + r * backward_bk + part.lo, backward_bk, 1,
                                           part.hi - part.lo, k_rows + part.lo * dim_pad + v0 * W,
                                           dim_pad, dqs + r * dim_pad + v0 * W, dim_pad);
        }
    }
}

}  // namespace backward_detail

template <class Arch>
int64_t attention_backward_scratch_floats(int64_t dim_qk, int64_t dim_v) {
    return backward_detail::scratch_layout<Arch>(dim_qk, dim_v).total;
}

template <class Arch>
void attention_backward_tile(const attention_backward_tile &t) {
    using namespace backward_detail;
    constexpr int nr = panel_keys<Arch>;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const scratch_layout<Arch> at(t.dim_qk, t.dim_v);
    float *qs = t.scratch + at.q_tile, *dos = t.scratch + at.do_tile, *dqs = t.scratch + at.dq_tile;
    float *p = t.scratch + at.p, *ds = t.scratch + at.ds;
    if (t.first_head) load_key_tile<Arch>(t, at);
    const int64_t n_panels = round_up(t.keys, nr) / nr;
    const float *q = static_cast<const float *>(t.q), *dout = static_cast<const float *>(t.dout);

    for (int64_t i0 = t.row_begin; i0 < t.row_end; i0 += backward_br) {
        const int64_t rows = t.row_end - i0 < backward_br ? t.row_end - i0 : backward_br;
        copy_padded<Arch>(q + i0 * t.q_ld, t.q_ld, rows, rows, t.dim_qk, t.scale, qs, at.dk_pad);
        copy_padded<Arch>(dout + i0 * t.dout_ld, t.dout_ld, rows, rows, t.dim_v, 1.0f, dos,
                          at.dv_pad);
        copy_padded<Arch>(t.dq + i0 * t.dq_ld, t.dq_ld, rows, rows, t.dim_qk, 1.0f, dqs, at.dk_pad);
        // a row without gradient (fully masked) contributes nothing, whatever its q and dO hold
        for (int64_t r = 0; r < rows; ++r)
            if (t.row_max[i0 + r] == neg_inf) {
                for (int64_t c = 0; c < at.dv_pad; ++c) dos[r * at.dv_pad + c] = 0.0f;
                for (int64_t c = 0; c < at.dk_pad; ++c) qs[r * at.dk_pad + c] = 0.0f;
            }

        // S = qs K^T and dP = dO V^T for the step, where some row of a block sees a key
        const step_ranges seen(t, i0, rows);
        panel_products<Arch>(qs, at.dk_pad, seen, t.scratch + at.k_panels, t.dim_qk, n_panels, p,
                             t.scratch + at.score_max);
        panel_products<Arch>(dos, at.dv_pad, seen, t.scratch + at.v_panels, t.dim_v, n_panels, ds,
                             t.scratch + at.score_max);
        for (int64_t r = 0; r < rows; ++r) {
            const bool none = t.row_max[i0 + r] == neg_inf;
            gradient_row<Arch>(t, i0 + r, none ? key_range{0, 0} : seen.row(r),
                               p + r * backward_bk, ds + r * backward_bk);
        }

        // dV += (P z)^T dO and dK += dS^T qs, key by key over the rows that see it
        key_products<Arch>(seen, p, dos, at.dv_pad, at.dv_pad, t.scratch + at.dv_acc);
        key_products<Arch>(seen, ds, qs, at.dk_pad, at.dk_pad, t.scratch + at.dk_acc);

        // dq += dS K, row by row over the keys it sees
        query_products<Arch>(seen, ds, t.scratch + at.k_rows, at.dk_pad, dqs);
        copy_rows_out<Arch>(dqs, at.dk_pad, rows, t.dim_qk, t.dq + i0 * t.dq_ld, t.dq_ld);
    }

    if (!t.last_head) return;
    copy_rows_out<Arch>(t.scratch + at.dk_acc, at.dk_pad, t.keys, t.dim_qk,
                        static_cast<float *>(t.dk), t.dk_ld);
    copy_rows_out<Arch>(t.scratch + at.dv_acc, at.dv_pad, t.keys, t.dim_v,
                        static_cast<float *>(t.dv), t.dv_ld);
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
