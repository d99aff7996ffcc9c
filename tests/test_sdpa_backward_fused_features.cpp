// The score features in the fused backward, on every SIMD level this CPU has: sliding windows
// (several key tiles wide, both sides), softcap, ALiBi, sinks (dsinks), the per-sequence causal
// alignment (BOTTOM_RIGHT_KV_LEN), with grouped heads, kv_len and an additive mask. For each:
//   - every gradient holds test_precision.cpp's rule against the float64 oracle: normwise error
//     at most max(2 x that of a plain float32 computation of the same thing, 2e-6), with the
//     forward's lse and with lse recomputed (the plain computation and the oracle are one
//     template, test_features_plain.hpp); dsinks from the forward's lse may add the error that
//     lse's own f32 rounding propagates into e^(sink - lse);
//   - the gradients are the same bits for 1, 2 and 3 threads;
//   - the composed backward (ops/backward_switch.hpp), a different computation of the same
//     thing, agrees to rounding: max |a - b| / (1 + |b|) <= 2e-5 (both are within a few float32
//     roundings of the oracle on scores of magnitude ~10).
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ops/backward_switch.hpp"
#include "test_features_plain.hpp"
#include "test_util.hpp"
#include "test_precision_plain.hpp"

namespace {

using attn_features_plain::plain_backward;
constexpr double floor_error = 2e-6;

struct feature_case {
    const char *name;
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim;
    attn_causal causal;
    int64_t window_left, window_right;
    float softcap;
    bool alibi, sinks, mask;
    std::vector<int32_t> kv_len;
    float qk_sigma;  // q, k ~ N(0, sigma^2)
};

std::vector<feature_case> feature_cases() {
    const auto NONE = ATTN_CAUSAL_NONE, TL = ATTN_CAUSAL_TOP_LEFT, BR = ATTN_CAUSAL_BOTTOM_RIGHT,
               KVL = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    return {
        {"window_causal", 1, 2, 2, 300, 300, 48, TL, 37, -1, 0, false, false, false, {}, 1.8f},
        {"window_both_sides", 1, 2, 1, 180, 290, 40, NONE, 70, 20, 0, false, false, false, {}, 1.8f},
        {"softcap", 1, 2, 2, 200, 200, 64, TL, -1, -1, 15.0f, false, false, false, {}, 2.5f},
        {"alibi_grouped", 1, 4, 2, 150, 280, 32, BR, -1, -1, 0, true, false, false, {}, 1.8f},
        {"sinks_kv_len", 2, 2, 2, 130, 260, 32, NONE, -1, -1, 0, false, true, false, {260, 75},
         1.8f},
        {"kv_len_alignment_window", 2, 2, 2, 140, 300, 48, KVL, 64, -1, 0, false, false, false,
         {300, 150}, 1.8f},
        {"everything", 2, 4, 2, 150, 260, 24, BR, 90, -1, 20.0f, true, true, true, {260, 200},
         2.0f},
    };
}

std::vector<float> normal(size_t n, uint32_t seed, float sigma) {
    return attn_test::normal_tensor(n, seed, sigma);
}

// One case's inputs, descriptor, the library's forward (out, lse) and the two computations
// of its gradients.
struct problem {
    attn_sdpa_desc d;
    std::vector<float> q, k, v, dout, mask, slopes, sinks, out, lse;
    attn_features_plain::grads<double> exact;
    attn_features_plain::grads<float> plain;

    explicit problem(const feature_case &c) {
        d = attn_test::make_desc(c.batch, c.heads_q, c.heads_kv, c.len_q, c.len_kv, c.dim, c.dim);
        d.causal = c.causal;
        d.window_left = c.window_left;
        d.window_right = c.window_right;
        d.softcap = c.softcap;
        const size_t nq = size_t(c.batch * c.heads_q * c.len_q * c.dim);
        const size_t nk = size_t(c.batch * c.heads_kv * c.len_kv * c.dim);
        q = normal(nq, 41, c.qk_sigma), k = normal(nk, 42, c.qk_sigma), v = normal(nk, 43, 1.0f);
        dout = normal(nq, 44, 1.0f);
        slopes = attn_test::alibi_geometric(c.heads_q);
        if (c.alibi) d.alibi_slopes = slopes.data();
        if (c.sinks) {
            sinks = normal(size_t(c.heads_q), 45, 2.0f);
            d.sinks = sinks.data();
        }
        if (c.mask) {
            mask = attn_test::random_tensor(size_t(c.batch * c.heads_q * c.len_q * c.len_kv), 46,
                                            -2.0f, 2.0f);
            d.mask = mask.data();
            d.mask_strides = attn_layout{c.heads_q * c.len_q * c.len_kv, c.len_q * c.len_kv,
                                         c.len_kv};
        }
        if (!c.kv_len.empty()) d.kv_len = c.kv_len.data();
        auto cast = [](const std::vector<float> &x) { return std::vector<double>(x.begin(), x.end()); };
        exact = plain_backward<double>(d, cast(q), cast(k), cast(v), cast(dout), cast(sinks));
        plain = plain_backward<float>(d, q, k, v, dout, sinks);
    }

    void forward(attn_context *ctx) {
        out.assign(q.size(), 0.0f);
        lse.assign(size_t(d.batch * d.heads_q * d.len_q), 0.0f);
        attn_sdpa_desc f = d;
        f.lse = lse.data();
        ASSERT_EQ(attn_sdpa_f32(ctx, &f, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
            << attn_last_error();
    }

    // dq, dk, dv, dsinks of one backward call (every element starts as NaN: a row left
    // unwritten shows).
    std::vector<std::vector<float>> backward(attn_context *ctx, bool with_lse) const {
        return attn_test::sdpa_backward_f32_grads(ctx, d, q, k, v, out, dout, with_lse ? lse.data() : nullptr,
                                                  sinks.size());
    }
};

const char *const grad_names[] = {"dq", "dk", "dv", "dsinks"};

// extra: an error the library may add beyond the rule's (relative to exact's norm).
void expect_rule(const std::string &what, const std::vector<float> &got,
                 const std::vector<float> &plain, const std::vector<double> &exact,
                 double extra = 0.0) {
    const double e_got = attn_precision::normwise_error(got, exact),
                 e_plain = attn_precision::normwise_error(plain, exact);
    EXPECT_LE(e_got, std::max(2.0 * e_plain, floor_error) + extra)
        << what << ": library " << e_got << ", plain float32 " << e_plain;
}

class FusedBackwardFeatures
    : public testing::TestWithParam<std::tuple<attn_test::path, feature_case>> {};

TEST_P(FusedBackwardFeatures, OracleThreadsAndComposed) {
    const attn_test::path &path = std::get<0>(GetParam());
    const feature_case &c = std::get<1>(GetParam());
    problem p(c);
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, path.isa, 1);
    ASSERT_TRUE(ctx);
    p.forward(ctx.get());
    if (HasFatalFailure()) return;

    // the float64 oracle's rule, with the forward's lse and recomputed
    const std::vector<float> *plain[] = {&p.plain.dq, &p.plain.dk, &p.plain.dv, &p.plain.dsinks};
    const std::vector<double> *exact[] = {&p.exact.dq, &p.exact.dk, &p.exact.dv, &p.exact.dsinks};
    // dsinks from the forward's lse: its P_sink = e^(sink - lse) carries the rounding of lse,
    // an f32 input the plain computation does not have; that propagated error is allowed on top
    // (normwise, relative to dsinks' norm)
    double lse_rounding = 0.0;
    if (!p.sinks.empty()) {
        const std::vector<double> zero(p.sinks.size(), 0.0);
        lse_rounding = attn_precision::normwise_error(p.exact.dsinks_lse_rounding, zero) /
                       attn_precision::normwise_error(p.exact.dsinks, zero);
    }
    std::vector<std::vector<float>> one_thread;
    for (bool with_lse : {true, false}) {
        const auto got = p.backward(ctx.get(), with_lse);
        for (int x = 0; x < 4; ++x)
            if (!got[size_t(x)].empty())
                expect_rule(std::string(grad_names[x]) + (with_lse ? " (lse)" : " (no lse)"),
                            got[size_t(x)], *plain[x], *exact[x],
                            x == 3 && with_lse ? lse_rounding : 0.0);
        if (with_lse) one_thread = got;
    }
    if (!p.sinks.empty()) {  // the sinks' gradient is not trivially zero
        double largest = 0.0;
        for (double g : p.exact.dsinks) largest = std::max(largest, std::fabs(g));
        EXPECT_GT(largest, 1e-3);
    }

    // the same bits for 2 and 3 threads
    for (int threads : {2, 3}) {
        auto ctx_n = attn_test::make_context(ATTN_IMPL_SIMD, path.isa, threads);
        const auto got = p.backward(ctx_n.get(), true);
        for (int x = 0; x < 4; ++x)
            EXPECT_TRUE(attn_test::bitwise_equal(got[size_t(x)], one_thread[size_t(x)]))
                << grad_names[x] << " with " << threads << " threads";
    }

    // the composed backward: a different computation, the same gradients to rounding
    attn::ops::set_backward_composed(true);
    const auto composed = p.backward(ctx.get(), true);
    attn::ops::set_backward_composed(false);
    for (int x = 0; x < 4; ++x) {
        const std::vector<float> &a = one_thread[size_t(x)], &b = composed[size_t(x)];
        EXPECT_LE(attn_test::max_rel_error(a.data(), b.data(), a.size()), 2e-5) << grad_names[x];
    }
}

std::string case_name(
    const testing::TestParamInfo<std::tuple<attn_test::path, feature_case>> &info) {
    return std::get<1>(info.param).name + std::string("_") + std::get<0>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(PerIsa, FusedBackwardFeatures,
                         testing::Combine(testing::ValuesIn(attn_test::simd_paths()),
                                          testing::ValuesIn(feature_cases())),
                         case_name);

}  // namespace
