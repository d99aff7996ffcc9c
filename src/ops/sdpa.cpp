#include "ops/ops.hpp"
#include "ref/ref.hpp"

namespace attn::ops {

void sdpa(const exec &, const attn_sdpa_desc &d, const float *q, const float *k, const float *v,
          float *out) {
    ref::sdpa(d, q, k, v, out);
}

void sdpa_backward(const exec &, const attn_sdpa_desc &d, const float *q, const float *k,
                   const float *v, const float *out, const float *dout, const float *lse,
                   float *dq, float *dk, float *dv) {
    ref::sdpa_backward(d, q, k, v, out, dout, lse, dq, dk, dv);
}

}  // namespace attn::ops
