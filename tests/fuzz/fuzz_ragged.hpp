// The packed-sequence part of the API fuzzer (fuzz_ragged.cpp decodes the calls,
// fuzz_ragged_checks.cpp holds what it checks of their results and how it prints them).
#pragma once

#include <memory>
#include <string>

#include "fuzz_decode.hpp"

namespace fuzz::ragged_fuzz {

// One fuzzed call and what the checks need to know about it.
struct ragged {
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v;
    bool use_q_start, use_kv_start, paged, mla, typed_entry;
    std::vector<int32_t> q_start, kv_start, kv_len, block_table;
    std::vector<float> slopes, sinks;
    bool starts_ok = true, kv_len_ok = true, pages_ok = true, options_ok = true, out_null = false;
    view q, k, v, out, mask, weights, lse;
    int64_t q_batch_stride = 0, out_batch_stride = 0, kv_batch_stride = 0;  // the unused ones
    int64_t page_size = 0, num_pages = 0, table_stride = 0;
};

attn_layout layout_of(const view &t, int64_t batch_stride);
attn_sdpa_desc make_desc(const ragged &r);
attn_sdpa_desc with_pointers(attn_sdpa_desc d, const ragged &r, pool &p);
std::string describe(const ragged &r, const attn_sdpa_desc &d, bool backward);
// Forward: every out element finite; lse never NaN or +inf; sequences without keys give zero
// rows and lse -inf (with sinks: the sink). For accepted calls on clean inputs.
void check_forward(const ragged &r, const snapshot &ref, const snapshot &simd);
// Backward: every gradient element finite; dk and dv rows of keys no query sees are zeros.
void check_backward(const ragged &r, const view &dk, const view &dv, const view &dq, const view &dsinks,
                    const snapshot &ref, const snapshot &simd);

}  // namespace fuzz::ragged_fuzz
