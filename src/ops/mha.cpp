#include "ops/ops.hpp"
#include "ref/ref.hpp"

namespace attn::ops {

void mha_forward(const exec &, const attn_mha_desc &d, const float *x_q, const float *x_kv,
                 float *y) {
    ref::mha_forward(d, x_q, x_kv, y);
}

void mha_backward(const exec &, const attn_mha_desc &d, const float *x_q, const float *x_kv,
                  const float *dy, float *dx_q, float *dx_kv, const attn_mha_grads &g) {
    ref::mha_backward(d, x_q, x_kv, dy, dx_q, dx_kv, g);
}

}  // namespace attn::ops
