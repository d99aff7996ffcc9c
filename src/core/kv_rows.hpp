// Where a key lives: the one addressing function of K and V rows (key j of one batch and kv
// head -> its row), used by the K packing, the V padding, the decode kernel and the
// reference; and the rows of (batch b, kv head hk) of a desc's K and V, contiguous or paged
// through the block table. Contiguous K/V (pages == nullptr) is the case of one page holding every key;
// paged K/V is vLLM's and FlashAttention's cache: key j in page block_table[j / page_size],
// at row j % page_size. Plain C++, no xsimd.
#pragma once

#include <cstdint>

#include "attn/attn.h"
#include "core/formats.hpp"

namespace attn::core {

struct kv_rows {
    const void *base = nullptr;    // row 0 of this head in page 0 (or of the contiguous rows)
    attn_dtype type = ATTN_DTYPE_F32;
    int64_t ld = 0;                // elements between consecutive rows of a page
    const int32_t *pages = nullptr;  // this batch's row of the block table; null: one page
    int64_t page_size = 0;
    int64_t page_stride = 0;       // elements between pages (the layout's batch stride)
    // A quantized format's scales and zero points per row or group (core/formats.hpp); empty
    // for f32, bf16 and f16, the only formats today, so no reader looks at it yet.
    format_scales scales;

    // Key j's row (dim elements of `type`).
    const void *row(int64_t j) const {
        const int64_t at = pages ? pages[j / page_size] * page_stride + (j % page_size) * ld
                                 : j * ld;
        return static_cast<const char *>(base) + at * element_bytes(type);
    }
    template <class S>
    const S *row_as(int64_t j) const {
        return static_cast<const S *>(row(j));
    }
    // out[c] = row_as<S>(first + c) for c < count: the same addresses, walking the pages
    // instead of dividing for every key (decoding lists a block's rows this way).
    template <class S>
    void rows_as(int64_t first, int64_t count, const S **out) const {
        if (!pages || count <= 0) {
            for (int64_t c = 0; c < count; ++c) out[c] = row_as<S>(first + c);
            return;
        }
        int64_t page = first / page_size, at = first % page_size;
        const S *page_row0 = row_as<S>(first - at);
        for (int64_t c = 0; c < count; ++c) {
            out[c] = page_row0 + at * ld;
            if (++at == page_size && c + 1 < count) {
                at = 0;
                page_row0 = row_as<S>(++page * page_size);
            }
        }
    }
};

// The rows of one tensor of layout l (K or V) for (b, hk).
inline kv_rows kv_rows_for(const attn_sdpa_desc &d, const void *x, const attn_layout &l,
                           int64_t b, int64_t hk) {
    kv_rows r;
    r.type = d.kv_type;
    r.ld = l.seq;
    const int64_t bytes = element_bytes(d.kv_type);
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

inline kv_rows k_rows_for(const attn_sdpa_desc &d, const void *k, int64_t b, int64_t hk) {
    return kv_rows_for(d, k, d.k, b, hk);
}
inline kv_rows v_rows_for(const attn_sdpa_desc &d, const void *v, int64_t b, int64_t hk) {
    return kv_rows_for(d, v, d.v, b, hk);
}

}  // namespace attn::core
