// The key ranges that causal and kv_len masking leave visible, shared by the forward and
// backward attention drivers so both skip exactly the same keys.
#pragma once

#include <cstdint>
#include <limits>

#include "attn/attn.h"

namespace attn::ops {

// Larger than any i + offset can reach: no causal limit.
inline constexpr int64_t no_causal = std::numeric_limits<int64_t>::max() / 4;

// Keys j >= this are hidden for batch b (kv_len padding), clamped to [0, len_kv].
inline int64_t keys_in_batch(const attn_sdpa_desc &d, int64_t b) {
    if (!d.kv_len) return d.len_kv;
    const int64_t n = d.kv_len[b];
    return n < 0 ? 0 : (n > d.len_kv ? d.len_kv : n);
}

// Key j is visible to query i iff j <= i + causal_offset(d).
inline int64_t causal_offset(const attn_sdpa_desc &d) {
    switch (d.causal) {
    case ATTN_CAUSAL_TOP_LEFT: return 0;
    case ATTN_CAUSAL_BOTTOM_RIGHT: return d.len_kv - d.len_q;
    default: return no_causal;
    }
}

}  // namespace attn::ops
