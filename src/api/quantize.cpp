// attn_quantize: argument checks, a scan of the values (NaN, infinities, overflowing ranges),
// then the driver. Nothing is written unless every check passed.
#include <utility>

#include "api/context.hpp"
#include "api/error.hpp"
#include "api/validate.hpp"
#include "ops/ops.hpp"
#include "ref/ref.hpp"

namespace attn::api {
namespace {

// The rules on the types, the group and the zero points (no memory read).
void check_quantize_types(checker &chk, int64_t dim, attn_dtype src_type, attn_dtype dst_type,
                          const float *zero, int64_t dst_stride, int64_t group) {
    chk.dtype(src_type, "src_type");
    chk.quantized_dtype(dst_type, "dst_type");
    chk.at_least(group, 0, "group");
    if (chk.failed()) return;
    const int t = enum_int(dst_type);
    if (group > 0 && dim > 0 && dim % group != 0)
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "group = %lld, must divide dim = %lld (0 = one group per row)",
                 (long long)group, (long long)dim);
    else if (zero && !is_integer_quantized_type(t))
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "zero = %p, must be NULL: zero points are for the integer types only, not "
                 "dst_type = %s (%d)",
                 (const void *)zero, dtype_name(t), t);
    else if (!zero && (t == ATTN_DTYPE_U8 || t == ATTN_DTYPE_U4))
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "zero = NULL, must be non-null: the unsigned dst_type = %s (%d) is quantized "
                 "with zero points (asymmetric)",
                 dtype_name(t), t);
    if (chk.failed() || !is_4bit_type(t)) return;
    const std::pair<int64_t, const char *> even[] = {
        {dim, "dim"}, {group, "group"}, {dst_stride, "dst_stride"}};
    for (auto [value, name] : even)
        if (!chk.failed() && value % 2 != 0)
            chk.fail(ATTN_INVALID_ARGUMENT,
                     "%s = %lld, must be even with the 4-bit dst_type = %s (two elements per "
                     "byte)",
                     name, (long long)value, dtype_name(t));
}

// stride >= row_length when there is more than one row (>= 0 otherwise).
void check_row_stride(checker &chk, int64_t rows, int64_t stride, int64_t row_length,
                      const char *what, const char *row_length_expr) {
    chk.at_least(stride, 0, what);
    if (!chk.failed() && rows > 1 && stride < row_length)
        chk.fail(ATTN_INVALID_ARGUMENT, "%s = %lld, must be >= %s = %lld when rows > 1", what,
                 (long long)stride, row_length_expr, (long long)row_length);
}

// The values: the first NaN or infinity, or (asymmetric) group whose max - min overflows, is
// an error.
void check_quantize_values(checker &chk, const ops::exec &ex, int64_t rows, int64_t dim, const void *src,
                           attn_dtype src_type, int64_t src_stride, int64_t group,
                           bool asymmetric) {
    if (chk.failed()) return;  // the pointers and strides must be known good to read
    const ops::quantize_fault f =
        ops::quantize_find_fault(ex, rows, dim, src, src_type, src_stride, group, asymmetric);
    if (f.row < 0) return;
    if (!f.overflow) {
        const float x = ref::load_element(src, src_type, f.row * src_stride + f.col);
        chk.fail(ATTN_INVALID_ARGUMENT, "src row %lld, column %lld = %g, must be finite",
                 (long long)f.row, (long long)f.col, double(x));
    } else {
        const int64_t g_len = group == 0 ? dim : group;
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "src row %lld: the group of columns %lld .. %lld has max - min beyond the f32 "
                 "range (it cannot be quantized)",
                 (long long)f.row, (long long)f.col, (long long)(f.col + g_len - 1));
    }
}

attn_status quantize(const char *fn, attn_context *ctx, int64_t rows, int64_t dim,
                     const void *src, attn_dtype src_type, int64_t src_stride, void *dst,
                     attn_dtype dst_type, int64_t dst_stride, float *scale, float *zero,
                     int64_t scale_stride, int64_t group) {
    checker chk(fn);
    chk.at_least(rows, 0, "rows");
    chk.at_least(dim, 0, "dim");
    if (!chk.failed()) check_quantize_types(chk, dim, src_type, dst_type, zero, dst_stride, group);
    if (chk.failed()) return chk.status();
    if (rows == 0 || dim == 0) return ATTN_OK;
    const int64_t groups = group == 0 ? 1 : dim / group;
    check_row_stride(chk, rows, src_stride, dim, "src_stride", "dim");
    check_row_stride(chk, rows, dst_stride, dim, "dst_stride", "dim");
    check_row_stride(chk, rows, scale_stride, groups, "scale_stride", "dim / group");
    chk.not_null(src, "src");
    chk.not_null(dst, "dst");
    chk.not_null(scale, "scale");
    if (chk.failed()) return chk.status();
    // 4-bit rows are seen as bytes: dim / 2 of them, dst_stride / 2 apart (both even).
    const bool nibbles = is_4bit_type(enum_int(dst_type));
    tensor_ref s = matrix_tensor("src", src, rows, dim, src_stride,
                                 int64_t(attn_dtype_size(src_type)));
    tensor_ref d = nibbles ? matrix_tensor("dst", dst, rows, dim / 2, dst_stride / 2, 1)
                           : matrix_tensor("dst", dst, rows, dim, dst_stride, 1);
    tensor_ref sc = matrix_tensor("scale", scale, rows, groups, scale_stride);
    tensor_ref z;
    if (zero) z = matrix_tensor("zero", zero, rows, groups, scale_stride);
    for (tensor_ref *x : {&s, &d, &sc, &z}) chk.span(*x);
    chk.outputs_disjoint({&d, &sc, &z}, {&s});
    const ops::exec ex = exec_for(context_or_default(ctx));
    check_quantize_values(chk, ex, rows, dim, src, src_type, src_stride, group, zero != nullptr);
    if (chk.failed()) return chk.status();
    ops::quantize(ex, rows, dim, src, src_type, src_stride, dst,
                  dst_type, dst_stride, scale, zero, scale_stride, group);
    return ATTN_OK;
}

}  // namespace
}  // namespace attn::api

extern "C" attn_status attn_quantize(attn_context *ctx, int64_t rows, int64_t dim,
                                     const void *src, attn_dtype src_type, int64_t src_stride,
                                     void *dst, attn_dtype dst_type, int64_t dst_stride,
                                     float *scale, float *zero, int64_t scale_stride,
                                     int64_t group) {
    static const char *const fn = "attn_quantize";
    return attn::api::guarded(fn, [&] {
        return attn::api::quantize(fn, ctx, rows, dim, src, src_type, src_stride, dst, dst_type,
                                   dst_stride, scale, zero, scale_stride, group);
    });
}
