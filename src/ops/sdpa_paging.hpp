// Where the keys of a desc live: the K and V rows of (batch b, kv head hk) as the one
// addressing function (kernels::kv_rows) sees them, contiguous or paged through the block
// table. The drivers and the reference address K and V through these only.
#pragma once

#include <cstdint>

#include "attn/attn.h"
#include "kernels/kv_rows.hpp"

namespace attn::ops {

// The rows of one tensor of layout l (K or V) for (b, hk).
inline kernels::kv_rows kv_rows_for(const attn_sdpa_desc &d, const void *x, const attn_layout &l,
                                    int64_t b, int64_t hk) {
    kernels::kv_rows r;
    r.type = d.kv_type;
    r.ld = l.seq;
    const int64_t bytes = d.kv_type == ATTN_DTYPE_F32 ? 4 : 2;
    if (d.block_table) {  // page p of the pool at x + p * l.batch
        r.base = static_cast<const char *>(x) + hk * l.head * bytes;
        r.pages = d.block_table + b * d.block_table_stride;
        r.page_size = d.page_size;
        r.page_stride = l.batch;
    } else {
        r.base = static_cast<const char *>(x) + (b * l.batch + hk * l.head) * bytes;
    }
    return r;
}

inline kernels::kv_rows k_rows_for(const attn_sdpa_desc &d, const void *k, int64_t b, int64_t hk) {
    return kv_rows_for(d, k, d.k, b, hk);
}
inline kernels::kv_rows v_rows_for(const attn_sdpa_desc &d, const void *v, int64_t b, int64_t hk) {
    return kv_rows_for(d, v, d.v, b, hk);
}

}  // namespace attn::ops
