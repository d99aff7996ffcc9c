// attn_gemm_f32 and attn_gemm: argument checks, then one driver (ops::gemm_typed), so
// attn_gemm_f32 is attn_gemm with three F32 types, bit for bit.
#include "api/context.hpp"
#include "api/error.hpp"
#include "api/validate.hpp"
#include "ops/ops.hpp"

namespace {

using namespace attn::api;

// The rules of both entry points (the enums by reference: a C caller may pass any int, and
// loading it as an attn_dtype outside the enum's range is undefined in C++); the dtype checks come first for attn_gemm (they decide
// the element sizes of the spans). Returns ATTN_OK with nothing done for an empty C.
attn_status gemm_checked(const char *fn, attn_context *ctx, const attn_trans &trans_a,
                         const attn_trans &trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const void *a, const attn_dtype &a_type, int64_t lda, const void *b,
                         const attn_dtype &b_type, int64_t ldb, float beta, void *c,
                         const attn_dtype &c_type, int64_t ldc, bool typed) {
    checker chk(fn);
    const char *trans_values = "ATTN_NO_TRANS (0) or ATTN_TRANS (1)";
    chk.enum_value(enum_int(trans_a), ATTN_NO_TRANS, ATTN_TRANS, "trans_a", trans_values);
    chk.enum_value(enum_int(trans_b), ATTN_NO_TRANS, ATTN_TRANS, "trans_b", trans_values);
    if (typed) {
        chk.dtype(a_type, "a_type");
        chk.dtype(b_type, "b_type");
        chk.dtype(c_type, "c_type");
    }
    chk.at_least(m, 0, "m");
    chk.at_least(n, 0, "n");
    chk.at_least(k, 0, "k");
    // Stored shapes: A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k].
    const bool ta = enum_int(trans_a) == ATTN_TRANS, tb = enum_int(trans_b) == ATTN_TRANS;
    chk.leading_dim(lda, ta ? m : k, "lda", ta ? "m" : "k");
    chk.leading_dim(ldb, tb ? k : n, "ldb", tb ? "k" : "n");
    chk.leading_dim(ldc, n, "ldc", "n");
    if (chk.failed()) return chk.status();
    if (m == 0 || n == 0) return ATTN_OK;  // C is empty: nothing to read or write

    // C = beta * C still runs when k == 0; A and B are needed only when k > 0.
    chk.not_null(c, "c", "m * n > 0");
    if (k > 0) {
        chk.not_null(a, "a", "m * k > 0");
        chk.not_null(b, "b", "k * n > 0");
    }
    const int64_t ea = int64_t(attn_dtype_size(a_type)), eb = int64_t(attn_dtype_size(b_type));
    const int64_t ec = int64_t(attn_dtype_size(c_type));
    tensor_ref ta_ref = matrix_tensor("a", a, ta ? k : m, ta ? m : k, lda, ea);
    tensor_ref tb_ref = matrix_tensor("b", b, tb ? n : k, tb ? k : n, ldb, eb);
    tensor_ref tc_ref = matrix_tensor("c", c, m, n, ldc, ec);
    if (k > 0) {
        chk.span(ta_ref);
        chk.span(tb_ref);
    }
    chk.span(tc_ref);
    if (k > 0) {
        chk.disjoint(tc_ref, ta_ref);
        chk.disjoint(tc_ref, tb_ref);
    }
    if (chk.failed()) return chk.status();

    const attn_context &context = context_or_default(ctx);
    attn::ops::gemm_typed(exec_for(context), trans_a, trans_b, m, n, k, alpha, a, a_type, lda, b,
                          b_type, ldb, beta, c, c_type, ldc);
    return ATTN_OK;
}

}  // namespace

extern "C" attn_status attn_gemm_f32(attn_context *ctx, attn_trans trans_a, attn_trans trans_b,
                                     int64_t m, int64_t n, int64_t k, float alpha,
                                     const float *a, int64_t lda, const float *b, int64_t ldb,
                                     float beta, float *c, int64_t ldc) {
    static const char *const fn = "attn_gemm_f32";
    return guarded(fn, [&] {
        return gemm_checked(fn, ctx, trans_a, trans_b, m, n, k, alpha, a, ATTN_DTYPE_F32, lda,
                            b, ATTN_DTYPE_F32, ldb, beta, c, ATTN_DTYPE_F32, ldc, false);
    });
}

extern "C" attn_status attn_gemm(attn_context *ctx, attn_trans trans_a, attn_trans trans_b,
                                 int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                                 attn_dtype a_type, int64_t lda, const void *b,
                                 attn_dtype b_type, int64_t ldb, float beta, void *c,
                                 attn_dtype c_type, int64_t ldc) {
    static const char *const fn = "attn_gemm";
    return guarded(fn, [&] {
        return gemm_checked(fn, ctx, trans_a, trans_b, m, n, k, alpha, a, a_type, lda, b, b_type,
                            ldb, beta, c, c_type, ldc, true);
    });
}
