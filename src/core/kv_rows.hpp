// Where a key lives: the one addressing function of K and V rows (key j of one batch and kv
// head -> its row), used by the K packing, the V padding, the decode kernel and the
// reference. Contiguous K/V (pages == nullptr) is the case of one page holding every key;
// paged K/V is vLLM's and FlashAttention's cache: key j in page block_table[j / page_size],
// at row j % page_size. Plain C++, no xsimd.
#pragma once

#include <cstdint>

#include "attn/attn.h"

namespace attn::kernels {

struct kv_rows {
    const void *base = nullptr;    // row 0 of this head in page 0 (or of the contiguous rows)
    attn_dtype type = ATTN_DTYPE_F32;
    int64_t ld = 0;                // elements between consecutive rows of a page
    const int32_t *pages = nullptr;  // this batch's row of the block table; null: one page
    int64_t page_size = 0;
    int64_t page_stride = 0;       // elements between pages (the layout's batch stride)

    // Key j's row (dim elements of `type`).
    const void *row(int64_t j) const {
        const int64_t at = pages ? pages[j / page_size] * page_stride + (j % page_size) * ld
                                 : j * ld;
        return static_cast<const char *>(base) + at * (type == ATTN_DTYPE_F32 ? 4 : 2);
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

}  // namespace attn::kernels
