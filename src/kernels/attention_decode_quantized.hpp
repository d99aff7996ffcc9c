// The decode kernel's passes (attention_decode.hpp) for rows that all see the same keys (the
// query heads of one KV head, or one row), over a cache of any type: each K and V vector is
// widened (f32, bf16, f16) or dequantized (kernels/row_reader.hpp: the raw codes widened, times
// the broadcast scale of their group, less its zero point) in registers once and used for every
// row, so the widening is paid once per element, not once per row:
//   scores: KEYS keys x RP rows of lane-wise dot products at a time (KEYS * RP = W
//           accumulators), summed across their lanes all at once (transpose_sum_inlined);
//   P V:    o[r] += p[r][c] v_c over a few vectors of dim_v at a time, o in registers.
// One scale per row without zero points is folded: one multiply per score for K, into P for V
// (P times the sub-block's scales once, so that the products broadcast from memory), and so is
// a scale per group for one row (scale_once_per_group). On AVX-512, 4-bit codes are read
// through 16-entry tables (each group's scale and zero point in its table) and E4M3 codes as the
// f32 bits of 2^-120 of their values, 64 at a time in the quads' order (q reordered to match,
// P V's sums put back as they are stored), 2^60 in q and in the scale (scores), 2^120 in P
// times the scale (decode_widen.hpp; V rows whose scale is 2^7 or more, and q rows of 2^64 or more, read
// exactly instead), and bf16 rows shared by several rows as their even and
// odd elements (a shift and a mask for 32 elements, no shuffle), q and the sums of P V in that
// order too. K and V rows ahead are prefetched (decode_rows.hpp): K's
// in the score pass, dense V rows' inside the P V loop.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "kernels/attention_args.hpp"
#include "kernels/attention_micro.hpp"
#include "kernels/attention_pack.hpp"
#include "kernels/decode_dots.hpp"
#include "kernels/decode_rows.hpp"
#include "kernels/decode_widen.hpp"
#include "kernels/row_reader.hpp"
#include "kernels/vec_math.hpp"

ATTN_KERNELS_BEGIN
namespace attention_decode_detail {

// q rows as the score pass reads them, dim apart at qp: reordered in pairs (l.nibbles, bf16
// pairs), or times a factor an element, qc[r] at row r: the channels' scales (l.channels, their
// zero points into zero) or 2^60 (l.e4m3; q rows of 2^64 or more, whose products would
// overflow, turn l.e4m3 off: their keys' codes are read exactly).
template <class Arch, class E, int RP>
void q_for_scores(const attention_tile &t, const float *const *q, bool bf16_pairs, quant_layout &l,
                  float *qp, const float **qc, float *zero) {
    const int64_t dim = t.dim_qk, group = t.k.scales.group;
    if constexpr (decode_widen::available<Arch> && (E::bits == 4 || E::type == ATTN_DTYPE_BF16))
        if (l.nibbles || bf16_pairs)
            for (int r = 0; r < RP; ++r) decode_widen::deinterleave_pairs<Arch>(q[r], dim, qp + r * dim);
    if (l.e4m3 && dim > max_pair_dim) l.e4m3 = false;
    if constexpr (decode_widen::available<Arch>)
        for (int r = 0; l.e4m3 && r < RP; ++r) l.e4m3 = decode_widen::all_below<Arch>(q[r], dim, 0x1p64f);
    const auto times = [&](auto factor) {
        for (int r = 0; r < RP; ++r) {
            for (int64_t d = 0; d < dim; ++d) qp[r * dim + d] = q[r][d] * factor(d);
            qc[r] = qp + r * dim;
        }
    };
    if (l.channels) {  // every key has the scales (and zero points) of key 0
        const float *sc = t.k.scale_row(0), *ze = t.k.zero_row(0);
        times([&](int64_t d) { return sc[d / group]; });
        for (int64_t d = 0; l.zeros && d < dim; ++d) zero[d] = ze[d / group];
    } else if (l.e4m3) {  // times 2^60, in the quads' order over whole blocks of 64 (decode_widen::e4m3_quads)
        if constexpr (decode_widen::available<Arch>)
            for (int r = 0; r < RP; ++r) {
                decode_widen::quads_times<Arch>(q[r], dim, decode_widen::e4m3_q_unit, qp + r * dim);
                qc[r] = qp + r * dim;
            }
    }
}

// s[r * lds + c] = q_r . k_{j0 + c} for r < R, c in [lo, hi), rows dim apart at qs: KEYS keys
// x RP rows of lane-wise dot products at a time (KEYS * RP = W accumulators).
template <class Arch, class E, int R>
void scores_in_registers(const attention_tile &t, const float *qs, int64_t lo, int64_t hi,
                         int64_t j0, float *s, int64_t lds) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    constexpr int RP = R == 3 ? 4 : R;  // rows padded to a power of two (a copy of row 0)
    constexpr int KEYS = W / RP;
    const int64_t dim = t.dim_qk, dim_vec = dim / W * W, group = t.k.scales.group;
    const float *q[RP];
    for (int r = 0; r < RP; ++r) q[r] = qs + (r < R ? r : 0) * dim;
    quant_layout l = layout_of<Arch, E>(t.k, dim, 32);
    alignas(64) float qp[RP * max_pair_dim], zero[max_pair_dim];
    const float *qc[RP];
    // bf16 rows in pairs where several rows share each key (one row reads key by key; in pairs
    // there too, it took the same 8.6-9.1 ns a KV row, H32 over 32 KV heads, Lk512, 1 thread)
    const bool bf16_pairs = l.bf16_pairs && RP > 1;
    q_for_scores<Arch, E, RP>(t, q, bf16_pairs, l, qp, qc, zero);
    // DAZ held off while E4M3 codes are read as f32 bits
    const decode_widen::denormals_kept<decode_widen::available<Arch> && E::type == ATTN_DTYPE_FP8_E4M3> kept;
    const float unit = l.e4m3 ? decode_widen::e4m3_sum_unit : 1.0f;  // what the sums are missing
    // K rows ahead fetched meanwhile (and V's, where not dense)
    const row_prefetch ahead(t, dim, t.dim_v, j0, R);
    const row_walk<Arch, E> keys(t.k, j0);
    // rows of whole vectors: the scores need no more than the lane sums (times the scales where
    // folded), but for an E4M3 block of rows holding the NaN code
    const bool whole = dim_vec == dim;
    // one row whose q fits in registers: the keys' rows read key by key (key_major_dots)
    const int64_t qv = RP == 1 && whole ? dim / W : 0;
    reader_slots<Arch, E, KEYS> key_slots;
    row_reader<Arch, E> *const key = key_slots.at;
    keys.prime(KEYS, key);
    int64_t c = lo;
    for (; c + KEYS <= hi; c += KEYS) {
        ahead.fetch_scores<Arch>(j0, c, KEYS, hi);
        keys.readers(c, KEYS, key);
        fbatch acc[W];
#pragma GCC unroll 16
        for (int i = 0; i < W; ++i) acc[i] = fbatch(0.0f);
        const float *const *qk = l.channels || l.e4m3 ? qc : q;
        bool nan_seen = false;  // (E4M3: whether the keys' codes hold the NaN code)
        if (l.nibbles) {
            if (!(RP == 1 && nibble_key_major<Arch, E, KEYS>(l, qv, qp, key, group, acc)))
                nibble_dots<Arch, E, RP, KEYS>(l, qp, key, dim, group, acc);
        } else if (bf16_pairs) {
            bf16_pair_dots<Arch, E, RP, KEYS>(qp, key, dim, acc);
        }
        else if (!(qv == 8 && key_major_dots<Arch, E, KEYS, 8>(l, qk[0], key, group, zero, acc, nan_seen)) &&
                 !(qv == 4 && key_major_dots<Arch, E, KEYS, 4>(l, qk[0], key, group, zero, acc, nan_seen)))
            key_dots<Arch, E, RP, KEYS>(l, qk, key, dim, group, zero, acc, nan_seen);
        bool nan[KEYS] = {};  // an E4M3 row holding the NaN code: its scores are NaN
        if constexpr (decode_widen::available<Arch> && E::type == ATTN_DTYPE_FP8_E4M3)
            if (nan_seen)
                for (int k = 0; k < KEYS; ++k) nan[k] = decode_widen::e4m3_row_has_nan<Arch>(key[k].p, dim);
        alignas(64) float sum[W];
        fbatch total = transpose_sum_inlined<Arch>(acc);
        if constexpr (E::quantized)
            if (l.fold) {  // (sum 2^60) scale (E4M3), as one score at a time would
                alignas(64) float sc[W];
                keys.row_scales(c, KEYS, key, sc);
                fbatch scales;  // lane r KEYS + k: key k's scale
                if constexpr (decode_widen::available<Arch> && KEYS == 4)
                    scales = _mm512_broadcast_f32x4(_mm_load_ps(sc));
                else if constexpr (decode_widen::available<Arch> && KEYS == 8) {
                    const __m512 eight = _mm512_castps256_ps512(_mm256_load_ps(sc));
                    scales = _mm512_shuffle_f32x4(eight, eight, 0x44);
                } else {
                    for (int i = KEYS; i < W; ++i) sc[i] = sc[i % KEYS];
                    scales = fbatch::load_aligned(sc);
                }
                total = total * fbatch(unit) * scales;
            }
        total.store_aligned(sum);
        if (whole && !nan_seen) {  // each row's KEYS scores at once
            for (int r = 0; r < R; ++r) std::memcpy(s + r * lds + c, sum + r * KEYS, sizeof(float) * KEYS);
            continue;
        }
        for (int r = 0; r < R; ++r)
            for (int k = 0; k < KEYS; ++k) {
                float v = sum[r * KEYS + k];
                for (int64_t d = dim_vec; d < dim; ++d) v += q[r][d] * key[k].one(d);
                s[r * lds + c + k] = nan[k] ? std::numeric_limits<float>::quiet_NaN() : v;
            }
    }
    for (; c < hi; ++c) {
        const row_reader<Arch, E> key(t.k, j0 + c);
        for (int r = 0; r < R; ++r) s[r * lds + c] = reader_dot<Arch, E>(q[r], key, dim);
    }
}

// How a V vector meets its scale: folded into P (one scale per row, no zero point; E4M3 read
// as 2^-120 of its values, 2^120 in P too), per group (into P: scale_once_per_group; once for the
// two vectors of a group of 2 W elements), by the row reader (any other layout), or by 4-bit
// tables (spans of 32 in pairs, decode_widen); bf16 rows with several rows a key in pairs
// too (pv_bf16_pairs, no scale).
enum pv_scaling { pv_folded, pv_e4m3, pv_group_scaled, pv_pair_scaled, pv_by_group, pv_by_group_zeros, pv_by_reader, pv_nibbles, pv_bf16_pairs };

// acc[r][i] += p[r * ldp + c] v_c[vector v0 + i] for the keys c < n (V rows val[c], vector
// group gi[i]) and i < N; with pv_nibbles, acc[r][2 m] and [2 m + 1] the even and odd elements
// of the span of vectors v0 + 2 m, v0 + 2 m + 1, and likewise with pv_bf16_pairs. (E4M3: a
// NaN code reads as a finite value here; the codes read go into nan_top
// (decode_widen::e4m3_low7_top), and e4m3_nan_columns makes the columns holding one NaN after
// the sub-block.)
template <class Arch, class E, int R, int N, pv_scaling S, int NV, nibble_tables T = tables_plain>
__attribute__((always_inline)) inline void
pv_keys(const row_reader<Arch, E> *val, int64_t n, const float *p, int64_t ldp, int64_t v0,
        const int64_t *gi, xsimd::batch<float, Arch> (&acc)[R][NV], const v_prefetch &ahead,
        __m512i *nan_top = nullptr) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    // (the codes' offset of vector v0 is added to each key's row pointer, vector i's offset from
    // there known at compile time: an offset register for each vector ran out of registers)
    const int64_t v0_bytes = E::bits == 4 ? v0 * W / 2 : v0 * W;
    for (int64_t c = 0; c < n; ++c) {
        ahead.fetch(c);
        const row_reader<Arch, E> &vc = val[c];
        [[maybe_unused]] const uint8_t *at = nullptr;  // the codes of vector v0 on
        if constexpr (E::quantized) at = vc.p + v0_bytes;
        fbatch x[N];
        if constexpr (S == pv_folded) {
#pragma GCC unroll 16
            for (int i = 0; i < N; ++i) x[i] = raw_vector<Arch, E>(at, i * W);
        } else if constexpr (S == pv_e4m3) {  // in the quads' order, 64 codes at a time
            if constexpr (decode_widen::available<Arch>) {
                static_assert(N % 4 == 0, "whole blocks of 64 codes");
#pragma GCC unroll 4
                for (int m = 0; m < N / 4; ++m) {
                    __m512 quad[4];
                    decode_widen::e4m3_quads_at<Arch>(at + 4 * m * W, *nan_top, quad);
#pragma GCC unroll 4
                    for (int i = 0; i < 4; ++i) x[4 * m + i] = quad[i];
                }
            }
        } else if constexpr (S == pv_pair_scaled) {  // groups of two vectors: p s once a group
#pragma GCC unroll 8
            for (int m = 0; m < N / 2; ++m) {
                const fbatch ps(p[c] * vc.sc[gi[2 * m]]);
                acc[0][2 * m] = xsimd::fma(ps, raw_vector<Arch, E>(at, 2 * m * W), acc[0][2 * m]);
                acc[0][2 * m + 1] = xsimd::fma(ps, raw_vector<Arch, E>(at, (2 * m + 1) * W), acc[0][2 * m + 1]);
            }
            continue;
        } else if constexpr (S == pv_group_scaled) {
#pragma GCC unroll 16
            for (int i = 0; i < N; ++i) x[i] = raw_vector<Arch, E>(at, i * W);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
                for (int i = 0; i < N; ++i)
                    acc[r][i] = xsimd::fma(fbatch(p[r * ldp + c] * vc.sc[gi[i]]), x[i], acc[r][i]);
            continue;
        } else if constexpr (S == pv_by_group || S == pv_by_group_zeros) {
#pragma GCC unroll 16
            for (int i = 0; i < N; ++i) {
                const fbatch raw = raw_vector<Arch, E>(at, i * W);
                if constexpr (S == pv_by_group_zeros) x[i] = (raw - fbatch(vc.ze[gi[i]])) * fbatch(vc.sc[gi[i]]);
                else x[i] = raw * fbatch(vc.sc[gi[i]]);
            }
        } else if constexpr (S == pv_nibbles) {
            // each span's two vectors into the sums as soon as they are read, so that no more
            // than they are live besides the sums (with zero points, all of a key's vectors at
            // once left a sum on the stack: a store and reload in every key's chain)
            if constexpr (decode_widen::available<Arch> && E::bits == 4) {
                using namespace decode_widen;
                fbatch pr[R];
#pragma GCC unroll 4
                for (int r = 0; r < R; ++r) pr[r] = fbatch(p[r * ldp + c]);
#pragma GCC unroll 8
                for (int m = 0; m < N / 2; ++m) {
                    const __m512 table = nibble_table<T>(nibble_values<E, Arch>(), vc, gi[2 * m]);
                    const __m512i pairs = nibble_pairs<Arch>(at, 2 * m * W);
                    const fbatch xe = even_values<Arch>(pairs, table), xo = odd_values<Arch>(pairs, table);
#pragma GCC unroll 4
                    for (int r = 0; r < R; ++r) {
                        acc[r][2 * m] = xsimd::fma(pr[r], xe, acc[r][2 * m]);
                        acc[r][2 * m + 1] = xsimd::fma(pr[r], xo, acc[r][2 * m + 1]);
                    }
                }
            }
            continue;
        } else if constexpr (S == pv_bf16_pairs) {  // each span's even and odd elements (decode_widen)
            if constexpr (decode_widen::available<Arch> && E::type == ATTN_DTYPE_BF16) {
#pragma GCC unroll 8
                for (int m = 0; m < N / 2; ++m) {
                    const __m512i words = decode_widen::bf16_span<Arch>(vc.p, (v0 + 2 * m) * W);
                    x[2 * m] = decode_widen::bf16_even<Arch>(words);
                    x[2 * m + 1] = decode_widen::bf16_odd<Arch>(words);
                }
            }
        } else {
#pragma GCC unroll 16
            for (int i = 0; i < N; ++i) x[i] = vc.vec((v0 + i) * W);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const fbatch pr(p[r * ldp + c]);
#pragma GCC unroll 16
            for (int i = 0; i < N; ++i) acc[r][i] = xsimd::fma(pr, x[i], acc[r][i]);
        }
    }
}

// The order of the sums of P V in registers: the elements' own, or as the codes are read
// (spans of 32 in pairs for nibbles and bf16 pairs; blocks of 64 in quads for E4M3).
enum o_order { o_in_order, o_in_pairs, o_in_quads };
// acc = o[r][vectors v0 .. v0 + NV) (to_registers) or back, in the order given.
template <class Arch, int R, int NV>
__attribute__((always_inline)) inline void
o_registers(bool to_registers, o_order order, float *o, int64_t ldo, int64_t v0,
        xsimd::batch<float, Arch> (&acc)[R][NV]) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    for (int r = 0; r < R; ++r) {
        float *at = o + r * ldo + v0 * W;
#pragma GCC unroll 16
        for (int i = 0; i < NV; ++i)
            if (to_registers) acc[r][i] = fbatch::load_unaligned(at + i * W);
        if constexpr (decode_widen::available<Arch> && NV % 2 == 0) {
            if (order == o_in_pairs)
#pragma GCC unroll 8
                for (int m = 0; m < NV / 2; ++m) {
                    __m512 a, b;
                    if (to_registers) decode_widen::deinterleave_pair<Arch>(acc[r][2 * m], acc[r][2 * m + 1], a, b);
                    else decode_widen::interleave_pair<Arch>(acc[r][2 * m], acc[r][2 * m + 1], a, b);
                    acc[r][2 * m] = a;
                    acc[r][2 * m + 1] = b;
                }
        }
        if constexpr (decode_widen::available<Arch> && NV % 4 == 0) {
            if (order == o_in_quads)
#pragma GCC unroll 4
                for (int m = 0; m < NV / 4; ++m) {
                    __m512 x[4];
#pragma GCC unroll 4
                    for (int i = 0; i < 4; ++i) x[i] = acc[r][4 * m + i];
                    if (to_registers) decode_widen::order_to_quads<Arch>(x);
                    else decode_widen::quads_to_order<Arch>(x);
#pragma GCC unroll 4
                    for (int i = 0; i < 4; ++i) acc[r][4 * m + i] = x[i];
                }
        }
#pragma GCC unroll 16
        for (int i = 0; i < NV; ++i)
            if (!to_registers) acc[r][i].store_unaligned(at + i * W);
    }
}

// o[r] vectors v0 .. v0 + NV += sum_{c < n} p[r * ldp + c] v_c (V rows val[c]) for r < R,
// o in registers. ps: P times each row's scale (l.fold), 64 apart. (nan_top: pv_keys.)
template <class Arch, class E, int R, int NV, pv_scaling S, nibble_tables T>
__attribute__((always_inline)) inline void
pv_vectors(const quant_layout &l, const row_reader<Arch, E> *val, int64_t n, const float *p,
           int64_t ldp, const float *ps, int64_t group, float *o, int64_t ldo,
           int64_t v0, const v_prefetch &ahead, __m512i *nan_top) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    // P times the rows' scales (64 apart) where the scale is one a row, else P
    constexpr bool scaled_p = S == pv_folded || S == pv_e4m3 || (S == pv_nibbles && T == tables_plain);
    fbatch acc[R][NV];
    constexpr o_order order = S == pv_nibbles || S == pv_bf16_pairs ? o_in_pairs : S == pv_e4m3 ? o_in_quads : o_in_order;
    o_registers<Arch, R, NV>(true, order, o, ldo, v0, acc);
    int64_t gi[NV];  // the group of each vector (by_group)
    for (int i = 0; i < NV; ++i) gi[i] = l.by_group && !l.fold ? (v0 + i) * W / group : 0;
    pv_keys<Arch, E, R, NV, S, NV, T>(val, n, scaled_p ? ps : p, scaled_p ? 64 : ldp, v0, gi, acc, ahead, nan_top);
    o_registers<Arch, R, NV>(false, order, o, ldo, v0, acc);
}

// How a sub-block's V vectors meet their scales (pv_scaling, and the 4-bit tables' kind).
struct pv_choice {
    pv_scaling s;
    nibble_tables t;
};
template <class Arch, class E, int R>
pv_choice pv_choice_of(const quant_layout &l, int64_t group) {
    constexpr int W = int(xsimd::batch<float, Arch>::size);
    static_assert(attention_blocking<Arch>::nv % 2 == 0, "pv_pair_scaled takes vectors in pairs");
    if (!E::quantized) return {l.bf16_pairs && R > 1 ? pv_bf16_pairs : pv_by_reader, tables_plain};
    if (l.nibbles) return {pv_nibbles, nibble_tables_of(l)};
    if (l.e4m3) return {pv_e4m3, tables_plain};
    if (l.fold) return {pv_folded, tables_plain};
    if (scale_once_per_group(l, R) && group == 2 * W) return {pv_pair_scaled, tables_plain};
    if (scale_once_per_group(l, R)) return {pv_group_scaled, tables_plain};
    if (l.by_group) return {l.zeros ? pv_by_group_zeros : pv_by_group, tables_plain};
    return {pv_by_reader, tables_plain};
}

// o[r] += sum_{c < n} p[r * ldp + c] v_c (V rows val[c]) for r < R over dim_v: the
// micro-kernel's nv vectors at a time in registers, then the last few one at a time, then the
// columns past the last whole vector one by one. ps: P times each row's scale (l.fold), 64 apart.
// One instance for each way of scaling (S, T), chosen once a sub-block (pv_choice_of), the
// usual ones inline in pv_in_registers and the rare ones in a function apart
// (pv_sub_block_apart): with every way's loop nest inside the one P V loop, the register
// allocator left a sum of some of them on the stack (a store and reload in every key's chain),
// which ones changing from one build to the next. nan_top: the E4M3 codes read (pv_keys).
template <class Arch, class E, int R, pv_scaling S, nibble_tables T>
__attribute__((always_inline)) inline void
pv_sub_block(const quant_layout &l, const row_reader<Arch, E> *val, int64_t n,
        const float *p, int64_t ldp, const float *ps, int64_t dim_v,
        int64_t group, float *o, int64_t ldo, const v_prefetch &ahead, __m512i *nan_top = nullptr) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    constexpr int NV = attention_blocking<Arch>::nv;
    const int64_t vectors = dim_v / W;
    int64_t v0 = 0;  // (V rows ahead prefetched in the first pass over the keys only)
    if constexpr (R == 1)  // one row: twice the vectors a pass (each key's row read in half the passes)
        for (; v0 + 2 * NV <= vectors; v0 += 2 * NV)
            pv_vectors<Arch, E, R, 2 * NV, S, T>(l, val, n, p, ldp, ps, group, o, ldo, v0, v0 ? v_prefetch{} : ahead, nan_top);
    for (; v0 + NV <= vectors; v0 += NV)
        pv_vectors<Arch, E, R, NV, S, T>(l, val, n, p, ldp, ps, group, o, ldo, v0, v0 ? v_prefetch{} : ahead, nan_top);
    for (; v0 < vectors; ++v0) {  // the last few vectors, one at a time
        fbatch one[R][1];
        for (int r = 0; r < R; ++r) one[r][0] = fbatch::load_unaligned(o + r * ldo + v0 * W);
        pv_keys<Arch, E, R, 1, pv_by_reader>(val, n, p, ldp, v0, nullptr, one, v0 ? v_prefetch{} : ahead);
        for (int r = 0; r < R; ++r) one[r][0].store_unaligned(o + r * ldo + v0 * W);
    }
    for (int64_t d = vectors * W; d < dim_v; ++d)
        for (int r = 0; r < R; ++r) {
            float acc = o[r * ldo + d];
            for (int64_t c = 0; c < n; ++c) acc += p[r * ldp + c] * val[c].one(d);
            o[r * ldo + d] = acc;
        }
}

// pv_sub_block in a function of its own, for the ways of scaling decoding rarely takes (per
// element, per group with zero points): kept out of the function of the usual ones, whose
// registers they would otherwise share.
template <class Arch, class E, int R, pv_scaling S, nibble_tables T>
__attribute__((noinline)) void
pv_sub_block_apart(const quant_layout &l, const row_reader<Arch, E> *val, int64_t n, const float *p, int64_t ldp,
                   const float *ps, int64_t dim_v, int64_t group, float *o, int64_t ldo,
                   const v_prefetch &ahead) {
    pv_sub_block<Arch, E, R, S, T>(l, val, n, p, ldp, ps, dim_v, group, o, ldo, ahead);
}

// After an E4M3 sub-block read its codes as f32 bits (decode_widen), the NaN code among them as
// a finite value: each column of rows val[0 .. n) holding the code gets p times a NaN, as
// reading the row exactly gives (its other codes have the same values either way). Rows with
// the code are rare: the sub-block's passes note whether any code they read is one, beside
// their products (a scan of the rows before the sub-block took the cache misses the
// multiply-adds would have overlapped; one after it was a loop of its own over the rows), and
// only then are the rows looked over here. ps: P times the rows' scales, ldps apart.
template <class Arch, class E, int R>
__attribute__((noinline)) void e4m3_nan_columns(const row_reader<Arch, E> *val, int64_t n, int64_t dim_v,
                                                const float *ps, int64_t ldps, float *o, int64_t ldo) {
    for (int64_t c = 0; c < n; ++c) {
        if (!decode_widen::e4m3_row_has_nan<Arch>(val[c].p, dim_v)) continue;
        for (int64_t j = 0; j < dim_v; ++j) {
            const uint8_t code = val[c].p[j];
            if ((code & 0x7f) != 0x7f) continue;
            const float nan = std::copysign(std::numeric_limits<float>::quiet_NaN(), code & 0x80 ? -1.0f : 1.0f);
            for (int r = 0; r < R; ++r) o[r * ldo + j] += ps[r * ldps + c] * nan;
        }
    }
}

// o[r] = o[r] rescale[r] + sum_{c in [lo, hi)} p[r * ldp + c] v_{j0 + c} for r < R (o rows
// ldo apart), in sub-blocks of `keys` (at most 64) whose V rows stay in L1 across dim_v.
template <class Arch, class E, int R>
void pv_in_registers(const attention_tile &t, int64_t lo, int64_t hi, int64_t j0, const float *p,
                     int64_t ldp, float *o, int64_t ldo, const float *rescale, int64_t keys) {
    constexpr int W = int(xsimd::batch<float, Arch>::size);
    const int64_t dim_v = t.dim_v;
    const quant_layout lv = layout_of<Arch, E>(t.v, dim_v, 2 * W);
    // DAZ held off while E4M3 codes are read as f32 bits
    const decode_widen::denormals_kept<decode_widen::available<Arch> && E::type == ATTN_DTYPE_FP8_E4M3> kept;
    for (int r = 0; r < R; ++r)
        for (int64_t d = 0; d < dim_v; ++d) o[r * ldo + d] *= rescale[r];
    constexpr int64_t max_keys = 64;  // the arrays below
    keys = keys < max_keys ? keys : max_keys;
    reader_slots<Arch, E, max_keys> val_slots;
    row_reader<Arch, E> *const val = val_slots.at;
    const row_walk<Arch, E> values(t.v, j0);
    values.prime(keys, val);
    const row_prefetch ahead(t, t.dim_qk, dim_v, j0, R);  // V rows ahead (dense rows)
    // V rows ahead in spans of 2 KB for one row, row by row for several (v_prefetch): H32 over
    // 32 KV heads, D128, Lk16384, the time of a call 0.75-0.81x over I8 with a scale a row,
    // 0.88-0.92x over bf16, 0.90-0.93x over E4M3 at one thread, 0.81-0.87x at two
    constexpr int64_t v_span_bytes = R == 1 ? 2048 : 0;
    alignas(64) float ps[R][max_keys], scale[max_keys];
    for (int64_t k0 = lo; k0 < hi; k0 += keys) {
        const int64_t n = k0 + keys < hi ? keys : hi - k0;
        values.readers(k0, n, val);
        quant_layout l = lv;
        float largest = 0.0f;
        if constexpr (E::quantized)
            if (l.fold) {
                values.row_scales(k0, n, val, scale);
                if (l.e4m3) {  // a vector's lanes at a time (one at a time, a chain of maxima took 13% of the pass)
                    using fbatch = xsimd::batch<float, Arch>;
                    fbatch most(0.0f);
                    int64_t c = 0;
                    for (; c + W <= n; c += W) most = xsimd::max(most, xsimd::abs(fbatch::load_aligned(scale + c)));
                    largest = reduce_max<Arch>(most);
                    for (; c < n; ++c) largest = std::fabs(scale[c]) > largest ? std::fabs(scale[c]) : largest;
                }
            }
        // E4M3 codes read as 2^-120 of their values put 2^120 into p s: where a scale is so
        // large (2^7 or more) that p s 2^120 could overflow (p <= 1), the sub-block's codes are
        // read exactly instead.
        if (l.e4m3 && !(largest <= std::numeric_limits<float>::max() / 0x1p121f)) l.e4m3 = false;
        const float unit = l.e4m3 ? decode_widen::e4m3_p_unit : 1.0f;  // what the codes are read without
        if (l.fold)  // p (s v) = (p s) v: the products p s as the old per-key ones, times 2^120 (E4M3)
            for (int r = 0; r < R; ++r)
                for (int64_t c = 0; c < n; ++c) ps[r][c] = p[r * ldp + k0 + c] * scale[c] * unit;
        const pv_choice how = pv_choice_of<Arch, E, R>(l, t.v.scales.group);
        const auto sub_block = [&](auto s, auto tables, __m512i *nan_top = nullptr) {
            constexpr pv_scaling S = decltype(s)::value;
            constexpr nibble_tables T = decltype(tables)::value;
            if constexpr (S == pv_by_reader || S == pv_by_group_zeros || S == pv_group_scaled)
                pv_sub_block_apart<Arch, E, R, S, T>(l, val, n, p + k0, ldp, ps[0], dim_v,
                                                     t.v.scales.group, o, ldo, ahead.v_ahead(k0, v_span_bytes));
            else
                pv_sub_block<Arch, E, R, S, T>(l, val, n, p + k0, ldp, ps[0], dim_v,
                                               t.v.scales.group, o, ldo, ahead.v_ahead(k0, v_span_bytes), nan_top);
        };
        using plain = std::integral_constant<nibble_tables, tables_plain>;
        if constexpr (!E::quantized) {
            if (how.s == pv_bf16_pairs)
                sub_block(std::integral_constant<pv_scaling, pv_bf16_pairs>{}, plain{});
            else
                sub_block(std::integral_constant<pv_scaling, pv_by_reader>{}, plain{});
        } else {
            switch (how.s) {
            case pv_nibbles:
                if constexpr (decode_widen::available<Arch> && E::bits == 4) {
                    with_tables(how.t, [&](auto tables) {
                        sub_block(std::integral_constant<pv_scaling, pv_nibbles>{}, tables);
                    });
                } else {  // (never chosen where the tables are not built: read per element)
                    sub_block(std::integral_constant<pv_scaling, pv_by_reader>{}, plain{});
                }
                break;
            case pv_e4m3:
                if constexpr (decode_widen::available<Arch> && E::type == ATTN_DTYPE_FP8_E4M3) {
                    __m512i top = _mm512_setzero_si512();
                    sub_block(std::integral_constant<pv_scaling, pv_e4m3>{}, plain{}, &top);
                    if (decode_widen::e4m3_has_nan_code<Arch>(top))
                        e4m3_nan_columns<Arch, E, R>(val, n, dim_v, ps[0], max_keys, o, ldo);
                } else
                    sub_block(std::integral_constant<pv_scaling, pv_by_reader>{}, plain{});
                break;
            case pv_folded: sub_block(std::integral_constant<pv_scaling, pv_folded>{}, plain{}); break;
            case pv_pair_scaled: sub_block(std::integral_constant<pv_scaling, pv_pair_scaled>{}, plain{}); break;
            case pv_group_scaled: sub_block(std::integral_constant<pv_scaling, pv_group_scaled>{}, plain{}); break;
            case pv_by_group: sub_block(std::integral_constant<pv_scaling, pv_by_group>{}, plain{}); break;
            case pv_by_group_zeros: sub_block(std::integral_constant<pv_scaling, pv_by_group_zeros>{}, plain{}); break;
            case pv_bf16_pairs:  // (bf16 caches only)
            case pv_by_reader: sub_block(std::integral_constant<pv_scaling, pv_by_reader>{}, plain{}); break;
            }
        }
    }
}

// f(std::integral_constant<int, R>{}) for R = rows, 1 .. attention_direct_rows: the passes
// instantiated per count of rows.
template <class F>
ATTN_ALWAYS_INLINE void with_rows(int64_t rows, F &&f) {
    switch (rows) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
    }
}

// The two passes for 1 .. attention_direct_rows rows sharing [lo, hi).
template <class Arch, class E>
void scores_in_registers(const attention_tile &t, int64_t rows, const float *qs, int64_t lo,
                         int64_t hi, int64_t j0, float *s, int64_t lds) {
    with_rows(rows, [&](auto r) { scores_in_registers<Arch, E, decltype(r)::value>(t, qs, lo, hi, j0, s, lds); });
}
template <class Arch, class E>
void pv_in_registers(const attention_tile &t, int64_t rows, int64_t lo, int64_t hi, int64_t j0,
                     const float *p, int64_t ldp, float *o, int64_t ldo, const float *rescale,
                     int64_t keys) {
    with_rows(rows, [&](auto r) {
        pv_in_registers<Arch, E, decltype(r)::value>(t, lo, hi, j0, p, ldp, o, ldo, rescale, keys);
    });
}

}  // namespace attention_decode_detail
ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
