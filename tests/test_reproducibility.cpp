// Reproducibility: with a given implementation and ISA, every op gives bitwise identical
// results for 1, 2, 3 and 4 threads and on every repeated run, including decode shapes
// (one query against a long KV cache, where the keys are split across threads) and the
// backward passes. Shapes are large enough that every op actually runs in parallel.
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::random_tensor;
using floats = std::vector<float>;

// One call: fills its outputs (concatenated) from fixed inputs.
struct op_case {
    std::string name;
    size_t out_size;
    std::function<attn_status(attn_context *, float *)> run;
};

op_case gemm_case(attn_trans ta, attn_trans tb, int64_t m, int64_t n, int64_t k) {
    auto a = random_tensor(size_t(m * k), 1), b = random_tensor(size_t(k * n), 2), c0 = random_tensor(size_t(m * n), 3);
    int64_t lda = ta == ATTN_TRANS ? m : k, ldb = tb == ATTN_TRANS ? k : n;
    return {"gemm_" + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k), c0.size(),
            [=](attn_context *ctx, float *out) {
                std::memcpy(out, c0.data(), c0.size() * sizeof(float));
                return attn_gemm_f32(ctx, ta, tb, m, n, k, 1.25f, a.data(), lda, b.data(), ldb, -0.5f, out, n);
            }};
}

struct sdpa_options {
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim;
    attn_causal causal = ATTN_CAUSAL_NONE;
    float dropout = 0.0f;
    bool mask = false, kv_len = false;
};

// Forward (out, weights when len_kv is small, lse) and backward (dq, dk, dv) cases.
std::vector<op_case> sdpa_cases(const std::string &name, const sdpa_options &o) {
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, o.batch, o.heads_q, o.len_q, o.len_kv, o.dim);
    d.heads_kv = o.heads_kv;
    d.k = d.v = attn_layout{o.heads_kv * o.len_kv * o.dim, o.len_kv * o.dim, o.dim};
    d.causal = o.causal;
    d.dropout_p = o.dropout;
    d.dropout_seed = 1234;
    size_t nq = size_t(o.batch * o.heads_q * o.len_q * o.dim), nkv = size_t(o.batch * o.heads_kv * o.len_kv * o.dim);
    size_t nl = size_t(o.batch * o.heads_q * o.len_q);
    size_t nw = o.len_kv <= 512 ? nl * size_t(o.len_kv) : 0;
    auto q = random_tensor(nq, 4), k = random_tensor(nkv, 5), v = random_tensor(nkv, 6), dout = random_tensor(nq, 7);
    auto mask = std::make_shared<floats>(random_tensor(size_t(o.len_q * o.len_kv), 8));
    auto kv_len = std::make_shared<std::vector<int32_t>>();
    for (int64_t b = 0; b < o.batch; ++b) kv_len->push_back(int32_t(o.len_kv - (b * 37) % o.len_kv));
    if (o.mask) d.mask = mask->data(), d.mask_strides = attn_layout{0, 0, o.len_kv};
    if (o.kv_len) d.kv_len = kv_len->data();

    // The backward's out and lse: one reference forward, shared by every run.
    auto ref = attn_test::make_context(ATTN_IMPL_REFERENCE);
    floats out(nq), lse(nl);
    attn_sdpa_desc fd = d;
    fd.lse = lse.data();
    EXPECT_EQ(attn_sdpa_f32(ref.get(), &fd, q.data(), k.data(), v.data(), out.data()), ATTN_OK) << attn_last_error();

    std::vector<op_case> cases;
    cases.push_back({"sdpa_" + name, nq + nw + nl, [=](attn_context *ctx, float *o_) {
                         (void)mask, (void)kv_len;  // d points into them
                         attn_sdpa_desc dd = d;
                         dd.weights = nw ? o_ + nq : nullptr;
                         dd.lse = o_ + nq + nw;
                         return attn_sdpa_f32(ctx, &dd, q.data(), k.data(), v.data(), o_);
                     }});
    cases.push_back({"sdpa_backward_" + name, nq + 2 * nkv, [=](attn_context *ctx, float *o_) {
                         (void)mask, (void)kv_len;
                         return attn_sdpa_backward_f32(ctx, &d, q.data(), k.data(), v.data(), out.data(), dout.data(),
                                                       lse.data(), o_, o_ + nq, o_ + nq + nkv);
                     }});
    return cases;
}

std::vector<op_case> mha_cases() {
    const int64_t batch = 2, len_q = 33, len_kv = 47, d_model = 64, heads = 8, heads_kv = 4, head_dim = 8;
    attn_mha_desc d;
    attn_mha_desc_init(&d, batch, len_q, len_kv, d_model, heads);
    d.heads_kv = heads_kv;
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    d.dropout_p = 0.1f;
    d.dropout_seed = 77;
    auto w = std::make_shared<std::vector<floats>>();
    for (int64_t size : {heads * head_dim * d_model, heads_kv * head_dim * d_model, heads_kv * head_dim * d_model,
                         d_model * heads * head_dim})
        w->push_back(random_tensor(size_t(size), uint32_t(10 + w->size()), -0.3f, 0.3f));
    auto b = std::make_shared<floats>(random_tensor(size_t(d_model), 20));
    d.w_q = (*w)[0].data(), d.w_k = (*w)[1].data(), d.w_v = (*w)[2].data(), d.w_o = (*w)[3].data();
    d.b_o = b->data();
    auto x_q = random_tensor(size_t(batch * len_q * d_model), 21), x_kv = random_tensor(size_t(batch * len_kv * d_model), 22);
    auto dy = random_tensor(x_q.size(), 23);
    size_t nw_q = (*w)[0].size(), nw_kv = (*w)[1].size();
    std::vector<op_case> cases;
    cases.push_back({"mha_forward", x_q.size(), [=](attn_context *ctx, float *o) {
                         (void)w, (void)b;
                         return attn_mha_forward_f32(ctx, &d, x_q.data(), x_kv.data(), o);
                     }});
    cases.push_back({"mha_backward", x_q.size() + x_kv.size() + 2 * nw_q + 2 * nw_kv + size_t(d_model),
                     [=](attn_context *ctx, float *o) {
                         (void)w, (void)b;
                         float *g0 = o + x_q.size() + x_kv.size();
                         attn_mha_grads g{g0, g0 + nw_q, g0 + nw_q + nw_kv, g0 + nw_q + 2 * nw_kv,
                                          nullptr, nullptr, nullptr, g0 + 2 * nw_q + 2 * nw_kv};
                         return attn_mha_backward_f32(ctx, &d, x_q.data(), x_kv.data(), dy.data(), o, o + x_q.size(), &g);
                     }});
    return cases;
}

std::vector<op_case> all_cases() {
    std::vector<op_case> cases;
    cases.push_back(gemm_case(ATTN_NO_TRANS, ATTN_NO_TRANS, 257, 131, 300));
    cases.push_back(gemm_case(ATTN_TRANS, ATTN_TRANS, 96, 200, 65));
    auto x = random_tensor(300 * 517, 30);
    cases.push_back({"softmax", x.size(), [=](attn_context *ctx, float *o) {
                         return attn_softmax_f32(ctx, 300, 517, 0.3f, x.data(), 517, o, 517);
                     }});
    sdpa_options prefill{2, 4, 4, 130, 130, 64};
    sdpa_options gqa{1, 8, 2, 77, 300, 32, ATTN_CAUSAL_BOTTOM_RIGHT, 0.2f, true, false};
    sdpa_options decode{2, 8, 2, 1, 5000, 64};  // one query, a long cache: keys split across threads
    decode.kv_len = true;
    sdpa_options decode_few{1, 2, 1, 3, 2000, 32, ATTN_CAUSAL_TOP_LEFT};
    for (auto &[name, o] : std::vector<std::pair<std::string, sdpa_options>>{
             {"prefill", prefill}, {"gqa_masked_dropout", gqa}, {"decode", decode}, {"decode_3_queries", decode_few}})
        for (auto &c : sdpa_cases(name, o)) cases.push_back(c);
    for (auto &c : mha_cases()) cases.push_back(c);
    std::vector<floats> outs, lses;
    for (int p = 0; p < 4; ++p) outs.push_back(random_tensor(200 * 48, 40 + p)), lses.push_back(random_tensor(200, 50 + p));
    cases.push_back({"merge", 200 * 49, [=](attn_context *ctx, float *o) {
                         const float *op[4], *lp[4];
                         for (int p = 0; p < 4; ++p) op[p] = outs[p].data(), lp[p] = lses[p].data();
                         return attn_merge_f32(ctx, 4, 200, 48, op, lp, o, o + 200 * 48);
                     }});
    return cases;
}

class reproducibility : public testing::TestWithParam<attn_test::path> {};

TEST_P(reproducibility, bitwise_identical_across_thread_counts_and_runs) {
    ATTN_SKIP_UNLESS_THREADS(2);
    const auto cases = all_cases();
    std::vector<floats> first(cases.size());
    for (int threads = 1; threads <= 4; ++threads) {
        auto ctx = attn_test::make_context(GetParam().impl, GetParam().isa, threads);
        ASSERT_TRUE(ctx);
        for (size_t i = 0; i < cases.size(); ++i)
            for (int run = 0; run < 2; ++run) {
                floats out(cases[i].out_size, -3.0f);
                ASSERT_EQ(cases[i].run(ctx.get(), out.data()), ATTN_OK) << cases[i].name << ": " << attn_last_error();
                if (first[i].empty()) {
                    first[i] = out;
                    continue;
                }
                size_t differ = 0;
                for (size_t e = 0; e < out.size(); ++e) differ += std::memcmp(&out[e], &first[i][e], sizeof(float)) != 0;
                EXPECT_EQ(differ, 0u) << cases[i].name << " with " << threads << " threads, run " << run
                                      << ": elements differing bitwise from 1 thread";
            }
    }
}

INSTANTIATE_TEST_SUITE_P(all, reproducibility, testing::ValuesIn(attn_test::all_paths()), attn_test::path_name);

}  // namespace
