// A float64 oracle for the fields of "masks and layouts of today's models" (sliding windows,
// the three causal alignments, softcap, ALiBi, sinks), written independently of the library
// from attn.h's sentences, plus the helpers the feature tests share.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ref/convert.hpp"
#include "test_util.hpp"

namespace attn_test {

// i' - i for batch b, as attn.h defines it.
inline int64_t oracle_offset(const attn_sdpa_desc &d, int64_t b) {
    if (d.causal == ATTN_CAUSAL_TOP_LEFT) return 0;
    if (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN) return d.kv_len[b] - d.len_q;
    return d.len_kv - d.len_q;
}

// Whether key j is visible to query i of batch b.
inline bool oracle_visible(const attn_sdpa_desc &d, int64_t b, int64_t i, int64_t j) {
    const int64_t at = i + oracle_offset(d, b);
    if (d.kv_len && j >= d.kv_len[b]) return false;
    if (d.causal != ATTN_CAUSAL_NONE && j > at) return false;
    if (d.window_left >= 0 && j < at - d.window_left) return false;
    if (d.window_right >= 0 && j > at + d.window_right) return false;
    return true;
}

// Attention in the number type T over dense BHSD q [B,Hq,Lq,Dqk], k [B,Hkv,Lkv,Dqk],
// v [B,Hkv,Lkv,Dv] (the logical K/V, whatever pages d describes); out [B,Hq,Lq,Dv]. sinks: one
// per query head (empty: d.sinks, or none). Fills lse [B,Hq,Lq] and weights [B,Hq,Lq,Lkv]
// when given. round_p: each weight rounded to bf16 before P V (what the 16-bit rule allows
// when V is bf16). T = double: the oracle (sdpa_features_double); T = float with the rule's
// roundings: the plain computation, the yardstick.
template <class T>
std::vector<T> sdpa_features_in(const attn_sdpa_desc &d, const std::vector<T> &q,
                                const std::vector<T> &k, const std::vector<T> &v,
                                std::vector<T> *lse = nullptr, std::vector<T> *weights = nullptr,
                                const std::vector<T> *sinks = nullptr, bool round_p = false) {
    const int64_t B = d.batch, Hq = d.heads_q, Hkv = d.heads_kv, Lq = d.len_q, Lk = d.len_kv;
    const int64_t Dk = d.dim_qk, Dv = d.dim_v, group = Hq / Hkv;
    std::vector<T> out(size_t(B * Hq * Lq * Dv), T(0));
    if (lse) lse->assign(size_t(B * Hq * Lq), T(-INFINITY));
    if (weights) weights->assign(size_t(B * Hq * Lq * Lk), T(0));
    std::vector<T> s(static_cast<size_t>(Lk));
    std::vector<bool> seen(static_cast<size_t>(Lk));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Lq; ++i) {
                const int64_t hk = h / group, row = (b * Hq + h) * Lq + i;
                const int64_t at = i + oracle_offset(d, b);
                T sink = T(-INFINITY);
                if (sinks && !sinks->empty()) sink = (*sinks)[size_t(h)];
                else if (d.sinks) sink = T(d.sinks[h]);
                T m = sink;
                bool any = false;
                for (int64_t j = 0; j < Lk; ++j) {
                    seen[j] = oracle_visible(d, b, i, j);
                    if (!seen[j]) continue;
                    T dot = T(0);
                    for (int64_t c = 0; c < Dk; ++c)
                        dot += q[size_t(row * Dk + c)] * k[size_t(((b * Hkv + hk) * Lk + j) * Dk + c)];
                    T x = T(d.scale) * dot;
                    if (d.softcap > 0.0f) x = T(d.softcap) * T(std::tanh(x / T(d.softcap)));
                    if (d.mask)
                        x += T(d.mask[b * d.mask_strides.batch + h * d.mask_strides.head +
                                      i * d.mask_strides.seq + j]);
                    if (d.alibi_slopes) x -= T(d.alibi_slopes[h]) * T(std::fabs(double(at - j)));
                    s[j] = x;
                    seen[j] = x != T(-INFINITY);
                    if (seen[j]) any = true, m = std::max(m, x);
                }
                if (!any) {  // no visible key: zeros, lse = the sink
                    if (lse) (*lse)[size_t(row)] = sink;
                    continue;
                }
                T sum = sink == T(-INFINITY) ? T(0) : T(std::exp(sink - m));
                for (int64_t j = 0; j < Lk; ++j) sum += seen[j] ? T(std::exp(s[j] - m)) : T(0);
                const uint32_t key = attn::dropout::row_key(d.dropout_seed, b, h, i);
                const uint32_t thresh = attn::dropout::threshold(d.dropout_p);
                for (int64_t j = 0; j < Lk; ++j) {
                    if (!seen[j]) continue;
                    T w = T(std::exp(s[j] - m)) / sum;
                    if (weights) (*weights)[size_t(row * Lk + j)] = w;
                    if (d.dropout_p > 0.0f)
                        w = attn::dropout::dropped(key, j, thresh) ? T(0) : w / (T(1) - T(d.dropout_p));
                    if (round_p) w = T(attn::convert::bf16_to_f32(attn::convert::f32_to_bf16(float(w))));
                    for (int64_t c = 0; c < Dv; ++c)
                        out[size_t(row * Dv + c)] += w * v[size_t(((b * Hkv + hk) * Lk + j) * Dv + c)];
                }
                if (lse) (*lse)[size_t(row)] = m + T(std::log(sum));
            }
    return out;
}

inline std::vector<double> sdpa_features_double(const attn_sdpa_desc &d,
                                                const std::vector<double> &q,
                                                const std::vector<double> &k,
                                                const std::vector<double> &v,
                                                std::vector<double> *lse = nullptr,
                                                std::vector<double> *weights = nullptr,
                                                const std::vector<double> *sinks = nullptr) {
    return sdpa_features_in<double>(d, q, k, v, lse, weights, sinks);
}

// The standard ALiBi slopes of H heads: 2^(-8 (h + 1) / H).
inline std::vector<float> alibi_geometric(int64_t heads) {
    std::vector<float> s(static_cast<size_t>(heads));
    for (int64_t h = 0; h < heads; ++h) s[size_t(h)] = float(std::exp2(-8.0 * double(h + 1) / double(heads)));
    return s;
}

// max |got - want| / (1 + |want|), where -inf must match exactly.
inline double lse_error(const std::vector<float> &got, const std::vector<double> &want) {
    return max_rel_error(got, want);
}

}  // namespace attn_test
