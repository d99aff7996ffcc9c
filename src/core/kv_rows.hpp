// Where a key lives: the one addressing function of K and V rows (key j of one batch and kv
// head -> its row), used by the K packing, the V padding, the decode kernel and the
// reference, with the scales of a quantized cache (found the same way: by page and row in the
// page when paged); and the rows of (batch b, kv head hk) of a desc's K and V, contiguous or paged
// through the block table. Contiguous K/V (pages == nullptr) is the case of one page holding every key;
// paged K/V is vLLM's and FlashAttention's cache: key j in page block_table[j / page_size],
// at row j % page_size. Plain C++, no xsimd.
#pragma once

#include <cstdint>

#include "attn/attn.h"
#include "core/formats.hpp"

namespace attn::core {

// The scale of an FP8 cache given no scales: 1 for every element.
inline const float *unit_scale() {
    static const float one = 1.0f;
    return &one;
}

struct kv_rows {
    const void *base = nullptr;    // row 0 of this head in page 0 (or of the contiguous rows)
    attn_dtype type = ATTN_DTYPE_F32;
    int64_t ld = 0;                // elements between consecutive rows of a page
    const int32_t *pages = nullptr;  // this batch's row of the block table; null: one page
    int64_t page_size = 0;
    int64_t page_stride = 0;       // elements between pages (the layout's batch stride)
    format_scales scales;          // a quantized type's scales and zero points (else empty)

    // Key j's row (dim elements of `type`).
    const void *row(int64_t j) const {
        const int64_t at = pages ? pages[j / page_size] * page_stride + (j % page_size) * ld
                                 : j * ld;
        return static_cast<const char *>(base) + element_offset_bytes(type, at);
    }
    // Key j's scales: element c of its row has scale scale_row(j)[c / scales.group] and zero
    // point zero_row(j)[c / scales.group] (zero_row null: 0). Quantized types only.
    int64_t scales_at(int64_t j) const {
        return pages ? pages[j / page_size] * scales.page_stride + (j % page_size) * scales.row_stride
                     : j * scales.row_stride;
    }
    const float *scale_row(int64_t j) const { return scales.scale + scales_at(j); }
    const float *zero_row(int64_t j) const {
        return scales.zero ? scales.zero + scales_at(j) : nullptr;
    }
    // Whether every key has the same scales (per channel, per head, per tensor): their
    // factors can then be applied once instead of per key.
    bool scales_shared() const {
        return scales.row_stride == 0 && (!pages || scales.page_stride == 0);
    }
    // The same rows without their scales (a quantized cache without zero points): values() and
    // value() give the codes' values, for kernels that apply each row's scale outside the
    // products (scale_row(j)[0] of this kv_rows, one scale a row).
    kv_rows codes() const {
        kv_rows c = *this;
        c.scales = format_scales{};
        c.scales.scale = unit_scale();
        c.scales.group = int64_t(1) << 40;  // one entry for every element, a multiple of any vector
        return c;
    }
    // Element c of key j's row as f32: widened (f32, bf16, f16) or dequantized.
    float value(int64_t j, int64_t c) const {
        return with_kv_format(type, [&](auto format) -> float {
            using E = decltype(format);
            if constexpr (E::quantized)
                return dequantized_one<E>(static_cast<const uint8_t *>(row(j)), c, scale_row(j),
                                          zero_row(j), scales.group);
            else
                return E::widen_one(static_cast<const typename E::storage *>(row(j)) + c);
        });
    }
    // out[c] = value(j, c0 + c) for c < n, the format chosen and the row found once.
    void values(int64_t j, int64_t c0, int64_t n, float *out) const {
        with_kv_format(type, [&](auto format) {
            using E = decltype(format);
            if constexpr (E::quantized) {
                const auto *r = static_cast<const uint8_t *>(row(j));
                const float *sc = scale_row(j), *ze = zero_row(j);
                for (int64_t c = 0; c < n; ++c)
                    out[c] = dequantized_one<E>(r, c0 + c, sc, ze, scales.group);
            } else {
                const auto *r = static_cast<const typename E::storage *>(row(j)) + c0;
                for (int64_t c = 0; c < n; ++c) out[c] = E::widen_one(r + c);
            }
        });
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

// The scales of one tensor (K or V) of a quantized cache for (b, hk), dim elements a row:
// element c of row j at [b * s.batch + hk * s.head + j * s.seq + c / group] (b the page when
// paged). An FP8 cache without scales has the one scale 1.
inline format_scales format_scales_for(const attn_sdpa_desc &d, const float *scale,
                                       const float *zero, const attn_layout &s, int64_t group,
                                       int64_t dim, int64_t b, int64_t hk) {
    format_scales f;
    f.group = group > 0 ? group : dim;
    if (!scale) {
        f.scale = unit_scale();
        f.group = dim > 0 ? dim : 1;
        return f;
    }
    const int64_t at = (d.block_table ? 0 : b * s.batch) + hk * s.head;
    f.scale = scale + at;
    f.zero = zero ? zero + at : nullptr;
    f.row_stride = s.seq;
    f.page_stride = d.block_table ? s.batch : 0;
    return f;
}

// The rows of one tensor of layout l (K or V) for (b, hk).
inline kv_rows kv_rows_for(const attn_sdpa_desc &d, const void *x, const attn_layout &l,
                           int64_t b, int64_t hk) {
    kv_rows r;
    r.type = d.kv_type;
    r.ld = l.seq;
    if (d.block_table) {  // page p of the pool at x + p * l.batch
        r.base = static_cast<const char *>(x) + element_offset_bytes(d.kv_type, hk * l.head);
        r.pages = d.block_table + b * d.block_table_stride;
        r.page_size = d.page_size;
        r.page_stride = l.batch;
    } else {
        r.base = static_cast<const char *>(x) +
                 element_offset_bytes(d.kv_type, b * l.batch + hk * l.head);
    }
    return r;
}

inline kv_rows k_rows_for(const attn_sdpa_desc &d, const void *k, int64_t b, int64_t hk) {
    kv_rows r = kv_rows_for(d, k, d.k, b, hk);
    if (is_quantized(d.kv_type))
        r.scales = format_scales_for(d, d.k_scale, d.k_zero, d.k_scale_strides, d.k_group,
                                     d.dim_qk, b, hk);
    return r;
}
inline kv_rows v_rows_for(const attn_sdpa_desc &d, const void *v, int64_t b, int64_t hk) {
    kv_rows r = kv_rows_for(d, v, d.v, b, hk);
    if (is_quantized(d.kv_type))
        r.scales = format_scales_for(d, d.v_scale, d.v_zero, d.v_scale_strides, d.v_group,
                                     d.dim_v, b, hk);
    return r;
}

}  // namespace attn::core
