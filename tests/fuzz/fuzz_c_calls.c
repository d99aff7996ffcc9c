/* Entry points called with enum arguments given as plain ints, as a C caller may: in C any
 * int converts to an enum type, whereas C++ code cannot even form an out-of-range enum
 * value without undefined behaviour. The fuzzer (C++) reaches invalid values through here. */
#include "attn/attn.h"

attn_status fuzz_gemm_int_trans(attn_context *ctx, int trans_a, int trans_b, int64_t m, int64_t n,
                                int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                                int64_t ldb, float beta, float *c, int64_t ldc) {
    return attn_gemm_f32(ctx, (attn_trans)trans_a, (attn_trans)trans_b, m, n, k, alpha, a, lda, b,
                         ldb, beta, c, ldc);
}
