// Argument validation of attn_sdpa_f32, attn_sdpa_backward_f32, attn_mha_forward_f32 and
// attn_mha_backward_f32: one case per rule, on the reference and the SIMD implementation
// (harness: test_api_harness.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "test_api_harness.hpp"

namespace {

using attn_test::rule_case;
using attn_test::tensor_pool;

constexpr int64_t kHuge = int64_t(1) << 40;

// ---------------------------------------------------------------------------------------
// sdpa: batch 2, heads_q 4, heads_kv 2 (grouped), len_q 3, len_kv 5, dim_qk 4, dim_v 3,
// with a mask broadcast over heads, kv_len, weights and lse.
struct sdpa_call {
    static constexpr const char *function = "attn_sdpa_f32";
    tensor_pool pool{2048};
    attn_sdpa_desc d = make_desc();
    attn_sdpa_desc *desc = &d;
    float *q = pool.input(2 * 4 * 3 * 4), *k = pool.input(2 * 2 * 5 * 4);
    float *v = pool.input(2 * 2 * 5 * 3), *out = pool.output(2 * 4 * 3 * 3);
    sdpa_call() {
        d.mask = pool.input(2 * 3 * 5);
        d.mask_strides = attn_layout{15, 0, 5};
        d.kv_len = pool.ints(2, 5);
        const_cast<int32_t *>(d.kv_len)[1] = 3;
        d.weights = pool.output(2 * 4 * 3 * 5);
        d.lse = pool.output(2 * 4 * 3);
    }
    static attn_sdpa_desc make_desc() {
        attn_sdpa_desc x;
        attn_sdpa_desc_init(&x, 2, 4, 3, 5, 4);
        x.heads_kv = 2;
        x.dim_v = 3;
        x.k = attn_layout{2 * 5 * 4, 5 * 4, 4};
        x.v = attn_layout{2 * 5 * 3, 5 * 3, 3};
        x.out = attn_layout{4 * 3 * 3, 3 * 3, 3};
        x.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        x.dropout_p = 0.25f;
        x.dropout_seed = 7;
        return x;
    }
    int32_t *kv_len() { return const_cast<int32_t *>(d.kv_len); }
    attn_status run(attn_context *ctx) { return attn_sdpa_f32(ctx, desc, q, k, v, out); }
};

// The rules on the desc shared by forward and backward.
template <class Call>
std::vector<rule_case<Call>> sdpa_desc_rules() {
    using c = Call;
    return {
        {"desc null", [](c &x) { x.desc = nullptr; }, {"desc = NULL"}},
        {"batch zero", [](c &x) { x.d.batch = 0; }, {"desc->batch = 0", ">= 1"}},
        {"heads_q negative", [](c &x) { x.d.heads_q = -1; }, {"desc->heads_q = -1"}},
        {"heads_kv zero", [](c &x) { x.d.heads_kv = 0; }, {"desc->heads_kv = 0"}},
        {"len_q negative", [](c &x) { x.d.len_q = -3; },
         {"desc->len_q = -3, must be >= 1"}},
        {"len_kv zero", [](c &x) { x.d.len_kv = 0; }, {"desc->len_kv = 0"}},
        {"dim_qk zero", [](c &x) { x.d.dim_qk = 0; }, {"desc->dim_qk = 0"}},
        {"dim_v zero", [](c &x) { x.d.dim_v = 0; }, {"desc->dim_v = 0"}},
        {"heads_q not a multiple of heads_kv", [](c &x) { x.d.heads_kv = 3; },
         {"desc->heads_q = 4", "multiple of desc->heads_kv = 3"}},
        {"q stride negative", [](c &x) { x.d.q.seq = -4; }, {"desc->q.seq = -4", ">= 0"}},
        {"k stride negative", [](c &x) { x.d.k.batch = -1; }, {"desc->k.batch = -1"}},
        {"v stride negative", [](c &x) { x.d.v.head = -15; }, {"desc->v.head = -15"}},
        {"out stride negative", [](c &x) { x.d.out.head = -2; }, {"desc->out.head = -2"}},
        {"mask stride negative", [](c &x) { x.d.mask_strides.batch = -15; },
         {"desc->mask_strides.batch = -15"}},
        {"scale NaN", [](c &x) { x.d.scale = std::nanf(""); }, {"desc->scale = nan"}},
        {"scale infinite", [](c &x) { x.d.scale = INFINITY; }, {"desc->scale = inf"}},
        {"causal unknown", [](c &x) { x.d.causal = attn_causal(4); }, {"desc->causal = 4"}},
        {"dropout_p one", [](c &x) { x.d.dropout_p = 1.0f; },
         {"desc->dropout_p = 1", "[0, 1)"}},
        {"dropout_p negative", [](c &x) { x.d.dropout_p = -0.125f; },
         {"desc->dropout_p = -0.125"}},
        {"dropout_p NaN", [](c &x) { x.d.dropout_p = std::nanf(""); },
         {"desc->dropout_p = nan"}},
        {"kv_len above len_kv", [](c &x) { x.kv_len()[1] = 6; },
         {"desc->kv_len[1] = 6", "desc->len_kv = 5"}},
        {"kv_len negative", [](c &x) { x.kv_len()[0] = -1; }, {"desc->kv_len[0] = -1"}},
        {"q null", [](c &x) { x.q = nullptr; }, {"q = NULL"}},
        {"k null", [](c &x) { x.k = nullptr; }, {"k = NULL"}},
        {"v null", [](c &x) { x.v = nullptr; }, {"v = NULL"}},
        {"out null", [](c &x) { x.out = nullptr; }, {"out = NULL"}},
        {"element count overflows", [](c &x) { x.d.len_q = kHuge, x.d.dim_qk = kHuge; },
         {"desc->batch * desc->heads_q * desc->len_q * desc->dim_qk", "overflows int64"}},
        {"extent of k overflows", [](c &x) { x.d.k.batch = int64_t(1) << 62; },
         {"k = [size 2 stride 4611686018427387904", "overflows"}},
        // masks and layouts of today's models
        {"window_left below -1", [](c &x) { x.d.window_left = -2; },
         {"desc->window_left = -2", ">= -1"}},
        {"window_right below -1", [](c &x) { x.d.window_right = -5; },
         {"desc->window_right = -5", ">= -1"}},
        {"softcap negative", [](c &x) { x.d.softcap = -1.0f; },
         {"desc->softcap = -1", "finite and >= 0"}},
        {"softcap NaN", [](c &x) { x.d.softcap = std::nanf(""); }, {"desc->softcap = nan"}},
        {"softcap infinite", [](c &x) { x.d.softcap = INFINITY; }, {"desc->softcap = inf"}},
        {"KV_LEN alignment without kv_len",
         [](c &x) { x.d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN, x.d.kv_len = nullptr; },
         {"desc->causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN (3)", "needs desc->kv_len"}},
        {"ALiBi slope NaN",
         [](c &x) {
             float *slopes = x.pool.input(4);
             slopes[2] = std::nanf("");
             x.d.alibi_slopes = slopes;
         },
         {"desc->alibi_slopes[2] = nan", "finite"}},
        {"ALiBi slope infinite",
         [](c &x) {
             float *slopes = x.pool.input(4);
             slopes[0] = -INFINITY;
             x.d.alibi_slopes = slopes;
         },
         {"desc->alibi_slopes[0] = -inf"}},
        {"sink NaN",
         [](c &x) {
             float *sinks = x.pool.input(4);
             sinks[3] = std::nanf("");
             x.d.sinks = sinks;
         },
         {"desc->sinks[3] = nan", "finite or -INFINITY"}},
        {"sink +inf",
         [](c &x) {
             float *sinks = x.pool.input(4);
             sinks[1] = INFINITY;
             x.d.sinks = sinks;
         },
         {"desc->sinks[1] = inf"}},
        {"dsinks without sinks", [](c &x) { x.d.dsinks = x.pool.output(4); },
         {"desc->dsinks = ", "desc->sinks is NULL"}},
    };
}

// Paged K/V over the call's K and V: page_size 5, one page per batch (pages 0 and 1 of a
// pool of 2), so that the valid call is the contiguous one.
template <class Call>
void make_paged(Call &x) {
    int32_t *table = x.pool.ints(2, 0);
    table[1] = 1;
    x.d.block_table = table;
    x.d.block_table_stride = 1;
    x.d.page_size = 5;
    x.d.num_pages = 2;
}

std::vector<rule_case<sdpa_call>> sdpa_forward_rules() {
    using c = sdpa_call;
    auto rules = sdpa_desc_rules<c>();
    const std::vector<rule_case<c>> own = {
        {"weights size overflows",
         [](c &x) { x.d.len_q = x.d.len_kv = int64_t(1) << 32; },
         {"desc->batch * desc->heads_q * desc->len_q * desc->len_kv", "overflows"}},
        {"out rows overlap (seq stride below dim_v)", [](c &x) { x.d.out.seq = 2; },
         {"desc->out.seq = 2", "must be >= 3", "distinct elements of out"}},
        {"out heads alias (head stride 0)", [](c &x) { x.d.out.head = 0; },
         {"desc->out.head = 0"}},
        {"out batches interleave with heads", [](c &x) { x.d.out.batch = 18; },
         {"desc->out.batch = 18", "must be >= 36"}},
        {"out is q", [](c &x) { x.out = x.q; }, {"out = ", "overlaps q = "}},
        {"out overlaps k", [](c &x) { x.out = x.k + 30; }, {"out = ", "overlaps k = "}},
        {"out overlaps v", [](c &x) { x.out = x.v + 59; }, {"out = ", "overlaps v = "}},
        {"out overlaps the mask", [](c &x) { x.out = const_cast<float *>(x.d.mask) + 1; },
         {"out = ", "overlaps desc->mask = "}},
        {"out overlaps kv_len", [](c &x) { x.out = reinterpret_cast<float *>(x.kv_len()) - 3; },
         {"out = ", "overlaps desc->kv_len = "}},
        {"weights overlap out", [](c &x) { x.d.weights = x.out + 71; },
         {"out = ", "overlaps desc->weights = "}},
        {"lse overlaps q", [](c &x) { x.d.lse = x.q + 95; },
         {"desc->lse = ", "overlaps q = "}},
        {"lse inside weights", [](c &x) { x.d.lse = x.d.weights + 100; },
         {"desc->weights = ", "overlaps desc->lse = "}},
        {"page_size zero", [](c &x) { make_paged(x), x.d.page_size = 0; },
         {"desc->page_size = 0", ">= 1"}},
        {"num_pages zero", [](c &x) { make_paged(x), x.d.num_pages = 0; },
         {"desc->num_pages = 0", ">= 1"}},
        {"block_table_stride below ceil(len_kv / page_size)",
         [](c &x) { make_paged(x), x.d.page_size = 2; },
         {"desc->block_table_stride = 1", "ceil(desc->len_kv / desc->page_size) = 3"}},
        {"page id past num_pages",
         [](c &x) { make_paged(x), const_cast<int32_t *>(x.d.block_table)[1] = 2; },
         {"desc->block_table[1 * 1 + 0] = 2 (batch 1, entry 0)", "[0, desc->num_pages = 2)"}},
        {"page id negative",
         [](c &x) { make_paged(x), const_cast<int32_t *>(x.d.block_table)[0] = -1; },
         {"desc->block_table[0 * 1 + 0] = -1 (batch 0, entry 0)"}},
        {"paged pool span: num_pages pages, not len_kv rows",
         [](c &x) { make_paged(x), x.d.num_pages = int64_t(1) << 61, x.d.k.batch = 64; },
         {"k = [size 2305843009213693952 stride 64", "overflows"}},
        {"out overlaps the block table",
         [](c &x) {
             make_paged(x);
             x.out = reinterpret_cast<float *>(const_cast<int32_t *>(x.d.block_table));
         },
         {"out = ", "overlaps desc->block_table = "}},
        {"out overlaps the sinks", [](c &x) { x.d.sinks = x.out + 4; },
         {"out = ", "overlaps desc->sinks = "}},
    };
    rules.insert(rules.end(), own.begin(), own.end());
    return rules;
}

// ---------------------------------------------------------------------------------------
// sdpa backward: the forward's desc and inputs, plus out/dout/lse inputs and dq/dk/dv.
struct sdpa_backward_call : sdpa_call {
    static constexpr const char *function = "attn_sdpa_backward_f32";
    const float *fwd_out = pool.input(2 * 4 * 3 * 3), *dout = pool.input(2 * 4 * 3 * 3);
    const float *lse_in = pool.input(2 * 4 * 3);
    float *dq = pool.output(2 * 4 * 3 * 4), *dk = pool.output(2 * 2 * 5 * 4);
    float *dv = pool.output(2 * 2 * 5 * 3);
    sdpa_backward_call() { d.weights = nullptr, d.lse = nullptr; }
    // The forward's output (fwd_out) is an input here; the inherited `out` is not passed.
    attn_status run(attn_context *ctx) {
        return attn_sdpa_backward_f32(ctx, desc, q, k, v, fwd_out, dout, lse_in, dq, dk, dv);
    }
};

std::vector<rule_case<sdpa_backward_call>> sdpa_backward_rules() {
    using c = sdpa_backward_call;
    auto rules = sdpa_desc_rules<c>();
    // "out null" from the shared list nulls the slot the backward does not read; redo it.
    rules.erase(std::remove_if(rules.begin(), rules.end(),
                               [](const rule_case<c> &r) { return r.name == "out null"; }),
                rules.end());
    const std::vector<rule_case<c>> own = {
        {"out null", [](c &x) { x.fwd_out = nullptr; }, {"out = NULL"}},
        {"dout null", [](c &x) { x.dout = nullptr; }, {"dout = NULL"}},
        {"dq null", [](c &x) { x.dq = nullptr; }, {"dq = NULL"}},
        {"dk null", [](c &x) { x.dk = nullptr; }, {"dk = NULL"}},
        {"dv null", [](c &x) { x.dv = nullptr; }, {"dv = NULL"}},
        {"q layout not injective (dq)", [](c &x) { x.d.q.seq = 1; },
         {"desc->q.seq = 1", "distinct elements of dq"}},
        {"k layout not injective (dk)", [](c &x) { x.d.k.head = 0; },
         {"desc->k.head = 0", "distinct elements of dk"}},
        {"dk is dq", [](c &x) { x.dk = x.dq; }, {"dq = ", "overlaps dk = "}},
        {"dsinks overlap dq",
         [](c &x) { x.d.sinks = x.pool.input(4), x.d.dsinks = x.dq + 2; },
         {"dq = ", "overlaps desc->dsinks = "}},
        {"dsinks overlap the sinks",
         [](c &x) {
             float *sinks = x.pool.output(4);
             x.d.sinks = sinks, x.d.dsinks = sinks;
         },
         {"desc->dsinks = ", "overlaps desc->sinks = "}},
        {"dv overlaps dk", [](c &x) { x.dv = x.dk + 79; }, {"dk = ", "overlaps dv = "}},
        {"dv is the forward output", [](c &x) { x.dv = const_cast<float *>(x.fwd_out); },
         {"dv = ", "overlaps out = "}},
        {"dq overlaps dout", [](c &x) { x.dq = const_cast<float *>(x.dout) + 10; },
         {"dq = ", "overlaps dout = "}},
        {"dq overlaps lse", [](c &x) { x.dq = const_cast<float *>(x.lse_in) + 23; },
         {"dq = ", "overlaps lse = "}},
        {"dk overlaps v", [](c &x) { x.dk = x.v; }, {"dk = ", "overlaps v = "}},
        {"dv overlaps the mask", [](c &x) { x.dv = const_cast<float *>(x.d.mask); },
         {"dv = ", "overlaps desc->mask = "}},
    };
    rules.insert(rules.end(), own.begin(), own.end());
    return rules;
}

// ---------------------------------------------------------------------------------------
// mha: batch 2, len_q 3, len_kv 4, d_model 8, heads 4, heads_kv 2, head_dim 2, all biases.
struct mha_call {
    static constexpr const char *function = "attn_mha_forward_f32";
    tensor_pool pool{2048};
    attn_mha_desc d{};
    attn_mha_desc *desc = &d;
    const float *x_q = pool.input(2 * 3 * 8), *x_kv = pool.input(2 * 4 * 8);
    float *y = pool.output(2 * 3 * 8);
    mha_call() {
        attn_mha_desc_init(&d, 2, 3, 4, 8, 4);
        d.heads_kv = 2;
        d.w_q = pool.input(8 * 8);
        d.w_k = pool.input(4 * 8);
        d.w_v = pool.input(4 * 8);
        d.w_o = pool.input(8 * 8);
        d.b_q = pool.input(8);
        d.b_k = pool.input(4);
        d.b_v = pool.input(4);
        d.b_o = pool.input(8);
        d.kv_len = pool.ints(2, 4);
        d.causal = ATTN_CAUSAL_TOP_LEFT;
    }
    int32_t *kv_len() { return const_cast<int32_t *>(d.kv_len); }
    attn_status run(attn_context *ctx) { return attn_mha_forward_f32(ctx, desc, x_q, x_kv, y); }
};

template <class Call>
std::vector<rule_case<Call>> mha_desc_rules() {
    using c = Call;
    return {
        {"desc null", [](c &x) { x.desc = nullptr; }, {"desc = NULL"}},
        {"batch zero", [](c &x) { x.d.batch = 0; }, {"desc->batch = 0"}},
        {"len_q negative", [](c &x) { x.d.len_q = -2; }, {"desc->len_q = -2"}},
        {"len_kv zero", [](c &x) { x.d.len_kv = 0; }, {"desc->len_kv = 0"}},
        {"d_model zero", [](c &x) { x.d.d_model = 0; }, {"desc->d_model = 0"}},
        {"heads zero", [](c &x) { x.d.heads = 0; }, {"desc->heads = 0"}},
        {"heads_kv zero", [](c &x) { x.d.heads_kv = 0; }, {"desc->heads_kv = 0"}},
        {"head_dim zero", [](c &x) { x.d.head_dim = 0; }, {"desc->head_dim = 0"}},
        {"d_model not divisible by heads at init",
         [](c &x) {
             attn_mha_desc_init(&x.d, 2, 3, 4, 10, 4);
             x.d.w_q = x.d.w_k = x.d.w_v = x.d.w_o = x.x_q;
         },
         {"desc->head_dim = 0", ">= 1"}},
        {"heads not a multiple of heads_kv", [](c &x) { x.d.heads_kv = 3; },
         {"desc->heads = 4", "multiple of desc->heads_kv = 3"}},
        {"causal unknown", [](c &x) { x.d.causal = attn_causal(-1); }, {"desc->causal = -1"}},
        {"dropout_p above one", [](c &x) { x.d.dropout_p = 1.5f; }, {"desc->dropout_p = 1.5"}},
        {"kv_len above len_kv", [](c &x) { x.kv_len()[0] = 5; },
         {"desc->kv_len[0] = 5", "desc->len_kv = 4"}},
        {"w_q null", [](c &x) { x.d.w_q = nullptr; }, {"desc->w_q = NULL"}},
        {"w_k null", [](c &x) { x.d.w_k = nullptr; }, {"desc->w_k = NULL"}},
        {"w_v null", [](c &x) { x.d.w_v = nullptr; }, {"desc->w_v = NULL"}},
        {"w_o null", [](c &x) { x.d.w_o = nullptr; }, {"desc->w_o = NULL"}},
        {"x_q null", [](c &x) { x.x_q = nullptr; }, {"x_q = NULL"}},
        {"x_kv null", [](c &x) { x.x_kv = nullptr; }, {"x_kv = NULL"}},
        {"size product overflows", [](c &x) { x.d.d_model = kHuge, x.d.len_q = kHuge; },
         {"desc->batch * desc->len_q * desc->d_model", "overflows int64"}},
    };
}

std::vector<rule_case<mha_call>> mha_forward_rules() {
    using c = mha_call;
    auto rules = mha_desc_rules<c>();
    const std::vector<rule_case<c>> own = {
        {"y null", [](c &x) { x.y = nullptr; }, {"y = NULL"}},
        {"y is x_q", [](c &x) { x.y = const_cast<float *>(x.x_q); }, {"y = ", "overlaps x_q = "}},
        {"y overlaps w_o", [](c &x) { x.y = const_cast<float *>(x.d.w_o) + 40; },
         {"y = ", "overlaps desc->w_o = "}},
        {"y overlaps b_k", [](c &x) { x.y = const_cast<float *>(x.d.b_k) - 10; },
         {"y = ", "overlaps desc->b_k = "}},
    };
    rules.insert(rules.end(), own.begin(), own.end());
    return rules;
}

struct mha_backward_call : mha_call {
    static constexpr const char *function = "attn_mha_backward_f32";
    const float *dy = pool.input(2 * 3 * 8);
    float *dx_q = pool.output(2 * 3 * 8), *dx_kv = pool.output(2 * 4 * 8);
    attn_mha_grads g{};
    mha_backward_call() {
        g.dw_q = pool.output(64), g.dw_k = pool.output(32), g.dw_v = pool.output(32);
        g.dw_o = pool.output(64);
        g.db_q = pool.output(8), g.db_k = pool.output(4), g.db_v = pool.output(4);
        g.db_o = pool.output(8);
    }
    attn_status run(attn_context *ctx) {
        return attn_mha_backward_f32(ctx, desc, x_q, x_kv, dy, dx_q, dx_kv, &g);
    }
};

std::vector<rule_case<mha_backward_call>> mha_backward_rules() {
    using c = mha_backward_call;
    auto rules = mha_desc_rules<c>();
    const std::vector<rule_case<c>> own = {
        {"dy null", [](c &x) { x.dy = nullptr; }, {"dy = NULL"}},
        {"dx_kv is dx_q", [](c &x) { x.dx_kv = x.dx_q; }, {"dx_q = ", "overlaps dx_kv = "}},
        {"dx_q overlaps w_k", [](c &x) { x.dx_q = const_cast<float *>(x.d.w_k) + 31; },
         {"dx_q = ", "overlaps desc->w_k = "}},
        {"dw_q is x_q", [](c &x) { x.g.dw_q = const_cast<float *>(x.x_q); },
         {"g->dw_q = ", "overlaps x_q = "}},
        {"db_o overlaps dy", [](c &x) { x.g.db_o = const_cast<float *>(x.dy) + 44; },
         {"g->db_o = ", "overlaps dy = "}},
        {"db_v overlaps dw_v", [](c &x) { x.g.db_v = x.g.dw_v + 30; },
         {"g->dw_v = ", "overlaps g->db_v = "}},
        {"db_k inside b_o", [](c &x) { x.g.db_k = const_cast<float *>(x.d.b_o) + 2; },
         {"g->db_k = ", "overlaps desc->b_o = "}},
        // dx_q without dx_kv claims the whole input gradient: only for one sequence.
        {"dx_kv null, x_kv == x_q with len_kv > len_q",
         [](c &x) { x.x_kv = x.x_q, x.dx_kv = nullptr; },
         {"dx_kv = NULL", "x_kv == x_q", "desc->len_kv = 4", "desc->len_q = 3"}},
        {"dx_kv null, x_kv == x_q with len_kv < len_q",
         [](c &x) { x.x_kv = x.x_q, x.dx_kv = nullptr, x.d.len_kv = 2, x.d.kv_len = nullptr; },
         {"dx_kv = NULL", "desc->len_kv = 2", "desc->len_q = 3"}},
    };
    rules.insert(rules.end(), own.begin(), own.end());
    return rules;
}

// ---------------------------------------------------------------------------------------

class ApiValidationAttention : public testing::TestWithParam<attn_test::path> {
protected:
    void SetUp() override {
        ctx_ = attn_test::make_context(GetParam().impl, GetParam().isa);
        ASSERT_TRUE(ctx_) << attn_last_error();
    }
    attn_test::context_ptr ctx_;
};

TEST_P(ApiValidationAttention, SdpaRules) {
    attn_test::expect_baseline_writes<sdpa_call>(ctx_.get());
    for (const auto &rule : sdpa_forward_rules()) attn_test::expect_rejected(ctx_.get(), rule);
}

TEST_P(ApiValidationAttention, SdpaBackwardRules) {
    attn_test::expect_baseline_writes<sdpa_backward_call>(ctx_.get());
    for (const auto &rule : sdpa_backward_rules()) attn_test::expect_rejected(ctx_.get(), rule);
}

TEST_P(ApiValidationAttention, MhaForwardRules) {
    attn_test::expect_baseline_writes<mha_call>(ctx_.get());
    for (const auto &rule : mha_forward_rules()) attn_test::expect_rejected(ctx_.get(), rule);
}

TEST_P(ApiValidationAttention, MhaBackwardRules) {
    attn_test::expect_baseline_writes<mha_backward_call>(ctx_.get());
    for (const auto &rule : mha_backward_rules()) attn_test::expect_rejected(ctx_.get(), rule);
}

// Layouts the rules must accept: BSHD output, and a K/V cache with capacity > len_kv and a
// mask broadcast with stride 0 (strides only need to keep the output injective).
TEST_P(ApiValidationAttention, SdpaAcceptsStridedLayouts) {
    const int64_t B = 2, H = 3, L = 4, D = 5, capacity = 9;
    std::vector<float> q(B * L * H * D, 0.5f), kv(B * H * capacity * D, 0.25f);
    std::vector<float> out(B * L * H * D, attn_test::kSentinel), mask(L * L, 0.0f);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, L, L, D);
    d.q = d.out = attn_layout{L * H * D, D, H * D};     // BSHD
    d.k = d.v = attn_layout{H * capacity * D, capacity * D, D};  // cache rows beyond L unused
    d.mask = mask.data();
    d.mask_strides = attn_layout{0, 0, L};
    ASSERT_EQ(attn_sdpa_f32(ctx_.get(), &d, q.data(), kv.data(), kv.data(), out.data()), ATTN_OK)
        << attn_last_error();
    for (float x : out) EXPECT_FLOAT_EQ(x, 0.25f);  // every value row is 0.25
}

// Paged K/V: the entries past the pages in use are never read (a garbage id there is
// accepted), the valid paged call gives the contiguous call's bits, and the backward of a
// paged call is ATTN_UNSUPPORTED, saying so, with nothing written.
TEST_P(ApiValidationAttention, PagedEntriesInUseOnlyAndBackwardUnsupported) {
    sdpa_call plain;
    ASSERT_EQ(plain.run(ctx_.get()), ATTN_OK) << attn_last_error();
    sdpa_call paged;
    int32_t *table = paged.pool.ints(4, 0);  // page_size 5, stride 2: entry 1 never used
    table[1] = 1 << 30, table[2] = 1, table[3] = -7;
    paged.d.block_table = table;
    paged.d.block_table_stride = 2;
    paged.d.page_size = 5;
    paged.d.num_pages = 2;
    ASSERT_EQ(paged.run(ctx_.get()), ATTN_OK) << attn_last_error();
    EXPECT_EQ(std::memcmp(plain.out, paged.out, sizeof(float) * 2 * 4 * 3 * 3), 0);
    EXPECT_EQ(std::memcmp(plain.d.lse, paged.d.lse, sizeof(float) * 2 * 4 * 3), 0);

    sdpa_backward_call back;
    make_paged(back);
    const std::string before = back.pool.snapshot();
    EXPECT_EQ(back.run(ctx_.get()), ATTN_UNSUPPORTED);
    EXPECT_NE(std::string(attn_last_error()).find("paged K/V is forward only"), std::string::npos)
        << attn_last_error();
    EXPECT_TRUE(back.pool.snapshot() == before);
}

// Self-attention: x_kv == x_q is fine, and dx_kv may be NULL; g NULL means no weight grads.
TEST_P(ApiValidationAttention, MhaSelfAttentionArgumentsAccepted) {
    mha_backward_call call;
    call.x_kv = call.x_q;
    call.d.len_kv = call.d.len_q;
    call.d.kv_len = nullptr;
    EXPECT_EQ(attn_mha_backward_f32(ctx_.get(), call.desc, call.x_q, call.x_q, call.dy, call.dx_q,
                                    nullptr, nullptr),
              ATTN_OK)
        << attn_last_error();
    EXPECT_NE(call.dx_q[0], attn_test::kSentinel);
}

// Cross-attention with neither input gradient (weights only): nothing is lost, accepted;
// the weight gradients are written and the two NULL outputs need no memory.
TEST_P(ApiValidationAttention, MhaCrossAttentionWithoutInputGradientsAccepted) {
    mha_backward_call call;
    ASSERT_NE(call.x_kv, call.x_q);
    EXPECT_EQ(attn_mha_backward_f32(ctx_.get(), call.desc, call.x_q, call.x_kv, call.dy, nullptr,
                                    nullptr, &call.g),
              ATTN_OK)
        << attn_last_error();
    EXPECT_NE(call.g.dw_k[0], attn_test::kSentinel);
}

INSTANTIATE_TEST_SUITE_P(Impl, ApiValidationAttention,
                         testing::ValuesIn(attn_test::validation_paths()), attn_test::path_name);

}  // namespace
