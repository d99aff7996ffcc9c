// attn-fingerprint: one attention problem of the corpus, its descriptor and its inputs.
#pragma once

#include <string>
#include <vector>

#include "fingerprint.hpp"

namespace attn_fingerprint {

struct sdpa_case {
    std::string name;
    int64_t batch = 1, heads_q = 2, heads_kv = 2, len_q = 16, len_kv = 16, dim_qk = 32, dim_v = 32;
    float scale = 0.0f;  // 0: the descriptor's default
    attn_causal causal = ATTN_CAUSAL_NONE;
    bool mask = false, kv_len = false, dropout = false, weights = false, lse = false;
    bool bshd = false, alibi = false, sinks = false;
    int64_t window_left = -1, window_right = -1, page_size = 0;
    float softcap = 0.0f;
};

sdpa_case shape(const char *name, int64_t batch, int64_t heads_q, int64_t heads_kv,
                int64_t len_q, int64_t len_kv, int64_t dim_qk, int64_t dim_v);

// The corpus's cases with f32 inputs (attn_sdpa_f32 and the backward).
std::vector<sdpa_case> sdpa_cases();

// A case's descriptor and every array it points to, inputs drawn from the case's name.
struct problem {
    attn_sdpa_desc d;
    std::vector<float> mask, slopes, sinks, dsinks, weights, lse;
    std::vector<int32_t> kv_len, block_table;
    std::vector<unsigned char> q, k, v, out;
    int64_t q_elems = 0, k_elems = 0, v_elems = 0, out_elems = 0;

    problem(const sdpa_case &c, attn_dtype q_type, attn_dtype kv_type, attn_dtype out_type);
    // Output buffers set to a fixed pattern before a call.
    void clear_outputs();
    void record_outputs(record &rec) const;
};

}  // namespace attn_fingerprint
