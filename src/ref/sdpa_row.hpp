// One query row of scaled dot-product attention, shared by the reference forward and
// backward so both see exactly the same scores, masking and dropout.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "attn/attn.h"
#include "ref/dropout.hpp"

namespace attn::ref::sdpa_row {

inline constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// Grouped-query attention: query head h reads key/value head h / (heads_q / heads_kv).
inline int64_t kv_head(const attn_sdpa_desc &d, int64_t h) { return h / (d.heads_q / d.heads_kv); }

// Whether causal or kv_len masking hides key j from query i of batch b.
inline bool key_hidden(const attn_sdpa_desc &d, int64_t b, int64_t i, int64_t j) {
    if (d.causal == ATTN_CAUSAL_TOP_LEFT && j > i) return true;
    if (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + (d.len_kv - d.len_q)) return true;
    if (d.kv_len && j >= d.kv_len[b]) return true;
    return false;
}

// s[j] = scale * q[b,h,i,:] . k[b,h',j,:] + mask[b,h,i,j] for j < len_kv, -inf where the
// key is hidden. Returns max_j s[j] (-inf when every key is hidden; NaN when a visible score
// is NaN, so that the row becomes NaN rather than reading as fully masked).
inline float scores(const attn_sdpa_desc &d, const float *q, const float *k, int64_t b, int64_t h,
                    int64_t i, float *s) {
    const float *q_row = q + b * d.q.batch + h * d.q.head + i * d.q.seq;
    const float *k_head = k + b * d.k.batch + kv_head(d, h) * d.k.head;
    const float *mask_row = d.mask ? d.mask + b * d.mask_strides.batch + h * d.mask_strides.head +
                                         i * d.mask_strides.seq
                                   : nullptr;
    float m = neg_inf;
    for (int64_t j = 0; j < d.len_kv; ++j) {
        if (key_hidden(d, b, i, j)) {
            s[j] = neg_inf;
            continue;
        }
        const float *k_row = k_head + j * d.k.seq;
        float dot = 0.0f;
        for (int64_t c = 0; c < d.dim_qk; ++c) dot += q_row[c] * k_row[c];
        s[j] = d.scale * dot;
        if (mask_row) s[j] += mask_row[j];
        if (s[j] > m || std::isnan(s[j])) m = s[j];
    }
    return m;
}

// Turns scores into the row's softmax in place, s[j] <- exp(s[j] - m) / sum_j' exp(s[j'] - m),
// given m = max_j s[j] > -inf, and returns the lse, m + log(sum). Dividing by the sum rather
// than subtracting the rounded lse keeps the weights accurate when the scores are large.
inline float softmax_in_place(float *s, int64_t n, float m) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - m);
        sum += s[j];
    }
    for (int64_t j = 0; j < n; ++j) s[j] /= sum;
    return m + std::log(sum);
}

// z[j] = the factor dropout applies to weight j of row (b,h,i): 0 if dropped, else 1/(1-p).
// All ones when dropout is off.
inline void dropout_factors(const attn_sdpa_desc &d, int64_t b, int64_t h, int64_t i, float *z) {
    if (d.dropout_p <= 0.0f) {
        for (int64_t j = 0; j < d.len_kv; ++j) z[j] = 1.0f;
        return;
    }
    const uint32_t key = dropout::row_key(d.dropout_seed, b, h, i);
    const uint32_t thresh = dropout::threshold(d.dropout_p);
    const float keep = dropout::keep_scale(d.dropout_p);
    for (int64_t j = 0; j < d.len_kv; ++j) z[j] = dropout::dropped(key, j, thresh) ? 0.0f : keep;
}

}  // namespace attn::ref::sdpa_row
