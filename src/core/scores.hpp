// The score of a (query, key) pair and the keys a query row sees, defined once for every
// path: the reference (scalar, src/ref), the SIMD tile loops and the decode kernel (vector
// forms in kernels/attention_score_row.hpp, which follow this file line for line), and both
// backwards; and the one place where causal, the sliding window, kv_len, softcap, ALiBi and
// the sinks of an attn_sdpa_desc become that definition. Plain C++, no SIMD, no threads.
//
// With i' the query's position on the key axis (see key_visibility::offset):
//   s = scale * q.k                        the scaled score
//   s = softcap * tanh(s / softcap)        when softcap > 0
//   s = s + mask[b, h, i, j]
//   s = s - slope[h] * |i' - j|            ALiBi; the distance in integers, converted once
// and then key j is hidden (never read) unless lo(i) <= j < hi(i):
//   lo(i) = max(0, i' - window_left)                       (window_left >= 0)
//   hi(i) = min(keys, i' + min(window_right, causal) + 1)  (keys = kv_len[b] or len_kv)
// causal being the window (-1, 0). The gradient of s with respect to the scaled score is
// 1 - (tanh(s_scaled / softcap))^2 with softcap, 1 without (mask and ALiBi are constants).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "attn/attn.h"

namespace attn::core {

// The keys [lo, hi) a query row sees; empty when hi <= lo.
struct key_range {
    int64_t lo, hi;
};

// What hides keys from the rows of one (batch, head).
struct key_visibility {
    int64_t offset = 0;  // i' - i: 0 (top left), kv_len[b] - len_q or len_kv - len_q
    int64_t left = -1;   // keys j >= i' - left only; -1 = unbounded
    int64_t right = -1;  // keys j <= i' + right only; -1 = unbounded (causal: 0)
    int64_t keys = 0;    // keys j >= keys do not exist (kv_len padding)

    key_range row(int64_t i) const {
        const int64_t at = i + offset;
        int64_t lo = 0, hi = keys;
        if (left >= 0 && at > left) lo = at - left;  // compared first: no overflow for huge left
        if (right >= 0 && right < hi - at) hi = at + right + 1;
        return {lo, hi};
    }
    // Keys [key_begin, key_end) of row i's range, as a count from key_begin's side.
    key_range row_within(int64_t i, int64_t key_begin, int64_t key_end) const {
        key_range r = row(i);
        if (r.lo < key_begin) r.lo = key_begin;
        if (r.hi > key_end) r.hi = key_end;
        if (r.hi < r.lo) r.hi = r.lo;
        return r;
    }
};

// The terms of a score beyond the dot product, for one (batch, query head).
struct score_terms {
    float scale = 1.0f;
    float softcap = 0.0f;      // 0 = off
    bool alibi = false;
    float alibi_slope = 0.0f;
};

// |i' - j| as the float ALiBi multiplies: computed in integers, converted once (exact up to
// 2^24).
inline float alibi_distance(int64_t at, int64_t j) {
    const int64_t d = at >= j ? at - j : j - at;
    return static_cast<float>(d);
}

// The score of key j for the query at key position `at`, from its scaled score and its mask
// entry (0 without a mask), in the order above. std::tanh here; the kernels' vector tanh
// (vec_math.hpp) in the vector form.
inline float finish_score(const score_terms &t, float scaled, float mask, int64_t at, int64_t j) {
    float s = scaled;
    if (t.softcap > 0.0f) s = t.softcap * std::tanh(s / t.softcap);
    s += mask;
    if (t.alibi) s -= t.alibi_slope * alibi_distance(at, j);
    return s;
}

// d s / d (scaled score) given the scaled score: the backward's factor on dS.
inline float score_slope(const score_terms &t, float scaled) {
    if (!(t.softcap > 0.0f)) return 1.0f;
    const float th = std::tanh(scaled / t.softcap);
    return 1.0f - th * th;
}

// Larger than any i + offset can reach: no causal limit.
inline constexpr int64_t no_causal = std::numeric_limits<int64_t>::max() / 4;

// Keys j >= this are hidden for batch b (kv_len padding), clamped to [0, len_kv].
inline int64_t keys_in_batch(const attn_sdpa_desc &d, int64_t b) {
    if (!d.kv_len) return d.len_kv;
    const int64_t n = d.kv_len[b];
    return n < 0 ? 0 : (n > d.len_kv ? d.len_kv : n);
}

inline bool is_causal(const attn_sdpa_desc &d) {
    return d.causal == ATTN_CAUSAL_TOP_LEFT || d.causal == ATTN_CAUSAL_BOTTOM_RIGHT ||
           d.causal == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
}

// i' - i for batch b: where query i sits on the key axis.
inline int64_t query_offset(const attn_sdpa_desc &d, int64_t b) {
    switch (d.causal) {
    case ATTN_CAUSAL_TOP_LEFT: return 0;
    case ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN: return keys_in_batch(d, b) - d.len_q;
    case ATTN_CAUSAL_NONE:
    case ATTN_CAUSAL_BOTTOM_RIGHT: return d.len_kv - d.len_q;
    }
    return d.len_kv - d.len_q;  // not reached: the API rejects other values
}

// Row i of batch b sees keys visibility_for(d, b).row(i); causal is the window (-1, 0).
inline key_visibility visibility_for(const attn_sdpa_desc &d, int64_t b) {
    key_visibility v;
    v.offset = query_offset(d, b);
    v.left = d.window_left;
    v.right = is_causal(d) ? 0 : d.window_right;
    v.keys = keys_in_batch(d, b);
    return v;
}

// The score terms of query head h.
inline score_terms score_terms_for(const attn_sdpa_desc &d, int64_t h) {
    score_terms t;
    t.scale = d.scale;
    t.softcap = d.softcap;
    t.alibi = d.alibi_slopes != nullptr;
    t.alibi_slope = d.alibi_slopes ? d.alibi_slopes[h] : 0.0f;
    return t;
}

// Head h's sink logit (-inf: none).
inline float sink_for(const attn_sdpa_desc &d, int64_t h) {
    return d.sinks ? d.sinks[h] : -std::numeric_limits<float>::infinity();
}

}  // namespace attn::core
