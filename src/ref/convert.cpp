// Reference conversion: element by element with the scalar rules of core/convert.hpp.
#include "core/convert.hpp"
#include "core/formats.hpp"

#include <cstring>

#include "ref/ref.hpp"

namespace attn::ref {

float load_element(const void *base, attn_dtype t, int64_t i) {
    switch (t) {
    case ATTN_DTYPE_BF16: return convert::bf16_to_f32(static_cast<const uint16_t *>(base)[i]);
    case ATTN_DTYPE_F16: return convert::f16_to_f32(static_cast<const uint16_t *>(base)[i]);
    default: return static_cast<const float *>(base)[i];
    }
}

void store_element(void *base, attn_dtype t, int64_t i, float x) {
    switch (t) {
    case ATTN_DTYPE_BF16: static_cast<uint16_t *>(base)[i] = convert::f32_to_bf16(x); break;
    case ATTN_DTYPE_F16: static_cast<uint16_t *>(base)[i] = convert::f32_to_f16(x); break;
    default: static_cast<float *>(base)[i] = x; break;
    }
}

void convert(int64_t n, const void *src, attn_dtype src_type, void *dst, attn_dtype dst_type) {
    if (src_type == dst_type) {  // a copy (in place: nothing to do)
        if (src != dst) std::memmove(dst, src, size_t(n * core::element_bytes(src_type)));
        return;
    }
    // In place only with equal sizes (bf16 <-> f16): each element is read before written.
    for (int64_t i = 0; i < n; ++i) store_element(dst, dst_type, i, load_element(src, src_type, i));
}

}  // namespace attn::ref
