// The yardstick and the oracle of the feature backward tests, in the style of
// test_precision_plain.hpp: attention with every score feature (the causal alignments, sliding
// windows, kv_len, softcap, additive mask, ALiBi, sinks, grouped-query heads) and its backward
// by the textbook formulas, written once as a template on the number type T. T = float is "a
// plain float32 computation of the same thing"; T = double is the oracle. Visibility comes from
// test_features_util.hpp's oracle_visible (written from the API's sentences, not the library's).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "test_features_util.hpp"

namespace attn_features_plain {

template <class T>
using vec = std::vector<T>;

template <class T>
struct grads {
    vec<T> out, dq, dk, dv, dsinks;
    // per head, sum over rows of |P_sink delta| |lse| 2^-24: how far dsinks moves when each
    // row's lse is an input rounded to f32 (P_sink = e^(sink - lse) then carries lse's rounding)
    vec<T> dsinks_lse_rounding;
};

// Roundings of a plain 16-bit backward (null: none): P before O = P V (the forward's, when V is
// bf16), P before dV = P^T dO, dS before dQ = dS K and before dK = dS^T Q, and the output O as
// stored before delta = dO . O.
template <class T>
struct roundings {
    T (*p_for_out)(T) = nullptr;
    T (*p_for_dv)(T) = nullptr;
    T (*ds_for_dq)(T) = nullptr;
    T (*ds_for_dk)(T) = nullptr;
    T (*out_stored)(T) = nullptr;
};

// Dense BHSD q [B,Hq,Lq,D], k, v [B,Hkv,Lkv,D], dout like q; d.mask dense [B,Hq,Lq,Lkv] when
// given; sinks one per query head (empty: none). Loss sum(out * dout). Order on a score:
// scale, softcap, + mask, - ALiBi (slope |i' - j|); then hidden keys drop out.
template <class T>
grads<T> plain_backward(const attn_sdpa_desc &d, const vec<T> &q, const vec<T> &k,
                        const vec<T> &v, const vec<T> &dout, const vec<T> &sinks,
                        const roundings<T> &round = {}) {
    const int64_t Hq = d.heads_q, Hkv = d.heads_kv, Lq = d.len_q, Lk = d.len_kv, D = d.dim_qk;
    const T scale = T(d.scale), cap = T(d.softcap);
    grads<T> r{vec<T>(q.size(), T(0)), vec<T>(q.size(), T(0)), vec<T>(k.size(), T(0)),
               vec<T>(v.size(), T(0)), vec<T>(size_t(Hq), T(0)), vec<T>(size_t(Hq), T(0))};
    const size_t keys = static_cast<size_t>(Lk);
    vec<T> s(keys), g(keys), dp(keys);
    vec<char> seen(keys);
    for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t h = 0; h < Hq; ++h) {
            const int64_t hk = h / (Hq / Hkv);
            const T *K = &k[size_t((b * Hkv + hk) * Lk * D)], *V = &v[size_t((b * Hkv + hk) * Lk * D)];
            T *dK = &r.dk[size_t((b * Hkv + hk) * Lk * D)], *dV = &r.dv[size_t((b * Hkv + hk) * Lk * D)];
            const T sink = sinks.empty() ? T(-INFINITY) : sinks[size_t(h)];
            for (int64_t i = 0; i < Lq; ++i) {
                const int64_t row = (b * Hq + h) * Lq + i, at = i + attn_test::oracle_offset(d, b);
                const T *Q = &q[size_t(row * D)], *G = &dout[size_t(row * D)];
                T m = sink;
                bool any = false;
                for (int64_t j = 0; j < Lk; ++j) {
                    seen[size_t(j)] = attn_test::oracle_visible(d, b, i, j);
                    if (!seen[size_t(j)]) continue;
                    any = true;
                    T x = T(0);
                    for (int64_t c = 0; c < D; ++c) x += Q[c] * K[j * D + c];
                    x *= scale;
                    g[size_t(j)] = T(1);
                    if (cap > T(0)) {
                        const T th = std::tanh(x / cap);
                        x = cap * th;
                        g[size_t(j)] = T(1) - th * th;
                    }
                    if (d.mask) x += T(d.mask[size_t(row * Lk + j)]);
                    if (d.alibi_slopes) x -= T(d.alibi_slopes[h]) * T(at > j ? at - j : j - at);
                    s[size_t(j)] = x;
                    m = std::max(m, x);
                }
                if (!any) continue;  // no visible key: out 0, no gradient
                T sum = sink == T(-INFINITY) ? T(0) : std::exp(sink - m);
                for (int64_t j = 0; j < Lk; ++j)
                    if (seen[size_t(j)]) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - m));
                T *O = &r.out[size_t(row * D)];
                for (int64_t j = 0; j < Lk; ++j) {
                    if (!seen[size_t(j)]) continue;
                    T p = s[size_t(j)] /= sum;
                    if (round.p_for_out) p = round.p_for_out(p);
                    for (int64_t c = 0; c < D; ++c) O[c] += p * V[j * D + c];
                }
                // D = dO . O (FlashAttention's delta, the API's: sum_j P_j dP_j in exact
                // arithmetic), from this computation's own output
                T big_d = T(0);
                for (int64_t c = 0; c < D; ++c)
                    big_d += G[c] * (round.out_stored ? round.out_stored(O[c]) : O[c]);
                for (int64_t j = 0; j < Lk; ++j) {
                    if (!seen[size_t(j)]) continue;
                    T dot = T(0);
                    const T p = round.p_for_dv ? round.p_for_dv(s[size_t(j)]) : s[size_t(j)];
                    for (int64_t c = 0; c < D; ++c) {
                        dV[j * D + c] += p * G[c];
                        dot += G[c] * V[j * D + c];
                    }
                    dp[size_t(j)] = dot;
                }
                if (sink != T(-INFINITY)) {
                    const T term = std::exp(sink - m) / sum * big_d;
                    r.dsinks[size_t(h)] -= term;
                    r.dsinks_lse_rounding[size_t(h)] +=
                        std::fabs(term) * std::fabs(m + std::log(sum)) * std::ldexp(T(1), -24);
                }
                for (int64_t j = 0; j < Lk; ++j) {
                    if (!seen[size_t(j)]) continue;
                    const T ds = s[size_t(j)] * (dp[size_t(j)] - big_d) * g[size_t(j)];
                    const T ds_q = scale * (round.ds_for_dq ? round.ds_for_dq(ds) : ds);
                    const T ds_k = scale * (round.ds_for_dk ? round.ds_for_dk(ds) : ds);
                    for (int64_t c = 0; c < D; ++c) {
                        r.dq[size_t(row * D + c)] += ds_q * K[j * D + c];
                        dK[j * D + c] += ds_k * Q[c];
                    }
                }
            }
        }
    return r;
}

}  // namespace attn_features_plain
