// The decode kernel's passes over a quantized cache (attention_decode.hpp) for rows that all
// see the same keys (the query heads of one KV head, or one row): each K and V vector is
// dequantized in registers once (kernels/row_reader.hpp: the raw codes widened, times the
// broadcast scale of their group, less its zero point) and used for every row, so the widening
// is paid once per element, not once per row:
//   scores: KEYS keys x RP rows of lane-wise dot products at a time (KEYS * RP = W
//           accumulators), summed across their lanes all at once (transpose_sum);
//   P V:    o[r] += p[r][c] v_c over a few vectors of dim_v at a time, o in registers.
// One scale per row without zero points is folded: one multiply per score for K, into P for V.
// K and V rows 16 keys ahead are prefetched.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "kernels/attention_args.hpp"
#include "kernels/attention_micro.hpp"
#include "kernels/attention_pack.hpp"
#include "kernels/row_reader.hpp"
#include "kernels/vec_math.hpp"

ATTN_KERNELS_BEGIN
namespace attention_decode_detail {

// q . x over dim elements, x read by its row reader (whole vectors, then one by one).
template <class Arch, class E>
inline float reader_dot(const float *q, const row_reader<Arch, E> &x, int64_t dim) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    fbatch acc(0.0f);
    int64_t d = 0;
    for (; d + W <= dim; d += W) acc = xsimd::fma(fbatch::load_unaligned(q + d), x.vec(d), acc);
    float sum = reduce_add<Arch>(acc);
    for (; d < dim; ++d) sum += q[d] * x.one(d);
    return sum;
}

// s[r * lds + c] = q_r . k_{j0 + c} for r < R, c in [lo, hi), rows dim apart at qs.
template <class Arch, class E, int R>
void scores_in_registers(const attention_tile &t, const float *qs, int64_t lo, int64_t hi,
                         int64_t j0, float *s, int64_t lds) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    constexpr int RP = R == 3 ? 4 : R;  // rows padded to a power of two (a copy of row 0)
    constexpr int KEYS = W / RP;
    const int64_t dim = t.dim_qk, dim_vec = dim / W * W;
    const float *q[RP];
    for (int r = 0; r < RP; ++r) q[r] = qs + (r < R ? r : 0) * dim;
    // scales per whole vectors (per row, per group of a multiple of W): taken per group
    const int64_t group = t.k.scales.group;
    const bool by_group = group % W == 0;
    const bool zeros = E::has_zero && t.k.scales.zero;
    // one scale per row and no zero point: q . (s k) = s (q . k), one multiply per score
    const bool fold = by_group && group == dim && !zeros;
    // K and V rows 16 keys ahead fetched meanwhile, when rows share pages (as the f32 kernel)
    const bool fetch = t.k.ld * core::element_bits(t.k.type) < 4096 * 8 &&
                       t.v.ld * core::element_bits(t.v.type) < 4096 * 8;
    int64_t c = lo;
    for (; c + KEYS <= hi; c += KEYS) {
        for (int k = 0; fetch && k < KEYS && c + 16 + k < hi; ++k) {
            attention_detail::prefetch_row<Arch, false>(t.k.row(j0 + c + 16 + k), t.k.type, 0, dim);
            attention_detail::prefetch_row<Arch, false>(t.v.row(j0 + c + 16 + k), t.v.type, 0, t.dim_v);
        }
        row_reader<Arch, E> key[KEYS];
        for (int k = 0; k < KEYS; ++k) key[k] = row_reader<Arch, E>(t.k, j0 + c + k);
        fbatch acc[W];
#pragma GCC unroll 16
        for (int i = 0; i < W; ++i) acc[i] = fbatch(0.0f);
        if (by_group) {  // a scale (and zero point) per whole vectors: loaded once per group
            for (int64_t g0 = 0, gi = 0; g0 < dim; g0 += group, ++gi) {
                fbatch sk[KEYS], zk[KEYS];
                for (int k = 0; k < KEYS; ++k) {
                    sk[k] = fbatch(fold ? 1.0f : key[k].sc[gi]);
                    zk[k] = zeros ? fbatch(key[k].ze[gi]) : fbatch(0.0f);
                }
                if (fold) {  // the codes' dot products; the scale after the sum
                    for (int64_t d = g0; d < g0 + group; d += W) {
                        fbatch qv[RP];
#pragma GCC unroll 4
                        for (int r = 0; r < RP; ++r) qv[r] = fbatch::load_unaligned(q[r] + d);
#pragma GCC unroll 16
                        for (int k = 0; k < KEYS; ++k) {
                            const fbatch x = raw_vector<Arch, E>(key[k].p, d);
#pragma GCC unroll 4
                            for (int r = 0; r < RP; ++r) acc[r * KEYS + k] = xsimd::fma(qv[r], x, acc[r * KEYS + k]);
                        }
                    }
                    continue;
                }
                for (int64_t d = g0; d < g0 + group; d += W) {
                    fbatch qv[RP];
#pragma GCC unroll 4
                    for (int r = 0; r < RP; ++r) qv[r] = fbatch::load_unaligned(q[r] + d);
#pragma GCC unroll 16
                    for (int k = 0; k < KEYS; ++k) {
                        const fbatch x = (raw_vector<Arch, E>(key[k].p, d) - zk[k]) * sk[k];
#pragma GCC unroll 4
                        for (int r = 0; r < RP; ++r) acc[r * KEYS + k] = xsimd::fma(qv[r], x, acc[r * KEYS + k]);
                    }
                }
            }
        } else {
            for (int64_t d = 0; d < dim_vec; d += W) {
                fbatch qv[RP];
#pragma GCC unroll 4
                for (int r = 0; r < RP; ++r) qv[r] = fbatch::load_unaligned(q[r] + d);
#pragma GCC unroll 16
                for (int k = 0; k < KEYS; ++k) {
                    const fbatch x = key[k].vec(d);
#pragma GCC unroll 4
                    for (int r = 0; r < RP; ++r) acc[r * KEYS + k] = xsimd::fma(qv[r], x, acc[r * KEYS + k]);
                }
            }
        }
        alignas(64) float sum[W];
        transpose_sum<Arch>(acc).store_aligned(sum);
        for (int r = 0; r < R; ++r)
            for (int k = 0; k < KEYS; ++k) {
                float v = fold ? sum[r * KEYS + k] * key[k].sc[0] : sum[r * KEYS + k];
                for (int64_t d = dim_vec; d < dim; ++d) v += q[r][d] * key[k].one(d);
                s[r * lds + c + k] = v;
            }
    }
    for (; c < hi; ++c) {
        const row_reader<Arch, E> key(t.k, j0 + c);
        for (int r = 0; r < R; ++r) s[r * lds + c] = reader_dot<Arch, E>(q[r], key, dim);
    }
}

// How a V vector meets its scale: folded into P (one scale per row, no zero point), per
// group of whole vectors, or by the row reader (any other layout).
enum pv_scaling { pv_folded, pv_by_group, pv_by_reader };

// acc[r][i] += p[r * ldp + c] v_c[vector v0 + i] for the keys c in [k0, k1) (V rows val[c - k0],
// vector group gi[i]) and i < N.
template <class Arch, class E, int R, int N, pv_scaling S, int NV>
inline void pv_keys(const row_reader<Arch, E> *val, int64_t k0, int64_t k1, const float *p,
                    int64_t ldp, int64_t v0, const int64_t *gi, bool zeros,
                    xsimd::batch<float, Arch> (&acc)[R][NV]) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    for (int64_t c = k0; c < k1; ++c) {
        const row_reader<Arch, E> &vc = val[c - k0];
        fbatch x[N];
        float p_scale = 1.0f;
        if constexpr (S == pv_folded) {
            p_scale = vc.sc[0];
#pragma GCC unroll 4
            for (int i = 0; i < N; ++i) x[i] = raw_vector<Arch, E>(vc.p, (v0 + i) * W);
        } else if constexpr (S == pv_by_group) {
#pragma GCC unroll 4
            for (int i = 0; i < N; ++i) {
                const fbatch raw = raw_vector<Arch, E>(vc.p, (v0 + i) * W);
                x[i] = (zeros ? raw - fbatch(vc.ze[gi[i]]) : raw) * fbatch(vc.sc[gi[i]]);
            }
        } else {
#pragma GCC unroll 4
            for (int i = 0; i < N; ++i) x[i] = vc.vec((v0 + i) * W);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const fbatch pr(p[r * ldp + c] * p_scale);
#pragma GCC unroll 4
            for (int i = 0; i < N; ++i) acc[r][i] = xsimd::fma(pr, x[i], acc[r][i]);
        }
    }
}

// o[r] = o[r] rescale[r] + sum_{c in [lo, hi)} p[r * ldp + c] v_{j0 + c} for r < R (o rows
// ldo apart), in sub-blocks of `keys` whose V rows stay in L1 across dim_v; a few vectors of
// o stay in registers over a sub-block, the columns past the last whole vector one by one.
template <class Arch, class E, int R>
void pv_in_registers(const attention_tile &t, int64_t lo, int64_t hi, int64_t j0, const float *p,
                     int64_t ldp, float *o, int64_t ldo, const float *rescale, int64_t keys) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    constexpr int NV = attention_blocking<Arch>::nv;
    const int64_t dim_v = t.dim_v, vectors = dim_v / W;
    const int64_t group = t.v.scales.group;
    const bool by_group = group % W == 0;
    const bool zeros = E::has_zero && t.v.scales.zero;
    // one scale per row and no zero point: p (s v) = (p s) v, the scale folded into P
    const bool fold = by_group && group == dim_v && !zeros;
    for (int r = 0; r < R; ++r)
        for (int64_t d = 0; d < dim_v; ++d) o[r * ldo + d] *= rescale[r];
    row_reader<Arch, E> val[64];
    for (int64_t k0 = lo; k0 < hi; k0 += keys) {
        const int64_t k1 = k0 + keys < hi ? k0 + keys : hi;
        for (int64_t c = k0; c < k1; ++c) val[c - k0] = row_reader<Arch, E>(t.v, j0 + c);
        for (int64_t v0 = 0; v0 < vectors; v0 += NV) {
            const int nv = int(vectors - v0 < NV ? vectors - v0 : NV);
            fbatch acc[R][NV];
            for (int r = 0; r < R; ++r)
                for (int i = 0; i < NV; ++i)
                    acc[r][i] = i < nv ? fbatch::load_unaligned(o + r * ldo + (v0 + i) * W) : fbatch(0.0f);
            int64_t gi[NV];  // the group of each vector (by_group)
            for (int i = 0; i < NV; ++i) gi[i] = by_group ? (v0 + i) * W / group : 0;
            if (nv == NV && fold)
                pv_keys<Arch, E, R, NV, pv_folded>(val, k0, k1, p, ldp, v0, gi, zeros, acc);
            else if (nv == NV && by_group)
                pv_keys<Arch, E, R, NV, pv_by_group>(val, k0, k1, p, ldp, v0, gi, zeros, acc);
            else if (nv == NV)
                pv_keys<Arch, E, R, NV, pv_by_reader>(val, k0, k1, p, ldp, v0, gi, zeros, acc);
            else  // the last few vectors, one at a time
                for (int i = 0; i < nv; ++i) {
                    fbatch one[R][NV];
                    for (int r = 0; r < R; ++r) one[r][0] = acc[r][i];
                    pv_keys<Arch, E, R, 1, pv_by_reader>(val, k0, k1, p, ldp, v0 + i, gi, zeros, one);
                    for (int r = 0; r < R; ++r) acc[r][i] = one[r][0];
                }
            for (int r = 0; r < R; ++r)
                for (int i = 0; i < nv; ++i) acc[r][i].store_unaligned(o + r * ldo + (v0 + i) * W);
        }
        for (int64_t d = vectors * W; d < dim_v; ++d)
            for (int r = 0; r < R; ++r) {
                float acc = o[r * ldo + d];
                for (int64_t c = k0; c < k1; ++c) acc += p[r * ldp + c] * val[c - k0].one(d);
                o[r * ldo + d] = acc;
            }
    }
}

// The two passes for 1 .. attention_direct_rows rows sharing [lo, hi).
template <class Arch, class E>
void scores_in_registers(const attention_tile &t, int64_t rows, const float *qs, int64_t lo,
                         int64_t hi, int64_t j0, float *s, int64_t lds) {
    switch (rows) {
    case 1: return scores_in_registers<Arch, E, 1>(t, qs, lo, hi, j0, s, lds);
    case 2: return scores_in_registers<Arch, E, 2>(t, qs, lo, hi, j0, s, lds);
    case 3: return scores_in_registers<Arch, E, 3>(t, qs, lo, hi, j0, s, lds);
    default: return scores_in_registers<Arch, E, 4>(t, qs, lo, hi, j0, s, lds);
    }
}
template <class Arch, class E>
void pv_in_registers(const attention_tile &t, int64_t rows, int64_t lo, int64_t hi, int64_t j0,
                     const float *p, int64_t ldp, float *o, int64_t ldo, const float *rescale,
                     int64_t keys) {
    switch (rows) {
    case 1: return pv_in_registers<Arch, E, 1>(t, lo, hi, j0, p, ldp, o, ldo, rescale, keys);
    case 2: return pv_in_registers<Arch, E, 2>(t, lo, hi, j0, p, ldp, o, ldo, rescale, keys);
    case 3: return pv_in_registers<Arch, E, 3>(t, lo, hi, j0, p, ldp, o, ldo, rescale, keys);
    default: return pv_in_registers<Arch, E, 4>(t, lo, hi, j0, p, ldp, o, ldo, rescale, keys);
    }
}

}  // namespace attention_decode_detail
ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
