// The corpus of attn_mha_forward_f32 and attn_mha_backward_f32.
#include "fingerprint.hpp"

namespace attn_fingerprint {
namespace {

struct mha_case {
    const char *name;
    int64_t batch, len_q, len_kv, d_model, heads, heads_kv;
    bool biases, self;
    attn_causal causal;
    bool kv_len, dropout;
};

const mha_case mha_cases[] = {
    {"self_causal_biases", 2, 9, 9, 32, 4, 4, true, true, ATTN_CAUSAL_TOP_LEFT, false, false},
    {"cross_gqa_kv_len", 2, 7, 11, 32, 4, 2, false, false, ATTN_CAUSAL_NONE, true, false},
    {"cross_dropout_biases", 1, 12, 20, 48, 3, 3, true, false, ATTN_CAUSAL_BOTTOM_RIGHT, false, true},
};

struct mha_weights {
    std::vector<float> w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o;
};

void set_weights(rng &r, const mha_case &c, attn_mha_desc &d, mha_weights &w) {
    const int64_t dh = c.d_model / c.heads;
    w.w_q = draw_f32(r, c.heads * dh * c.d_model, -0.3f, 0.3f);
    w.w_k = draw_f32(r, c.heads_kv * dh * c.d_model, -0.3f, 0.3f);
    w.w_v = draw_f32(r, c.heads_kv * dh * c.d_model, -0.3f, 0.3f);
    w.w_o = draw_f32(r, c.d_model * c.heads * dh, -0.3f, 0.3f);
    d.w_q = w.w_q.data(), d.w_k = w.w_k.data(), d.w_v = w.w_v.data(), d.w_o = w.w_o.data();
    if (!c.biases) return;
    w.b_q = draw_f32(r, c.heads * dh), w.b_k = draw_f32(r, c.heads_kv * dh);
    w.b_v = draw_f32(r, c.heads_kv * dh), w.b_o = draw_f32(r, c.d_model);
    d.b_q = w.b_q.data(), d.b_k = w.b_k.data(), d.b_v = w.b_v.data(), d.b_o = w.b_o.data();
}

void one_mha(attn_context *ctx, record &rec, const mha_case &c) {
    rng r(5000 + uint64_t(c.len_kv));
    attn_mha_desc d;
    attn_mha_desc_init(&d, c.batch, c.len_q, c.len_kv, c.d_model, c.heads);
    d.heads_kv = c.heads_kv;
    d.causal = c.causal;
    std::vector<int32_t> kv_len;
    if (c.kv_len) {
        for (int64_t b = 0; b < c.batch; ++b) kv_len.push_back(int32_t(c.len_kv - 3 * b));
        d.kv_len = kv_len.data();
    }
    if (c.dropout) d.dropout_p = 0.25f, d.dropout_seed = 7;
    mha_weights w;
    set_weights(r, c, d, w);
    const auto x_q = draw_f32(r, c.batch * c.len_q * c.d_model);
    const auto x_kv = c.self ? x_q : draw_f32(r, c.batch * c.len_kv * c.d_model);
    const float *kv = c.self ? x_q.data() : x_kv.data();
    std::vector<float> y(size_t(c.batch * c.len_q * c.d_model), 9.0f);
    rec.begin("attn_mha_forward_f32", c.name);
    rec.status(attn_mha_forward_f32(ctx, &d, x_q.data(), kv, y.data()));
    rec.add(y);
    rec.end();

    const auto dy = draw_f32(r, c.batch * c.len_q * c.d_model);
    std::vector<float> dx_q(x_q.size(), 9.0f), dx_kv(x_kv.size(), 9.0f);
    mha_weights g = w;
    for (auto *v : {&g.w_q, &g.w_k, &g.w_v, &g.w_o, &g.b_q, &g.b_k, &g.b_v, &g.b_o})
        for (auto &x : *v) x = 9.0f;
    attn_mha_grads grads = {g.w_q.data(), g.w_k.data(), g.w_v.data(), g.w_o.data(),
                            c.biases ? g.b_q.data() : nullptr, c.biases ? g.b_k.data() : nullptr,
                            c.biases ? g.b_v.data() : nullptr, c.biases ? g.b_o.data() : nullptr};
    rec.begin("attn_mha_backward_f32", c.name);
    rec.status(attn_mha_backward_f32(ctx, &d, x_q.data(), kv, dy.data(), dx_q.data(),
                                     c.self ? nullptr : dx_kv.data(), &grads));
    rec.add(dx_q);
    rec.add(dx_kv);
    for (auto *v : {&g.w_q, &g.w_k, &g.w_v, &g.w_o, &g.b_q, &g.b_k, &g.b_v, &g.b_o}) rec.add(*v);
    rec.end();
}

}  // namespace

void corpus_mha(attn_context *ctx, record &rec) {
    for (const auto &c : mha_cases) one_mha(ctx, rec, c);
}

}  // namespace attn_fingerprint
