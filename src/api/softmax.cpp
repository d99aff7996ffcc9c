// attn_softmax_f32: argument checks, then the driver.
#include "api/context.hpp"
#include "api/error.hpp"
#include "api/validate.hpp"
#include "ops/ops.hpp"

extern "C" attn_status attn_softmax_f32(attn_context *ctx, int64_t rows, int64_t cols,
                                        float scale, const float *x, int64_t ldx, float *y,
                                        int64_t ldy) {
    using namespace attn::api;
    static const char *const fn = "attn_softmax_f32";
    return guarded(fn, [&] {
        checker chk(fn);
        chk.at_least(rows, 0, "rows");
        chk.at_least(cols, 0, "cols");
        chk.finite(scale, "scale");
        chk.leading_dim(ldx, cols, "ldx", "cols");
        chk.leading_dim(ldy, cols, "ldy", "cols");
        if (chk.failed()) return chk.status();
        if (rows == 0 || cols == 0) return ATTN_OK;  // no element to write

        chk.not_null(x, "x", "rows * cols > 0");
        chk.not_null(y, "y", "rows * cols > 0");
        tensor_ref tx = matrix_tensor("x", x, rows, cols, ldx);
        tensor_ref ty = matrix_tensor("y", y, rows, cols, ldy);
        chk.span(tx);
        chk.span(ty);
        // In place is exactly x == y with ldx == ldy; any other overlap would read
        // elements already overwritten.
        const bool in_place = static_cast<const void *>(x) == static_cast<const void *>(y) &&
                              ldx == ldy;
        if (!in_place && static_cast<const void *>(x) == static_cast<const void *>(y))
            chk.fail(ATTN_INVALID_ARGUMENT,
                     "y = x with ldy = %lld and ldx = %lld, in place needs ldx == ldy",
                     (long long)ldy, (long long)ldx);
        if (!in_place) chk.disjoint(ty, tx);
        if (chk.failed()) return chk.status();

        const attn_context &context = context_or_default(ctx);
        attn::ops::softmax(exec_for(context), rows, cols, scale, x, ldx, y, ldy);
        return ATTN_OK;
    });
}
