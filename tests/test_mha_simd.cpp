// Multi-head attention on the SIMD path (GEMM projections around the fused attention)
// against the reference, per ISA.
//   forward:  max |simd - ref| / (1 + |ref|) <= 2 * e_ref + 1e-5, e_ref the reference's error
//             against a double-precision MHA built here on test_util's sdpa_double;
//   backward: every gradient within 2e-4 * (1 + |ref|) of the reference's (both are sums of
//             up to a few hundred fp32 products, ordered differently; a wrong term is off by
//             far more);
//   forward and backward bitwise identical for 1, 2 and 3 threads.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::random_tensor;
using doubles = std::vector<double>;

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

    // y in double: the projections, test_util's sdpa_double per head (BHSD), the output.
    doubles forward_double() const {
        const int64_t B = d.batch, Lq = d.len_q, Lk = d.len_kv, dm = d.d_model, hd = d.head_dim;
        auto linear = [&](const std::vector<float> &x, int64_t rows, const std::vector<float> &w,
                          const std::vector<float> &b, int64_t n) {
            doubles out(size_t(rows * n));
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t o = 0; o < n; ++o) {
                    double acc = b.empty() ? 0.0 : b[size_t(o)];
                    for (int64_t m = 0; m < dm; ++m)
                        acc += double(x[size_t(r * dm + m)]) * w[size_t(o * dm + m)];
                    out[size_t(r * n + o)] = acc;
                }
            return out;
        };
        // [B, L, H, hd] -> [B, H, L, hd]
        auto to_bhsd = [&](const doubles &x, int64_t len, int64_t heads) {
            doubles out(x.size());
            for (int64_t b = 0; b < B; ++b)
                for (int64_t s = 0; s < len; ++s)
                    for (int64_t h = 0; h < heads; ++h)
                        for (int64_t c = 0; c < hd; ++c)
                            out[size_t(((b * heads + h) * len + s) * hd + c)] =
                                x[size_t(((b * len + s) * heads + h) * hd + c)];
            return out;
        };
        const doubles q = to_bhsd(linear(x_q, B * Lq, w_q, b_q, d.heads * hd), Lq, d.heads);
        const doubles k = to_bhsd(linear(x_kv, B * Lk, w_k, b_k, d.heads_kv * hd), Lk, d.heads_kv);
        const doubles v = to_bhsd(linear(x_kv, B * Lk, w_v, b_v, d.heads_kv * hd), Lk, d.heads_kv);
        attn_sdpa_desc s;
        attn_sdpa_desc_init(&s, B, d.heads, Lq, Lk, hd);
        s.heads_kv = d.heads_kv;
        s.causal = d.causal;
        s.kv_len = d.kv_len;
        s.dropout_p = d.dropout_p;
        s.dropout_seed = d.dropout_seed;
        const doubles ctx_bhsd = attn_test::sdpa_double(s, q, k, v);
        doubles y(size_t(B * Lq * dm));
        for (int64_t b = 0; b < B; ++b)
            for (int64_t i = 0; i < Lq; ++i)
                for (int64_t o = 0; o < dm; ++o) {
                    double acc = b_o.empty() ? 0.0 : b_o[size_t(o)];
                    for (int64_t h = 0; h < d.heads; ++h)
                        for (int64_t c = 0; c < hd; ++c)
                            acc += ctx_bhsd[size_t(((b * d.heads + h) * Lq + i) * hd + c)] *
                                   w_o[size_t(o * d.heads * hd + h * hd + c)];
                    y[size_t((b * Lq + i) * dm + o)] = acc;
                }
        return y;
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

class MhaSimd : public testing::TestWithParam<attn_test::path> {};

TEST_P(MhaSimd, ForwardAndBackwardMatchReference) {
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa);
    auto ref_ctx = attn_test::make_context(ATTN_IMPL_REFERENCE);
    for (const mha_case &c : cases()) {
        SCOPED_TRACE(c.name);
        const mha_problem p(c);
        const std::vector<float> y_ref = forward(ref_ctx.get(), p), y = forward(ctx.get(), p);
        const double e_ref = attn_test::max_rel_error(y_ref, p.forward_double());
        EXPECT_LE(attn_test::max_rel_error(y.data(), y_ref.data(), y.size()), 2 * e_ref + 1e-5)
            << "reference error " << e_ref;
        const std::vector<float> g_ref = backward(ref_ctx.get(), p, c.self_attention);
        const std::vector<float> g = backward(ctx.get(), p, c.self_attention);
        EXPECT_LE(attn_test::max_rel_error(g.data(), g_ref.data(), g.size()), 2e-4);
    }
}

TEST_P(MhaSimd, BitwiseIdenticalAcrossThreadCounts) {
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
