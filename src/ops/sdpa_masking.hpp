// The keys a query row sees and the terms of its scores, from the desc: the one place where
// causal, the sliding window, kv_len, softcap and ALiBi of an attn_sdpa_desc become the
// score definition of src/kernels/attention_scores.hpp. Shared by the forward and backward
// drivers and by the reference, so all of them hide and skip exactly the same keys.
#pragma once

#include <cstdint>
#include <limits>

#include "attn/attn.h"
#include "kernels/attention_scores.hpp"

namespace attn::ops {

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
    default: return d.len_kv - d.len_q;
    }
}

// Row i of batch b sees keys visibility_for(d, b).row(i); causal is the window (-1, 0).
inline kernels::key_visibility visibility_for(const attn_sdpa_desc &d, int64_t b) {
    kernels::key_visibility v;
    v.offset = query_offset(d, b);
    v.left = d.window_left;
    v.right = is_causal(d) ? 0 : d.window_right;
    v.keys = keys_in_batch(d, b);
    return v;
}

// The score terms of query head h.
inline kernels::score_terms score_terms_for(const attn_sdpa_desc &d, int64_t h) {
    kernels::score_terms t;
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

}  // namespace attn::ops
