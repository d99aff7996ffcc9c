#include "ops/ops.hpp"
#include "ref/ref.hpp"

namespace attn::ops {

void gemm(const exec &, attn_trans trans_a, attn_trans trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
          float *c, int64_t ldc) {
    ref::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace attn::ops
