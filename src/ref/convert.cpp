// Reference conversion: element by element with the scalar rules of core/convert.hpp.
#include "core/convert.hpp"
#include "core/formats.hpp"

#include <cstring>

#include "ref/ref.hpp"

namespace attn::ref {

float load_element(const void *base, attn_dtype t, int64_t i) {
    return core::with_format(t, [&](auto format) {
        using E = decltype(format);
        return E::widen_one(static_cast<const typename E::storage *>(base) + i);
    });
}

void store_element(void *base, attn_dtype t, int64_t i, float x) {
    core::with_format(t, [&](auto format) {
        using E = decltype(format);
        static_cast<typename E::storage *>(base)[i] = E::narrow_one(x);
    });
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
