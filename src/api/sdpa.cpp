// attn_sdpa_desc_init, attn_sdpa_f32, attn_sdpa, attn_sdpa_backward_f32 and attn_sdpa_backward:
// argument checks, then the drivers.
#include <cmath>
#include <utility>

#include "api/context.hpp"
#include "api/error.hpp"
#include "api/sdpa_fields.hpp"
#include "api/validate.hpp"
#include "ops/ops.hpp"

namespace attn::api {
namespace {

// Every tensor of a call that a desc describes, spans computed.
struct sdpa_tensors {
    tensor_ref q, k, v, out, mask, kv_len, alibi_slopes, sinks, block_table, q_start, kv_start;
};

// The rows of a query-side (q, out, dq, dout) or key-side (k, v, dk, dv) tensor as
// [outer, heads, seq, dim]: the layout itself, or, packed by starts (q_start, kv_start), one
// outer row of starts[batch] packed rows, the layout's batch stride unused. Starts validated.
tensor_ref rows_tensor(const char *name, const void *p, const int32_t *starts, int64_t batch,
                       int64_t heads, int64_t seq, int64_t dim, const attn_layout &l,
                       int64_t elem_bytes = 4) {
    if (!starts) return bhsd_tensor(name, p, batch, heads, seq, dim, l, elem_bytes);
    return bhsd_tensor(name, p, 1, heads, starts[batch], dim, attn_layout{0, l.head, l.seq},
                       elem_bytes);
}

// Dense [batch, heads_q, len_q, len_kv]: the weights output. Sizes already checked.
tensor_ref weights_tensor(const char *name, const float *p, const attn_sdpa_desc &d) {
    return bhsd_tensor(name, p, d.batch, d.heads_q, d.len_q, d.len_kv,
                       attn_layout{d.heads_q * d.len_q * d.len_kv, d.len_q * d.len_kv, d.len_kv});
}

// Dense [batch, heads_q, len_q], seen as a dim of 1: the lse output or input; with q_start,
// dense [q_start[batch], heads_q].
tensor_ref lse_tensor(const char *name, const float *p, const attn_sdpa_desc &d) {
    if (d.q_start) return matrix_tensor(name, p, d.q_start[d.batch], d.heads_q, d.heads_q);
    return bhsd_tensor(name, p, d.batch, d.heads_q, d.len_q, 1,
                       attn_layout{d.heads_q * d.len_q, d.len_q, 1});
}

// The rules on the fields of "masks and layouts of today's models" that need no memory read
// beyond the desc: windows, softcap, dsinks only with sinks, the page geometry.
void check_model_fields(checker &chk, const attn_sdpa_desc &d) {
    chk.at_least(d.window_left, -1, "desc->window_left");
    chk.at_least(d.window_right, -1, "desc->window_right");
    if (!chk.failed() && !(std::isfinite(d.softcap) && d.softcap >= 0.0f))
        chk.fail(ATTN_INVALID_ARGUMENT, "desc->softcap = %g, must be finite and >= 0 (0 = off)",
                 double(d.softcap));
    if (!chk.failed() && d.dsinks && !d.sinks)
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "desc->dsinks = %p, must be NULL when desc->sinks is NULL", (void *)d.dsinks);
    if (!d.block_table) return;
    chk.at_least(d.page_size, 1, "desc->page_size");
    chk.at_least(d.num_pages, 1, "desc->num_pages");
    if (!chk.failed()) {
        const int64_t pages = ops::ceil_div(d.len_kv, d.page_size);
        if (d.block_table_stride < pages)
            chk.fail(ATTN_INVALID_ARGUMENT,
                     "desc->block_table_stride = %lld, must be >= ceil(desc->len_kv / "
                     "desc->page_size) = %lld",
                     (long long)d.block_table_stride, (long long)pages);
    }
}

// The rules on the packed-sequence fields that need no memory read: not with paged K/V nor
// with weights.
void check_sequence_fields(checker &chk, const attn_sdpa_desc &d) {
    if (!chk.failed() && d.kv_start && d.block_table)
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "desc->kv_start = %p, must be NULL when desc->block_table is given (paged K/V "
                 "has its own rows)", (const void *)d.kv_start);
    if (!chk.failed() && d.weights && (d.q_start || d.kv_start))
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "desc->weights = %p, must be NULL when desc->%s is given (packed sequences)",
                 (void *)d.weights, d.q_start ? "q_start" : "kv_start");
}

// The packed-sequence arrays (spans, then values), before any tensor they shape: q_start and
// kv_start cumulative, counts within len_q / len_kv; with kv_start, kv_len[b] <= K_b.
void check_sequence_values(checker &chk, const attn_sdpa_desc &d, sdpa_tensors &t) {
    if (d.q_start) t.q_start = vector_tensor("desc->q_start", d.q_start, d.batch + 1);
    if (d.kv_start) t.kv_start = vector_tensor("desc->kv_start", d.kv_start, d.batch + 1);
    chk.span(t.q_start);
    chk.span(t.kv_start);
    chk.cumulative_starts(d.q_start, d.batch, d.len_q, "desc->q_start", "desc->len_q");
    chk.cumulative_starts(d.kv_start, d.batch, d.len_kv, "desc->kv_start", "desc->len_kv");
    if (chk.failed() || !d.kv_start || !d.kv_len) return;
    for (int64_t b = 0; b < d.batch; ++b) {
        const int64_t keys = int64_t(d.kv_start[b + 1]) - d.kv_start[b];
        if (d.kv_len[b] > keys) {
            chk.fail(ATTN_INVALID_ARGUMENT,
                     "desc->kv_len[%lld] = %d, must be <= desc->kv_start[%lld] - "
                     "desc->kv_start[%lld] = %lld (the sequence's keys)",
                     (long long)b, d.kv_len[b], (long long)(b + 1), (long long)b,
                     (long long)keys);
            return;
        }
    }
}

// The values of the new per-head and paging arrays (after their spans were checked): slopes
// finite, sinks finite or -inf, every page id in use in [0, num_pages).
void check_model_values(checker &chk, const attn_sdpa_desc &d) {
    for (int64_t h = 0; d.alibi_slopes && h < d.heads_q && !chk.failed(); ++h)
        if (!std::isfinite(d.alibi_slopes[h]))
            chk.fail(ATTN_INVALID_ARGUMENT, "desc->alibi_slopes[%lld] = %g, must be finite",
                     (long long)h, double(d.alibi_slopes[h]));
    for (int64_t h = 0; d.sinks && h < d.heads_q && !chk.failed(); ++h)
        if (std::isnan(d.sinks[h]) || d.sinks[h] == INFINITY)
            chk.fail(ATTN_INVALID_ARGUMENT,
                     "desc->sinks[%lld] = %g, must be finite or -INFINITY (no sink)", (long long)h,
                     double(d.sinks[h]));
    if (!d.block_table || chk.failed()) return;
    for (int64_t b = 0; b < d.batch && !chk.failed(); ++b) {
        // the pages holding keys j < kv_len[b] (all j < len_kv without kv_len)
        const int64_t keys = d.kv_len ? d.kv_len[b] : d.len_kv;
        const int64_t used = (keys + d.page_size - 1) / d.page_size;
        for (int64_t e = 0; e < used; ++e) {
            const int32_t id = d.block_table[b * d.block_table_stride + e];
            if (id < 0 || id >= d.num_pages) {
                chk.fail(ATTN_INVALID_ARGUMENT,
                         "desc->block_table[%lld * %lld + %lld] = %d (batch %lld, entry %lld), "
                         "must be in [0, desc->num_pages = %lld)",
                         (long long)b, (long long)d.block_table_stride, (long long)e, id,
                         (long long)b, (long long)e, (long long)d.num_pages);
                return;
            }
        }
    }
}

// A layout's strides as the rows use them: packed by starts, the batch stride is not used.
attn_layout used_strides(const attn_layout &l, const int32_t *starts) {
    return starts ? attn_layout{0, l.head, l.seq} : l;
}

// The rules on the desc itself, shared by forward and backward: sizes, grouping, strides,
// enums, scale, dropout, size products. `d` is known non-null.
void check_desc(checker &chk, const attn_sdpa_desc &d) {
    chk.at_least(d.batch, 1, "desc->batch");
    chk.at_least(d.heads_q, 1, "desc->heads_q");
    chk.at_least(d.heads_kv, 1, "desc->heads_kv");
    chk.at_least(d.len_q, 1, "desc->len_q");
    chk.at_least(d.len_kv, 1, "desc->len_kv");
    chk.at_least(d.dim_qk, 1, "desc->dim_qk");
    chk.at_least(d.dim_v, 1, "desc->dim_v");
    chk.multiple_of(d.heads_q, d.heads_kv, "desc->heads_q", "desc->heads_kv");
    // A batch stride that the rows do not use (packed by q_start or kv_start) is ignored,
    // whatever its value.
    chk.layout_strides(used_strides(d.q, d.q_start), "desc->q");
    chk.layout_strides(used_strides(d.k, d.kv_start), "desc->k");
    chk.layout_strides(used_strides(d.v, d.kv_start), "desc->v");
    chk.layout_strides(used_strides(d.out, d.q_start), "desc->out");
    if (d.mask) chk.layout_strides(d.mask_strides, "desc->mask_strides");
    chk.finite(d.scale, "desc->scale");
    chk.enum_value(enum_int(d.causal), ATTN_CAUSAL_NONE, ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN,
                   "desc->causal",
                   "ATTN_CAUSAL_NONE (0), ATTN_CAUSAL_TOP_LEFT (1), ATTN_CAUSAL_BOTTOM_RIGHT (2) "
                   "or ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN (3)");
    if (!chk.failed() && enum_int(d.causal) == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN && !d.kv_len)
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "desc->causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN (3) needs desc->kv_len, which is "
                 "NULL");
    chk.probability(d.dropout_p, "desc->dropout_p");
    chk.dtype(d.q_type, "desc->q_type");
    chk.dtype(d.out_type, "desc->out_type");
    check_quantized_fields(chk, d);  // kv_type and the 0.3 scale fields
    check_model_fields(chk, d);
    check_sequence_fields(chk, d);

    // Element counts of every logical tensor (scratch in the drivers is sized by these).
    const int64_t q_dims[] = {d.batch, d.heads_q, d.len_q, d.dim_qk};
    const int64_t k_dims[] = {d.batch, d.heads_kv, d.len_kv, d.dim_qk};
    const int64_t v_dims[] = {d.batch, d.heads_kv, d.len_kv, d.dim_v};
    const int64_t out_dims[] = {d.batch, d.heads_q, d.len_q, d.dim_v};
    const int64_t scores_dims[] = {d.batch, d.heads_q, d.len_q, d.len_kv};
    chk.product(q_dims, 4, "desc->batch * desc->heads_q * desc->len_q * desc->dim_qk");
    chk.product(k_dims, 4, "desc->batch * desc->heads_kv * desc->len_kv * desc->dim_qk");
    chk.product(v_dims, 4, "desc->batch * desc->heads_kv * desc->len_kv * desc->dim_v");
    chk.product(out_dims, 4, "desc->batch * desc->heads_q * desc->len_q * desc->dim_v");
    if (d.mask || d.weights)
        chk.product(scores_dims, 4, "desc->batch * desc->heads_q * desc->len_q * desc->len_kv");
}

// The input tensors of the desc (q, k, v, out in their layouts; mask; kv_len), null checks,
// spans, and the kv_len values. Used after check_desc succeeded.
sdpa_tensors input_tensors(checker &chk, const attn_sdpa_desc &d, const void *q,
                           const void *k, const void *v, const void *out,
                           const char *out_name) {
    chk.not_null(q, "q");
    chk.not_null(k, "k");
    chk.not_null(v, "v");
    chk.not_null(out, out_name);
    sdpa_tensors t;
    if (d.kv_len) t.kv_len = vector_tensor("desc->kv_len", d.kv_len, d.batch);
    chk.span(t.kv_len);
    chk.each_in_range(d.kv_len, d.batch, 0, d.len_kv, "desc->kv_len", "desc->len_kv");
    check_sequence_values(chk, d, t);
    if (chk.failed()) return t;
    const int64_t q_bytes = int64_t(attn_dtype_size(d.q_type));
    const int64_t kv_bytes = int64_t(attn_dtype_size(d.kv_type));
    const int64_t out_bytes = int64_t(attn_dtype_size(d.out_type));
    t.q = rows_tensor("q", q, d.q_start, d.batch, d.heads_q, d.len_q, d.dim_qk, d.q, q_bytes);
    // paged K/V: a pool of num_pages pages of page_size rows (the layouts' batch stride apart)
    if (d.block_table) {
        t.k = bhsd_tensor("k", k, d.num_pages, d.heads_kv, d.page_size, d.dim_qk, d.k, kv_bytes);
        t.v = bhsd_tensor("v", v, d.num_pages, d.heads_kv, d.page_size, d.dim_v, d.v, kv_bytes);
    } else {
        t.k = rows_tensor("k", k, d.kv_start, d.batch, d.heads_kv, d.len_kv, d.dim_qk, d.k,
                          kv_bytes);
        t.v = rows_tensor("v", v, d.kv_start, d.batch, d.heads_kv, d.len_kv, d.dim_v, d.v,
                          kv_bytes);
    }
    t.out = rows_tensor(out_name, out, d.q_start, d.batch, d.heads_q, d.len_q, d.dim_v, d.out,
                        out_bytes);
    if (d.mask)
        t.mask = bhsd_tensor("desc->mask", d.mask, d.batch, d.heads_q, d.len_q, d.len_kv,
                             d.mask_strides);
    if (d.alibi_slopes)
        t.alibi_slopes = vector_tensor("desc->alibi_slopes", d.alibi_slopes, d.heads_q);
    if (d.sinks) t.sinks = vector_tensor("desc->sinks", d.sinks, d.heads_q);
    if (d.block_table)
        t.block_table = matrix_tensor("desc->block_table", d.block_table, d.batch,
                                      (d.len_kv + d.page_size - 1) / d.page_size,
                                      d.block_table_stride);
    for (tensor_ref *x : {&t.q, &t.k, &t.v, &t.out, &t.mask, &t.alibi_slopes, &t.sinks,
                          &t.block_table})
        chk.span(*x);
    check_model_values(chk, d);
    return t;
}

// The f32 entry points take f32 tensors only: a 16-bit type there names its field.
void require_f32_types(checker &chk, const attn_sdpa_desc &d) {
    const std::pair<attn_dtype, const char *> fields[] = {
        {d.q_type, "desc->q_type"}, {d.kv_type, "desc->kv_type"}, {d.out_type, "desc->out_type"}};
    for (auto [type, name] : fields)
        if (!chk.failed() && enum_int(type) != ATTN_DTYPE_F32)
            chk.fail(ATTN_INVALID_ARGUMENT,
                     "%s = %d, must be ATTN_DTYPE_F32 (0) here (attn_sdpa takes other types)",
                     name, enum_int(type));
}

// The desc the drivers get. A packed tensor of no row (every sequence empty) addresses
// nothing, so no check bounded its strides; the drivers form row pointers from them before
// finding a sequence empty, which could overflow int64: its strides become zeros.
attn_sdpa_desc bounded_strides(const attn_sdpa_desc &d) {
    attn_sdpa_desc b = d;
    if (d.q_start && d.q_start[d.batch] == 0) b.q = b.out = attn_layout{0, 0, 0};
    if (d.kv_start && d.kv_start[d.batch] == 0) b.k = b.v = attn_layout{0, 0, 0};
    return b;
}

attn_status sdpa_forward(const char *fn, bool f32_only, attn_context *ctx,
                         const attn_sdpa_desc *d, const void *q, const void *k, const void *v,
                         void *out) {
    checker chk(fn);
    chk.not_null(d, "desc");
    if (chk.failed()) return chk.status();
    check_desc(chk, *d);
    if (f32_only) require_f32_types(chk, *d);
    reject_unbuilt_fields(chk, *d, false);
    if (chk.failed()) return chk.status();

    sdpa_tensors t = input_tensors(chk, *d, q, k, v, out, "out");
    if (chk.failed()) return chk.status();
    tensor_ref weights, lse;
    if (d->weights) weights = weights_tensor("desc->weights", d->weights, *d);
    if (d->lse) lse = lse_tensor("desc->lse", d->lse, *d);
    chk.span(weights);
    chk.span(lse);
    chk.injective(t.out, "desc->out");
    // Outputs: out, weights, lse. None may overlap an input or another output.
    chk.outputs_disjoint({&t.out, &weights, &lse},
                         {&t.q, &t.k, &t.v, &t.mask, &t.kv_len, &t.alibi_slopes, &t.sinks,
                          &t.block_table, &t.q_start, &t.kv_start});
    if (chk.failed()) return chk.status();

    attn::ops::sdpa(exec_for(context_or_default(ctx)), bounded_strides(*d), q, k, v, out);
    return ATTN_OK;
}

attn_status sdpa_backward(const char *fn, bool f32_only, attn_context *ctx,
                          const attn_sdpa_desc *d, const void *q, const void *k, const void *v,
                          const void *out, const void *dout, const float *lse, void *dq,
                          void *dk, void *dv) {
    checker chk(fn);
    chk.not_null(d, "desc");
    if (chk.failed()) return chk.status();
    check_desc(chk, *d);
    if (f32_only) require_f32_types(chk, *d);
    reject_unbuilt_fields(chk, *d, true);
    if (!chk.failed() && d->block_table)
        chk.fail(ATTN_UNSUPPORTED,
                 "desc->block_table = %p: paged K/V is forward only, the backward does not "
                 "support it (pass contiguous K/V)",
                 (const void *)d->block_table);
    if (chk.failed()) return chk.status();

    sdpa_tensors t = input_tensors(chk, *d, q, k, v, out, "out");
    chk.not_null(dout, "dout");
    chk.not_null(dq, "dq");
    chk.not_null(dk, "dk");
    chk.not_null(dv, "dv");
    if (chk.failed()) return chk.status();
    // dout has out's type, dq q's, dk and dv kv's (their elements' sizes)
    const int64_t q_bytes = int64_t(attn_dtype_size(d->q_type));
    const int64_t kv_bytes = int64_t(attn_dtype_size(d->kv_type));
    const int64_t out_bytes = int64_t(attn_dtype_size(d->out_type));
    tensor_ref t_dout = rows_tensor("dout", dout, d->q_start, d->batch, d->heads_q, d->len_q,
                                    d->dim_v, d->out, out_bytes);
    tensor_ref t_lse;
    if (lse) t_lse = lse_tensor("lse", lse, *d);
    // The gradients use the layouts of q, k, v (packed as they are), which must therefore be
    // injective.
    tensor_ref t_dq = rows_tensor("dq", dq, d->q_start, d->batch, d->heads_q, d->len_q,
                                  d->dim_qk, d->q, q_bytes);
    tensor_ref t_dk = rows_tensor("dk", dk, d->kv_start, d->batch, d->heads_kv, d->len_kv,
                                  d->dim_qk, d->k, kv_bytes);
    tensor_ref t_dv = rows_tensor("dv", dv, d->kv_start, d->batch, d->heads_kv, d->len_kv,
                                  d->dim_v, d->v, kv_bytes);
    tensor_ref t_dsinks;
    if (d->dsinks) t_dsinks = vector_tensor("desc->dsinks", d->dsinks, d->heads_q);
    for (tensor_ref *x : {&t_dout, &t_lse, &t_dq, &t_dk, &t_dv, &t_dsinks}) chk.span(*x);
    chk.injective(t_dq, "desc->q");
    chk.injective(t_dk, "desc->k");
    chk.injective(t_dv, "desc->v");
    chk.outputs_disjoint({&t_dq, &t_dk, &t_dv, &t_dsinks},
                         {&t.q, &t.k, &t.v, &t.out, &t_dout, &t_lse, &t.mask, &t.kv_len,
                          &t.alibi_slopes, &t.sinks, &t.q_start, &t.kv_start});
    if (chk.failed()) return chk.status();

    attn::ops::sdpa_backward_typed(exec_for(context_or_default(ctx)), bounded_strides(*d), q, k, v, out, dout,
                                   lse, dq, dk, dv);
    return ATTN_OK;
}

}  // namespace
}  // namespace attn::api

extern "C" {

void attn_sdpa_desc_init(attn_sdpa_desc *d, int64_t batch, int64_t heads, int64_t len_q,
                         int64_t len_kv, int64_t dim) {
    if (!d) return;
    *d = attn_sdpa_desc{};
    d->batch = batch;
    d->heads_q = d->heads_kv = heads;
    d->len_q = len_q;
    d->len_kv = len_kv;
    d->dim_qk = d->dim_v = dim;
    // Dense [batch, heads, seq, dim]. Products wrap like unsigned arithmetic instead of
    // overflowing: absurd sizes are reported by the compute call, not here.
    auto mul = [](int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); };
    const attn_layout q{mul(mul(heads, len_q), dim), mul(len_q, dim), dim};
    const attn_layout kv{mul(mul(heads, len_kv), dim), mul(len_kv, dim), dim};
    d->q = d->out = q;
    d->k = d->v = kv;
    d->scale = dim > 0 ? float(1.0 / std::sqrt(double(dim))) : 1.0f;
    d->causal = ATTN_CAUSAL_NONE;
    d->q_type = d->kv_type = d->out_type = ATTN_DTYPE_F32;
    d->window_left = d->window_right = -1;
    d->softcap = 0.0f;
    d->alibi_slopes = d->sinks = nullptr;
    d->dsinks = nullptr;
    d->block_table = nullptr;
    d->block_table_stride = d->page_size = d->num_pages = 0;
    d->q_start = d->kv_start = nullptr;
    d->k_scale = d->v_scale = d->k_zero = d->v_zero = nullptr;
    d->k_scale_strides = d->v_scale_strides = attn_layout{0, 0, 0};
    d->k_group = d->v_group = 0;
}

attn_status attn_sdpa_f32(attn_context *ctx, const attn_sdpa_desc *d, const float *q,
                          const float *k, const float *v, float *out) {
    static const char *const fn = "attn_sdpa_f32";
    return attn::api::guarded(fn,
                              [&] { return attn::api::sdpa_forward(fn, true, ctx, d, q, k, v, out); });
}

attn_status attn_sdpa(attn_context *ctx, const attn_sdpa_desc *d, const void *q, const void *k,
                      const void *v, void *out) {
    static const char *const fn = "attn_sdpa";
    return attn::api::guarded(
        fn, [&] { return attn::api::sdpa_forward(fn, false, ctx, d, q, k, v, out); });
}

attn_status attn_sdpa_backward_f32(attn_context *ctx, const attn_sdpa_desc *d, const float *q,
                                   const float *k, const float *v, const float *out,
                                   const float *dout, const float *lse, float *dq, float *dk,
                                   float *dv) {
    static const char *const fn = "attn_sdpa_backward_f32";
    return attn::api::guarded(fn, [&] {
        return attn::api::sdpa_backward(fn, true, ctx, d, q, k, v, out, dout, lse, dq, dk, dv);
    });
}

attn_status attn_sdpa_backward(attn_context *ctx, const attn_sdpa_desc *d, const void *q,
                               const void *k, const void *v, const void *out, const void *dout,
                               const float *lse, void *dq, void *dk, void *dv) {
    static const char *const fn = "attn_sdpa_backward";
    return attn::api::guarded(fn, [&] {
        return attn::api::sdpa_backward(fn, false, ctx, d, q, k, v, out, dout, lse, dq, dk, dv);
    });
}

}  // extern "C"
