// Reference matrix product: C = alpha * op(A) * op(B) + beta * C, row-major, with the
// semantics of cblas_sgemm(CblasRowMajor, ...).
#include "core/convert.hpp"
#include "ref/ref.hpp"

namespace attn::ref {

void gemm(attn_trans trans_a, attn_trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
          int64_t ldc) {
    // op(A)[i,p] and op(B)[p,j] in terms of the stored row-major arrays.
    auto a_at = [&](int64_t i, int64_t p) {
        return trans_a == ATTN_TRANS ? a[p * lda + i] : a[i * lda + p];
    };
    auto b_at = [&](int64_t p, int64_t j) {
        return trans_b == ATTN_TRANS ? b[j * ldb + p] : b[p * ldb + j];
    };
    // As in the reference BLAS, alpha == 0 or k == 0 leaves only beta * C: A and B are not read.
    const bool product = alpha != 0.0f && k > 0;
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            float dot = 0.0f;  // op(A)[i,:] . op(B)[:,j], accumulated in index order
            if (product)
                for (int64_t p = 0; p < k; ++p) dot += a_at(i, p) * b_at(p, j);
            float &cij = c[i * ldc + j];
            // beta == 0 must not read C, so a NaN left in C does not leak into the result.
            cij = beta == 0.0f ? alpha * dot : alpha * dot + beta * cij;
        }
    }
}

void gemm_typed(attn_trans trans_a, attn_trans trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const void *a, attn_dtype a_type, int64_t lda, const void *b,
                attn_dtype b_type, int64_t ldb, float beta, void *c, attn_dtype c_type,
                int64_t ldc, bool round_bf16) {
    // An element as the products see it: widened exactly; under fpmath bf16 an f32 or f16
    // element is first rounded to bf16 (a bf16 one already is).
    auto operand = [&](const void *base, attn_dtype t, int64_t idx) {
        const float x = load_element(base, t, idx);
        return round_bf16 && t != ATTN_DTYPE_BF16 ? convert::bf16_to_f32(convert::f32_to_bf16(x))
                                                  : x;
    };
    auto a_at = [&](int64_t i, int64_t p) {
        return operand(a, a_type, trans_a == ATTN_TRANS ? p * lda + i : i * lda + p);
    };
    auto b_at = [&](int64_t p, int64_t j) {
        return operand(b, b_type, trans_b == ATTN_TRANS ? j * ldb + p : p * ldb + j);
    };
    const bool product = alpha != 0.0f && k > 0;
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            float dot = 0.0f;
            if (product)
                for (int64_t p = 0; p < k; ++p) dot += a_at(i, p) * b_at(p, j);
            // beta == 0 does not read C; the result is rounded to c_type once.
            const float r = beta == 0.0f ? alpha * dot
                                         : alpha * dot + beta * load_element(c, c_type, i * ldc + j);
            store_element(c, c_type, i * ldc + j, r);
        }
    }
}

}  // namespace attn::ref
