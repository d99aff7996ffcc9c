// Multi-head attention (GEMM projections around the fused attention) on every path, the
// reference included, per ISA. For y and for every gradient, with e(x) = max |x - exact| /
// (1 + |exact|) against the float64 MHA of test_precision_plain.hpp (GQA, dropout, zero
// biases for a layer without them):
//   e(path) <= 2 * e(plain) + 1e-5,
// plain the same layer in plain float32. The 1e-5 floor (about 80 float ulps at 1): values and
// gradients are sums of up to a few hundred f32 products, taken here in another order.
// Forward and backward are bitwise identical for 1, 2 and 3 threads.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "test_precision_plain.hpp"
#include "test_util.hpp"

namespace {

using attn_test::random_tensor;
constexpr double floor_tolerance = 1e-5;

struct mha_case {
    std::string name;
    int64_t batch, len_q, len_kv, d_model, heads, heads_kv;
    attn_causal causal = ATTN_CAUSAL_NONE;
    bool biases = true, self_attention = false;
    std::vector<int32_t> kv_len;
    float dropout = 0.0f;
};

struct mha_problem {
    attn_mha_desc d;
    std::vector<float> x_q, x_kv, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, dy;
    bool self_attention;
    explicit mha_problem(const mha_case &c) : self_attention(c.self_attention) {
        attn_mha_desc_init(&d, c.batch, c.len_q, c.len_kv, c.d_model, c.heads);
        d.heads_kv = c.heads_kv;
        const int64_t hd = d.head_dim, wq = c.heads * hd, wkv = c.heads_kv * hd;
        const float ws = 1.0f / std::sqrt(float(c.d_model));
        x_q = random_tensor(size_t(c.batch * c.len_q * c.d_model), 31);
        x_kv = c.self_attention ? x_q : random_tensor(size_t(c.batch * c.len_kv * c.d_model), 32);
        w_q = random_tensor(size_t(wq * c.d_model), 33, -ws, ws);
        w_k = random_tensor(size_t(wkv * c.d_model), 34, -ws, ws);
        w_v = random_tensor(size_t(wkv * c.d_model), 35, -ws, ws);
        w_o = random_tensor(size_t(c.d_model * wq), 36, -ws, ws);
        d.w_q = w_q.data();
        d.w_k = w_k.data();
        d.w_v = w_v.data();
        d.w_o = w_o.data();
        if (c.biases) {
            b_q = random_tensor(size_t(wq), 37);
            b_k = random_tensor(size_t(wkv), 38);
            b_v = random_tensor(size_t(wkv), 39);
            b_o = random_tensor(size_t(c.d_model), 40);
            d.b_q = b_q.data();
            d.b_k = b_k.data();
            d.b_v = b_v.data();
            d.b_o = b_o.data();
        }
        d.causal = c.causal;
        if (!c.kv_len.empty()) d.kv_len = c.kv_len.data();
        d.dropout_p = c.dropout;
        d.dropout_seed = 9;
        dy = random_tensor(size_t(c.batch * c.len_q * c.d_model), 41);
    }
    // Self-attention passes x_q itself as x_kv: one sequence, so dx_q may hold the whole
    // input gradient (a copy would be cross-attention, and dx_kv NULL is then rejected).
    const float *kv() const { return self_attention ? x_q.data() : x_kv.data(); }

    // y and every gradient, concatenated as backward() returns them, computed in the number
    // type T by test_precision_plain.hpp's textbook MHA (T = double: the oracle; T = float:
    // the plain float32 computation, the yardstick). A layer without biases is computed with
    // zero biases (adding 0 is exact) and has no bias gradients.
    template <class T>
    std::pair<std::vector<T>, std::vector<T>> computed_in() const {
        using attn_precision::cast;
        auto or_zeros = [](const std::vector<float> &b, int64_t n) {
            return cast<T>(b.empty() ? std::vector<float>(size_t(n), 0.0f) : b);
        };
        const int64_t wq = d.heads * d.head_dim, wkv = d.heads_kv * d.head_dim;
        const auto r = attn_precision::plain_mha<T>(
            d, cast<T>(x_q), cast<T>(x_kv), cast<T>(w_q), cast<T>(w_k), cast<T>(w_v), cast<T>(w_o),
            or_zeros(b_q, wq), or_zeros(b_k, wkv), or_zeros(b_v, wkv), or_zeros(b_o, d.d_model),
            cast<T>(dy));
        std::vector<T> g = r.dx_q;
        if (self_attention)  // one input: its gradient holds the Q part and the K, V part
            for (size_t i = 0; i < g.size(); ++i) g[i] += r.dx_kv[i];
        else
            g.insert(g.end(), r.dx_kv.begin(), r.dx_kv.end());
        for (const auto *v : {&r.dw_q, &r.dw_k, &r.dw_v, &r.dw_o}) g.insert(g.end(), v->begin(), v->end());
        if (!b_q.empty())
            for (const auto *v : {&r.db_q, &r.db_k, &r.db_v, &r.db_o})
                g.insert(g.end(), v->begin(), v->end());
        return {r.y, g};
    }
};

std::vector<float> forward(attn_context *ctx, const mha_problem &p) {
    std::vector<float> y(p.x_q.size(), NAN);
    EXPECT_EQ(attn_mha_forward_f32(ctx, &p.d, p.x_q.data(), p.kv(), y.data()), ATTN_OK)
        << attn_last_error();
    return y;
}

// Every gradient, concatenated: dx_q, dx_kv, dW_q, dW_k, dW_v, dW_o, db_q, db_k, db_v, db_o.
std::vector<float> backward(attn_context *ctx, const mha_problem &p, bool self_attention) {
    std::vector<float> dx_q(p.x_q.size()), dx_kv(self_attention ? 0 : p.x_kv.size());
    std::vector<float> dw_q(p.w_q.size()), dw_k(p.w_k.size()), dw_v(p.w_v.size());
    std::vector<float> dw_o(p.w_o.size()), db_q(p.b_q.size()), db_k(p.b_k.size());
    std::vector<float> db_v(p.b_v.size()), db_o(p.b_o.size());
    const bool biases = !p.b_q.empty();
    attn_mha_grads g{dw_q.data(), dw_k.data(), dw_v.data(), dw_o.data(),
                     biases ? db_q.data() : nullptr, biases ? db_k.data() : nullptr,
                     biases ? db_v.data() : nullptr, biases ? db_o.data() : nullptr};
    EXPECT_EQ(attn_mha_backward_f32(ctx, &p.d, p.x_q.data(), p.kv(), p.dy.data(), dx_q.data(),
                                    self_attention ? nullptr : dx_kv.data(), &g),
              ATTN_OK)
        << attn_last_error();
    std::vector<float> all;
    for (auto *v : {&dx_q, &dx_kv, &dw_q, &dw_k, &dw_v, &dw_o, &db_q, &db_k, &db_v, &db_o})
        all.insert(all.end(), v->begin(), v->end());
    return all;
}

std::vector<mha_case> cases() {
    std::vector<mha_case> out;
    out.push_back({"cross_gqa", 2, 37, 53, 64, 8, 2});
    mha_case c{"self_causal_kv_len_dropout", 2, 40, 40, 48, 4, 4, ATTN_CAUSAL_TOP_LEFT};
    c.self_attention = true;
    c.kv_len = {40, 17};
    c.dropout = 0.1f;
    out.push_back(c);
    c = {"no_biases_bottom_right_head_dim_24", 1, 20, 70, 96, 4, 1, ATTN_CAUSAL_BOTTOM_RIGHT};
    c.biases = false;
    out.push_back(c);
    return out;
}

class MhaOracle : public testing::TestWithParam<attn_test::path> {};

TEST_P(MhaOracle, ForwardAndBackwardWithinYardstick) {
    auto ctx = attn_test::make_context(GetParam().impl, GetParam().isa);
    ASSERT_TRUE(ctx);
    for (const mha_case &c : cases()) {
        SCOPED_TRACE(c.name);
        const mha_problem p(c);
        const auto exact = p.computed_in<double>();
        const auto plain = p.computed_in<float>();
        EXPECT_TRUE(attn_test::within_yardstick(forward(ctx.get(), p), plain.first, exact.first,
                                                floor_tolerance))
            << "y";
        EXPECT_TRUE(attn_test::within_yardstick(backward(ctx.get(), p, c.self_attention),
                                                plain.second, exact.second, floor_tolerance))
            << "gradients";
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, MhaOracle, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

class MhaSimd : public testing::TestWithParam<attn_test::path> {};

TEST_P(MhaSimd, BitwiseIdenticalAcrossThreadCounts) {
    ATTN_SKIP_UNLESS_THREADS(2);
    mha_case c{"self_causal", 2, 100, 100, 64, 4, 2, ATTN_CAUSAL_TOP_LEFT};
    c.self_attention = true;
    const mha_problem p(c);
    std::vector<std::vector<float>> ys, gs;
    for (int threads : {1, 2, 3}) {
        auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa, threads);
        ys.push_back(forward(ctx.get(), p));
        gs.push_back(backward(ctx.get(), p, true));
    }
    for (size_t t = 1; t < ys.size(); ++t) {
        EXPECT_EQ(std::memcmp(ys[0].data(), ys[t].data(), ys[0].size() * 4), 0)
            << "threads " << t + 1;
        EXPECT_EQ(std::memcmp(gs[0].data(), gs[t].data(), gs[0].size() * 4), 0)
            << "threads " << t + 1;
    }
}

INSTANTIATE_TEST_SUITE_P(PerIsa, MhaSimd, testing::ValuesIn(attn_test::simd_paths()),
                         attn_test::path_name);

}  // namespace
