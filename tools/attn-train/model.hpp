// attn-train's model: a one-layer causal attention model for associative recall, on the
// public C API only.
//
//   x_t     = E[token_t] + F[token_{t-1}]         token and previous-token embeddings
//   y       = attention layer(x), causal          full: attn_mha_forward_f32 / _backward_f32;
//                                                 windowed: attn_gemm_f32 + attn_sdpa_f32 with an
//                                                 additive mask hiding keys more than w back;
//                                                 bf16: q, k, v and the output in bf16 through
//                                                 attn_sdpa (the projections stay f32)
//   logits  = W_r y_last + b_r                    over the value tokens
//   loss    = cross-entropy(logits, the value paired with the query key)
// The previous-token embedding puts "value v follows key k" into the value's position, so the
// query key can find it by content (Q . K) and copy v (V, W_o): one layer suffices, wherever
// the pair is. A window of the last w tokens sees the pair only when it is among the last few.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "attn/attn.h"

namespace attn_train {

// Sequences "k1 v1 k2 v2 ... kn vn kq": n distinct keys, random values, kq one of the keys;
// the answer is kq's value. Keys are tokens [0, keys), values [keys, keys + values).
struct task {
    int keys = 32, values = 32, pairs = 16;
    int vocab() const { return keys + values; }
    int length() const { return 2 * pairs + 1; }
};

struct batch {
    int count = 0, length = 0;
    std::vector<int> tokens;  // [count, length]
    std::vector<int> target;  // [count]: value index in [0, values)
    std::vector<int> source;  // [count]: position of the answer's value token
};

batch sample_batch(const task &t, int count, std::mt19937 &gen);

// One parameter tensor with its gradient and Adam moments.
struct param {
    std::vector<float> w, g, m, v;
    void init(size_t n, float sigma, std::mt19937 &gen);
};

struct model {
    task t;
    int d_model = 64, heads = 2, window = 0;  // window 0: full causal attention
    attn_dtype dtype = ATTN_DTYPE_F32;        // the attention's q, k, v, out (and gradients)
    param E, F, w_q, w_k, w_v, w_o, w_r, b_r;

    void init(const task &tk, int d, int h, int w, uint32_t seed);
    std::vector<param *> params();
    // Mean loss over the batch, accuracy into *accuracy; gradients into every param's g when
    // grads (else g is left alone).
    double run(attn_context *ctx, const batch &b, bool grads, double *accuracy);
    // The softmax weights [length x length] of head `head` for sequence `index` of b.
    std::vector<float> attention_weights(attn_context *ctx, const batch &b, int index, int head);
};

// Adam with bias correction, one step over every parameter.
struct adam {
    float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    int step = 0;
    void update(std::vector<param *> ps);
};

// Max relative error of the analytic gradient against central differences of the loss over a
// few coordinates of every parameter.
double gradient_check(attn_context *ctx, model &m, const batch &b, std::mt19937 &gen);

}  // namespace attn_train
