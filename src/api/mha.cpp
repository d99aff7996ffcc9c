// attn_mha_desc_init, attn_mha_forward_f32 and attn_mha_backward_f32: argument checks, then
// the drivers.
#include "api/context.hpp"
#include "api/error.hpp"
#include "api/validate.hpp"
#include "ops/ops.hpp"

namespace attn::api {
namespace {

// The input tensors a desc describes (all dense), spans computed.
struct mha_inputs {
    tensor_ref x_q, x_kv, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, kv_len;
};

// Sizes, grouping, enums, dropout, weights, size products. `d` is known non-null.
void check_desc(checker &chk, const attn_mha_desc &d) {
    chk.at_least(d.batch, 1, "desc->batch");
    chk.at_least(d.len_q, 1, "desc->len_q");
    chk.at_least(d.len_kv, 1, "desc->len_kv");
    chk.at_least(d.d_model, 1, "desc->d_model");
    chk.at_least(d.heads, 1, "desc->heads");
    chk.at_least(d.heads_kv, 1, "desc->heads_kv");
    // attn_mha_desc_init leaves head_dim = 0 when heads does not divide d_model.
    chk.at_least(d.head_dim, 1, "desc->head_dim");
    chk.multiple_of(d.heads, d.heads_kv, "desc->heads", "desc->heads_kv");
    chk.enum_value(enum_int(d.causal), ATTN_CAUSAL_NONE, ATTN_CAUSAL_BOTTOM_RIGHT, "desc->causal",
                   "ATTN_CAUSAL_NONE (0), ATTN_CAUSAL_TOP_LEFT (1) or ATTN_CAUSAL_BOTTOM_RIGHT (2)");
    chk.probability(d.dropout_p, "desc->dropout_p");
    chk.not_null(d.w_q, "desc->w_q");
    chk.not_null(d.w_k, "desc->w_k");
    chk.not_null(d.w_v, "desc->w_v");
    chk.not_null(d.w_o, "desc->w_o");

    // Every activation and weight the computation touches or the drivers allocate.
    const int64_t x_q[] = {d.batch, d.len_q, d.d_model};
    const int64_t x_kv[] = {d.batch, d.len_kv, d.d_model};
    const int64_t q_proj[] = {d.batch, d.len_q, d.heads, d.head_dim};
    const int64_t kv_proj[] = {d.batch, d.len_kv, d.heads_kv, d.head_dim};
    const int64_t w_q[] = {d.heads, d.head_dim, d.d_model};
    const int64_t w_kv[] = {d.heads_kv, d.head_dim, d.d_model};
    chk.product(x_q, 3, "desc->batch * desc->len_q * desc->d_model");
    chk.product(x_kv, 3, "desc->batch * desc->len_kv * desc->d_model");
    chk.product(q_proj, 4, "desc->batch * desc->len_q * desc->heads * desc->head_dim");
    chk.product(kv_proj, 4, "desc->batch * desc->len_kv * desc->heads_kv * desc->head_dim");
    chk.product(w_q, 3, "desc->heads * desc->head_dim * desc->d_model");
    chk.product(w_kv, 3, "desc->heads_kv * desc->head_dim * desc->d_model");
}

mha_inputs input_tensors(checker &chk, const attn_mha_desc &d, const float *x_q,
                         const float *x_kv) {
    chk.not_null(x_q, "x_q");
    chk.not_null(x_kv, "x_kv");
    const int64_t q_width = d.heads * d.head_dim, kv_width = d.heads_kv * d.head_dim;
    mha_inputs t;
    t.x_q = vector_tensor("x_q", x_q, d.batch * d.len_q * d.d_model);
    t.x_kv = vector_tensor("x_kv", x_kv, d.batch * d.len_kv * d.d_model);
    t.w_q = vector_tensor("desc->w_q", d.w_q, q_width * d.d_model);
    t.w_k = vector_tensor("desc->w_k", d.w_k, kv_width * d.d_model);
    t.w_v = vector_tensor("desc->w_v", d.w_v, kv_width * d.d_model);
    t.w_o = vector_tensor("desc->w_o", d.w_o, d.d_model * q_width);
    if (d.b_q) t.b_q = vector_tensor("desc->b_q", d.b_q, q_width);
    if (d.b_k) t.b_k = vector_tensor("desc->b_k", d.b_k, kv_width);
    if (d.b_v) t.b_v = vector_tensor("desc->b_v", d.b_v, kv_width);
    if (d.b_o) t.b_o = vector_tensor("desc->b_o", d.b_o, d.d_model);
    if (d.kv_len) t.kv_len = vector_tensor("desc->kv_len", d.kv_len, d.batch);
    for (tensor_ref *x : {&t.x_q, &t.x_kv, &t.w_q, &t.w_k, &t.w_v, &t.w_o, &t.b_q, &t.b_k,
                          &t.b_v, &t.b_o, &t.kv_len})
        chk.span(*x);
    chk.each_in_range(d.kv_len, d.batch, 0, d.len_kv, "desc->kv_len", "desc->len_kv");
    return t;
}

// x_kv == x_q (the same pointer) is self-attention: dx_q then receives the whole input
// gradient when dx_kv is NULL. With len_kv != len_q the one buffer would be read as two
// different sequences and the key/value part of the gradient would have no place to go:
// rejected rather than silently dropped. (x_kv != x_q with dx_kv NULL is cross-attention
// whose key/value gradient is not wanted, as for every other NULL gradient.)
void check_input_gradients(checker &chk, const attn_mha_desc &d, const float *x_q,
                           const float *x_kv, const float *dx_q, const float *dx_kv) {
    if (chk.failed() || !dx_q || dx_kv || x_kv != x_q || d.len_kv == d.len_q) return;
    chk.fail(ATTN_INVALID_ARGUMENT,
             "dx_kv = NULL, must be non-null when x_kv == x_q and desc->len_kv = %lld != "
             "desc->len_q = %lld (x_kv == x_q is self-attention only with len_kv == len_q)",
             (long long)d.len_kv, (long long)d.len_q);
}

attn_status mha_forward(const char *fn, attn_context *ctx, const attn_mha_desc *d,
                        const float *x_q, const float *x_kv, float *y) {
    checker chk(fn);
    chk.not_null(d, "desc");
    if (chk.failed()) return chk.status();
    check_desc(chk, *d);
    if (chk.failed()) return chk.status();

    mha_inputs t = input_tensors(chk, *d, x_q, x_kv);
    chk.not_null(y, "y");
    tensor_ref t_y = vector_tensor("y", y, d->batch * d->len_q * d->d_model);
    chk.span(t_y);
    chk.outputs_disjoint({&t_y}, {&t.x_q, &t.x_kv, &t.w_q, &t.w_k, &t.w_v, &t.w_o, &t.b_q,
                                  &t.b_k, &t.b_v, &t.b_o, &t.kv_len});
    if (chk.failed()) return chk.status();

    attn::ops::mha_forward(exec_for(context_or_default(ctx)), *d, x_q, x_kv, y);
    return ATTN_OK;
}

attn_status mha_backward(const char *fn, attn_context *ctx, const attn_mha_desc *d,
                         const float *x_q, const float *x_kv, const float *dy, float *dx_q,
                         float *dx_kv, const attn_mha_grads *g) {
    checker chk(fn);
    chk.not_null(d, "desc");
    if (chk.failed()) return chk.status();
    check_desc(chk, *d);
    if (chk.failed()) return chk.status();

    mha_inputs t = input_tensors(chk, *d, x_q, x_kv);
    chk.not_null(dy, "dy");
    check_input_gradients(chk, *d, x_q, x_kv, dx_q, dx_kv);
    const attn_mha_grads grads = g ? *g : attn_mha_grads{};  // g NULL: no weight gradients
    const int64_t q_width = d->heads * d->head_dim, kv_width = d->heads_kv * d->head_dim;
    tensor_ref t_dy = vector_tensor("dy", dy, d->batch * d->len_q * d->d_model);
    // Optional outputs: a NULL one stays an empty range and overlaps nothing.
    tensor_ref out[10];
    if (dx_q) out[0] = vector_tensor("dx_q", dx_q, d->batch * d->len_q * d->d_model);
    if (dx_kv) out[1] = vector_tensor("dx_kv", dx_kv, d->batch * d->len_kv * d->d_model);
    if (grads.dw_q) out[2] = vector_tensor("g->dw_q", grads.dw_q, q_width * d->d_model);
    if (grads.dw_k) out[3] = vector_tensor("g->dw_k", grads.dw_k, kv_width * d->d_model);
    if (grads.dw_v) out[4] = vector_tensor("g->dw_v", grads.dw_v, kv_width * d->d_model);
    if (grads.dw_o) out[5] = vector_tensor("g->dw_o", grads.dw_o, d->d_model * q_width);
    if (grads.db_q) out[6] = vector_tensor("g->db_q", grads.db_q, q_width);
    if (grads.db_k) out[7] = vector_tensor("g->db_k", grads.db_k, kv_width);
    if (grads.db_v) out[8] = vector_tensor("g->db_v", grads.db_v, kv_width);
    if (grads.db_o) out[9] = vector_tensor("g->db_o", grads.db_o, d->d_model);
    chk.span(t_dy);
    for (tensor_ref &o : out) chk.span(o);
    chk.outputs_disjoint({&out[0], &out[1], &out[2], &out[3], &out[4], &out[5], &out[6],
                          &out[7], &out[8], &out[9]},
                         {&t.x_q, &t.x_kv, &t_dy, &t.w_q, &t.w_k, &t.w_v, &t.w_o, &t.b_q,
                          &t.b_k, &t.b_v, &t.b_o, &t.kv_len});
    if (chk.failed()) return chk.status();

    attn::ops::mha_backward(exec_for(context_or_default(ctx)), *d, x_q, x_kv, dy, dx_q, dx_kv,
                            grads);
    return ATTN_OK;
}

}  // namespace
}  // namespace attn::api

extern "C" {

void attn_mha_desc_init(attn_mha_desc *d, int64_t batch, int64_t len_q, int64_t len_kv,
                        int64_t d_model, int64_t heads) {
    if (!d) return;
    *d = attn_mha_desc{};
    d->batch = batch;
    d->len_q = len_q;
    d->len_kv = len_kv;
    d->d_model = d_model;
    d->heads = d->heads_kv = heads;
    // d_model must split evenly into heads; otherwise head_dim = 0, which the compute call
    // rejects with a message naming it.
    d->head_dim = heads > 0 && d_model % heads == 0 ? d_model / heads : 0;
    d->causal = ATTN_CAUSAL_NONE;
}

attn_status attn_mha_forward_f32(attn_context *ctx, const attn_mha_desc *d, const float *x_q,
                                 const float *x_kv, float *y) {
    static const char *const fn = "attn_mha_forward_f32";
    return attn::api::guarded(fn,
                              [&] { return attn::api::mha_forward(fn, ctx, d, x_q, x_kv, y); });
}

attn_status attn_mha_backward_f32(attn_context *ctx, const attn_mha_desc *d, const float *x_q,
                                  const float *x_kv, const float *dy, float *dx_q,
                                  float *dx_kv, const attn_mha_grads *g) {
    static const char *const fn = "attn_mha_backward_f32";
    return attn::api::guarded(fn, [&] {
        return attn::api::mha_backward(fn, ctx, d, x_q, x_kv, dy, dx_q, dx_kv, g);
    });
}

}  // extern "C"
