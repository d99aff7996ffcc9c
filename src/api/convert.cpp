// attn_dtype_size, attn_dtype_bits and attn_convert: argument checks, then the driver.
#include "api/context.hpp"
#include "api/error.hpp"
#include "api/validate.hpp"
#include "ops/ops.hpp"

extern "C" {

size_t attn_dtype_size(attn_dtype t) {
    switch (attn::api::enum_int(t)) {
    case ATTN_DTYPE_F32: return 4;
    case ATTN_DTYPE_BF16: return 2;
    case ATTN_DTYPE_F16: return 2;
    case ATTN_DTYPE_I8:
    case ATTN_DTYPE_U8:
    case ATTN_DTYPE_FP8_E4M3:
    case ATTN_DTYPE_FP8_E5M2: return 1;
    default: return 0;  // I4 and U4 (half a byte), values outside the enum
    }
}

size_t attn_dtype_bits(attn_dtype t) {
    switch (attn::api::enum_int(t)) {
    case ATTN_DTYPE_F32: return 32;
    case ATTN_DTYPE_BF16:
    case ATTN_DTYPE_F16: return 16;
    case ATTN_DTYPE_I8:
    case ATTN_DTYPE_U8:
    case ATTN_DTYPE_FP8_E4M3:
    case ATTN_DTYPE_FP8_E5M2: return 8;
    case ATTN_DTYPE_I4:
    case ATTN_DTYPE_U4: return 4;
    default: return 0;
    }
}

attn_status attn_convert(attn_context *ctx, int64_t n, const void *src, attn_dtype src_type,
                         void *dst, attn_dtype dst_type) {
    using namespace attn::api;
    static const char *const fn = "attn_convert";
    return guarded(fn, [&] {
        checker chk(fn);
        chk.at_least(n, 0, "n");
        chk.dtype(src_type, "src_type");
        chk.dtype(dst_type, "dst_type");
        if (chk.failed()) return chk.status();
        if (n == 0) return ATTN_OK;
        chk.not_null(src, "src", "n > 0");
        chk.not_null(dst, "dst", "n > 0");
        const int64_t src_bytes = int64_t(attn_dtype_size(src_type));
        const int64_t dst_bytes = int64_t(attn_dtype_size(dst_type));
        tensor_ref s = vector_tensor("src", src, n, src_bytes);
        tensor_ref d = vector_tensor("dst", dst, n, dst_bytes);
        chk.span(s);
        chk.span(d);
        // In place only element for element: the same address and the same element size.
        if (!(src == dst && src_bytes == dst_bytes)) chk.disjoint(d, s);
        if (chk.failed()) return chk.status();
        attn::ops::convert(exec_for(context_or_default(ctx)), n, src, src_type, dst, dst_type);
        return ATTN_OK;
    });
}

}  // extern "C"
