// One query row of scaled dot-product attention, shared by the reference forward and
// backward so both see exactly the same scores, masking and dropout. The score and the keys
// a row sees are those of src/core/scores.hpp; rows are found through the one addressing of
// sequence rows (src/core/seq_rows.hpp, over src/core/kv_rows.hpp), which also gives each
// sequence its counts: row i of sequence b sees keys j < K_b only.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "attn/attn.h"
#include "core/scores.hpp"
#include "core/kv_rows.hpp"
#include "core/dropout.hpp"
#include "core/seq_rows.hpp"

namespace attn::ref::sdpa_row {

inline constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// Grouped-query attention: query head h reads key/value head h / (heads_q / heads_kv).
inline int64_t kv_head(const attn_sdpa_desc &d, int64_t h) { return h / (d.heads_q / d.heads_kv); }

// Whether the window, the causal limit or kv_len hides key j from the row that sees `seen`.
inline bool key_hidden(const core::key_range &seen, int64_t j) {
    return j < seen.lo || j >= seen.hi;
}

// s[j] = the score of key j for query (b, h, i) (scale, softcap, + mask, - ALiBi) for
// j < K_b, -inf where the key is hidden; slope[j] (if given) = d s / d (scaled score).
// Returns max_j s[j] (-inf when every key is hidden; NaN when a visible score is NaN, so
// that the row becomes NaN rather than reading as fully masked).
inline float scores(const core::seq_rows &rows, const float *q, const float *k, int64_t b,
                    int64_t h, int64_t i, float *s, float *slope = nullptr) {
    const attn_sdpa_desc &d = rows.desc();
    const float *q_row = q + rows.q_at(b, h, i);
    const core::kv_rows k_rows = rows.k_rows(k, b, kv_head(d, h));
    const float *mask_row = d.mask ? d.mask + b * d.mask_strides.batch + h * d.mask_strides.head +
                                         i * d.mask_strides.seq
                                   : nullptr;
    const core::score_terms terms = core::score_terms_for(d, h);
    const core::key_visibility visibility = rows.visibility(b);
    const core::key_range seen = visibility.row(i);
    const int64_t at = i + visibility.offset;
    float m = neg_inf;
    for (int64_t j = 0; j < rows.keys(b); ++j) {
        if (slope) slope[j] = 0.0f;
        if (key_hidden(seen, j)) {
            s[j] = neg_inf;
            continue;
        }
        const float *k_row = k_rows.row_as<float>(j);
        float dot = 0.0f;
        for (int64_t c = 0; c < d.dim_qk; ++c) dot += q_row[c] * k_row[c];
        const float scaled = d.scale * dot;
        s[j] = core::finish_score(terms, scaled, mask_row ? mask_row[j] : 0.0f, at, j);
        if (slope) slope[j] = core::score_slope(terms, scaled);
        if (s[j] > m || std::isnan(s[j])) m = s[j];
    }
    return m;
}

// Turns scores into the row's softmax in place, s[j] <- exp(s[j] - m') / sum, the sum
// including the sink's exp(sink - m') (a logit with no value; -inf: none), m' = max(m, sink),
// given m = max_j s[j] > -inf, and returns the lse, m' + log(sum). Dividing by the sum
// rather than subtracting the rounded lse keeps the weights accurate when scores are large.
inline float softmax_in_place(float *s, int64_t n, float m, float sink = neg_inf) {
    const float top = sink > m ? sink : m;
    float sum = sink == neg_inf ? 0.0f : std::exp(sink - top);
    for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - top);
        sum += s[j];
    }
    for (int64_t j = 0; j < n; ++j) s[j] /= sum;
    return top + std::log(sum);
}

// z[j] = the factor dropout applies to weight j < n of row (b,h,i): 0 if dropped, else
// 1/(1-p). All ones when dropout is off.
inline void dropout_factors(const attn_sdpa_desc &d, int64_t b, int64_t h, int64_t i, int64_t n,
                            float *z) {
    if (d.dropout_p <= 0.0f) {
        for (int64_t j = 0; j < n; ++j) z[j] = 1.0f;
        return;
    }
    const uint32_t key = dropout::row_key(d.dropout_seed, b, h, i);
    const uint32_t thresh = dropout::threshold(d.dropout_p);
    const float keep = dropout::keep_scale(d.dropout_p);
    for (int64_t j = 0; j < n; ++j) z[j] = dropout::dropped(key, j, thresh) ? 0.0f : keep;
}

}  // namespace attn::ref::sdpa_row
