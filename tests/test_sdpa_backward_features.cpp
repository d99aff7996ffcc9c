// The backward with sliding windows (both alignments, KV_LEN alignment), softcap, ALiBi and
// sinks (dsinks), alone and with mask, kv_len, grouped heads and dropout, on every path:
// dq, dk, dv and dsinks against central finite differences of the float64 oracle's loss
// sum(dout * out) (test_features_util.hpp), with the forward's lse and with lse recomputed.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "test_features_util.hpp"

namespace {

using attn_test::path;

struct grad_case {
    const char *name;
    int64_t batch, heads_q, heads_kv, len_q, len_kv;
    attn_causal causal;
    int64_t window_left, window_right;
    float softcap;
    bool alibi;
    float sink;  // NaN: none; head h gets (h even ? sink : -sink)
    std::vector<int32_t> kv_len;
    bool mask = false;
    float dropout = 0.0f;
    float q_gain = 1.0f;
};

std::vector<grad_case> grad_cases() {
    const float none = NAN;
    const auto NONE = ATTN_CAUSAL_NONE, TL = ATTN_CAUSAL_TOP_LEFT, BR = ATTN_CAUSAL_BOTTOM_RIGHT,
               KVL = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    return {
        {"window_left_top_left", 1, 2, 2, 7, 7, TL, 2, -1, 0, false, none, {}},
        {"window_right_no_causal", 1, 2, 1, 6, 9, NONE, -1, 1, 0, false, none, {}},
        {"window_both_bottom_right", 1, 2, 2, 5, 11, BR, 3, 1, 0, false, none, {}},
        {"window_kv_len_alignment", 2, 2, 2, 3, 10, KVL, 2, -1, 0, false, none, {10, 6}},
        {"softcap_5", 1, 2, 2, 6, 8, NONE, -1, -1, 5.0f, false, none, {}, false, 0, 6.0f},
        {"softcap_50", 1, 2, 2, 6, 8, TL, -1, -1, 50.0f, false, none, {}, false, 0, 20.0f},
        {"alibi", 1, 4, 2, 6, 9, BR, -1, -1, 0, true, none, {}},
        {"sinks_pm10", 1, 2, 2, 6, 8, NONE, -1, -1, 0, false, 10.0f, {}},
        {"sinks_pm1_hidden_rows", 2, 2, 2, 5, 8, TL, 1, -1, 0, false, 1.0f, {8, 0}},
        {"combined", 2, 4, 2, 6, 9, BR, 4, -1, 10.0f, true, 0.5f, {9, 7}, true, 0.3f, 3.0f},
    };
}

struct backward_features : testing::TestWithParam<std::tuple<path, grad_case>> {};

TEST_P(backward_features, MatchesFiniteDifferences) {
    const path &p = std::get<0>(GetParam());
    const grad_case &gc = std::get<1>(GetParam());
    auto ctx = attn_test::make_context(p.impl, p.isa);
    ASSERT_TRUE(ctx);
    const int64_t B = gc.batch, Hq = gc.heads_q, Hkv = gc.heads_kv, Lq = gc.len_q, Lk = gc.len_kv;
    const int64_t D = 5;
    attn_sdpa_desc d = attn_test::make_desc(B, Hq, Hkv, Lq, Lk, D, D);
    d.causal = gc.causal;
    d.window_left = gc.window_left;
    d.window_right = gc.window_right;
    d.softcap = gc.softcap;
    const std::vector<float> slopes = attn_test::alibi_geometric(Hq);
    if (gc.alibi) d.alibi_slopes = slopes.data();
    std::vector<float> sinks(static_cast<size_t>(Hq)), dsinks(static_cast<size_t>(Hq), NAN);
    for (int64_t h = 0; h < Hq; ++h) sinks[size_t(h)] = h % 2 == 0 ? gc.sink : -gc.sink;
    if (!std::isnan(gc.sink)) d.sinks = sinks.data(), d.dsinks = dsinks.data();
    if (!gc.kv_len.empty()) d.kv_len = gc.kv_len.data();
    const std::vector<float> mask = attn_test::random_tensor(size_t(B * Hq * Lq * Lk), 4, -1.0f, 1.0f);
    if (gc.mask) d.mask = mask.data(), d.mask_strides = attn_layout{Hq * Lq * Lk, Lq * Lk, Lk};
    d.dropout_p = gc.dropout;
    d.dropout_seed = 5;
    std::vector<float> q = attn_test::random_tensor(size_t(B * Hq * Lq * D), 1);
    for (float &x : q) x *= gc.q_gain;
    const std::vector<float> k = attn_test::random_tensor(size_t(B * Hkv * Lk * D), 2);
    const std::vector<float> v = attn_test::random_tensor(size_t(B * Hkv * Lk * D), 3);
    const std::vector<float> dout = attn_test::random_tensor(size_t(B * Hq * Lq * D), 6);

    // the oracle's loss and its central differences, all in double
    std::vector<double> qd = attn_test::to_double(q), kd = attn_test::to_double(k),
                        vd = attn_test::to_double(v), sd = attn_test::to_double(sinks);
    auto loss = [&]() {
        const std::vector<double> o = attn_test::sdpa_features_double(
            d, qd, kd, vd, nullptr, nullptr, d.sinks ? &sd : nullptr);
        double l = 0.0;
        for (size_t i = 0; i < o.size(); ++i) l += o[i] * double(dout[i]);
        return l;
    };
    auto central = [&](std::vector<double> &x) {
        std::vector<double> g(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
            const double keep = x[i], h = 1e-6 * (1.0 + std::fabs(keep));
            x[i] = keep + h;
            const double up = loss();
            x[i] = keep - h;
            const double down = loss();
            x[i] = keep;
            g[i] = (up - down) / (2.0 * h);
        }
        return g;
    };
    const std::vector<double> gq = central(qd), gk = central(kd), gv = central(vd);
    const std::vector<double> gs = d.sinks ? central(sd) : std::vector<double>();

    // the forward (for out and lse), then the backward with lse given and with lse NULL
    std::vector<float> out(size_t(B * Hq * Lq * D)), lse(size_t(B * Hq * Lq));
    attn_sdpa_desc fwd = d;
    fwd.lse = lse.data();
    fwd.dsinks = nullptr;
    ASSERT_EQ(attn_sdpa_f32(ctx.get(), &fwd, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
        << attn_last_error();
    for (const bool with_lse : {true, false}) {
        SCOPED_TRACE(with_lse ? "forward's lse" : "lse recomputed");
        std::vector<float> dq(q.size(), NAN), dk(k.size(), NAN), dv(v.size(), NAN);
        ASSERT_EQ(attn_sdpa_backward_f32(ctx.get(), &d, q.data(), k.data(), v.data(), out.data(),
                                         dout.data(), with_lse ? lse.data() : nullptr, dq.data(),
                                         dk.data(), dv.data()),
                  ATTN_OK)
            << attn_last_error();
        EXPECT_LT(attn_test::max_rel_error(dq, gq), 2e-5) << gc.name << " dq on " << p.name;
        EXPECT_LT(attn_test::max_rel_error(dk, gk), 2e-5) << gc.name << " dk on " << p.name;
        EXPECT_LT(attn_test::max_rel_error(dv, gv), 2e-5) << gc.name << " dv on " << p.name;
        if (d.sinks) {
            EXPECT_LT(attn_test::max_rel_error(dsinks, gs), 2e-5) << gc.name << " dsinks";
            double largest = 0.0;
            for (double g : gs) largest = std::max(largest, std::fabs(g));
            EXPECT_GT(largest, 1e-6) << "the sinks' gradient is not trivially zero";
        }
    }
}

std::string grad_name(const testing::TestParamInfo<std::tuple<path, grad_case>> &info) {
    return std::get<1>(info.param).name + std::string("_") + std::get<0>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Features, backward_features,
                         testing::Combine(testing::ValuesIn(attn_test::all_paths()),
                                          testing::ValuesIn(grad_cases())),
                         grad_name);

}  // namespace
