// Sliding windows (both causal alignments and ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN), softcap,
// ALiBi and attention sinks, forward, on every path: out, lse and weights against the float64
// oracle of test_features_util.hpp, alone and combined with mask, kv_len, grouped heads,
// dropout, BSHD strides, split-key decoding and 16-bit inputs; hidden V rows never read.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "test_features_util.hpp"

namespace {

using attn_test::path;

struct feature_case {
    const char *name;
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim;
    attn_causal causal;
    int64_t window_left, window_right;
    float softcap;
    bool alibi;
    float sink;                        // NaN: no sinks; else head h gets (h even ? sink : -sink)
    std::vector<int32_t> kv_len;       // empty: none
    bool mask = false;
    float dropout = 0.0f;
    bool bshd = false;
    float q_gain = 1.0f;               // scores this much larger (softcap at work)
};

std::vector<feature_case> cases() {
    const float none = NAN;
    const auto NONE = ATTN_CAUSAL_NONE, TL = ATTN_CAUSAL_TOP_LEFT, BR = ATTN_CAUSAL_BOTTOM_RIGHT,
               KVL = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    return {
        {"window_left_causal_top_left", 1, 2, 2, 300, 300, 32, TL, 40, -1, 0, false, none, {}},
        {"window_left_right_no_causal", 1, 2, 2, 200, 300, 32, NONE, 40, 10, 0, false, none, {}},
        {"window_right_only", 1, 2, 1, 130, 130, 16, NONE, -1, 5, 0, false, none, {}},
        {"window_both_bottom_right", 2, 2, 2, 70, 333, 24, BR, 17, 9, 0, false, none, {}},
        {"window_kv_len_alignment", 2, 2, 2, 9, 333, 32, KVL, 30, -1, 0, false, none, {333, 150}},
        {"window_zero_diagonal_only", 1, 1, 1, 40, 40, 8, TL, 0, -1, 0, false, none, {}},
        {"softcap_5", 1, 2, 2, 150, 150, 32, TL, -1, -1, 5.0f, false, none, {}, false, 0, false, 4.0f},
        {"softcap_50", 1, 2, 2, 150, 190, 32, NONE, -1, -1, 50.0f, false, none, {}, false, 0, false, 16.0f},
        {"alibi_geometric", 1, 8, 8, 260, 260, 16, TL, -1, -1, 0, true, none, {}},
        {"alibi_window_bottom_right", 1, 4, 2, 100, 400, 16, BR, 64, -1, 0, true, none, {}},
        {"sinks_pm10_fully_hidden_batch", 2, 2, 2, 50, 100, 16, NONE, 20, -1, 0, false, 10.0f, {0, 100}},
        {"sinks_causal", 1, 4, 2, 120, 120, 32, TL, -1, -1, 0, false, 3.0f, {}},
        {"everything_combined", 2, 4, 2, 100, 230, 32, BR, 50, -1, 20.0f, true, 2.0f, {230, 170}, true, 0.2f, true, 3.0f},
        {"decode_split_window_softcap_alibi_sinks", 1, 8, 2, 1, 3000, 64, BR, 700, -1, 30.0f, true, 1.0f, {}},
        {"decode_split_kv_len_alignment", 2, 4, 4, 1, 2100, 32, KVL, 600, -1, 0, true, 10.0f, {2100, 1300}},
        {"decode_rows_window_per_row", 1, 2, 2, 3, 2000, 32, BR, 100, -1, 0, true, -10.0f, {}},
        {"decode_grouped_rows_are_heads", 1, 8, 2, 1, 500, 32, BR, 80, -1, 10.0f, true, 10.0f, {}},
    };
}

struct features_test : testing::TestWithParam<std::tuple<path, feature_case>> {};

// Writes dense BHSD x into buffer laid out by l (BSHD or BHSD).
std::vector<float> laid_out(const std::vector<float> &x, int64_t B, int64_t H, int64_t L,
                            int64_t D, const attn_layout &l) {
    std::vector<float> out(size_t(B * H * L * D), 0.0f);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < L; ++i)
                for (int64_t c = 0; c < D; ++c)
                    out[size_t(b * l.batch + h * l.head + i * l.seq + c)] =
                        x[size_t(((b * H + h) * L + i) * D + c)];
    return out;
}

TEST_P(features_test, MatchesFloat64Oracle) {
    const path &p = std::get<0>(GetParam());
    const feature_case &fc = std::get<1>(GetParam());
    auto ctx = attn_test::make_context(p.impl, p.isa);
    ASSERT_TRUE(ctx);
    const int64_t B = fc.batch, Hq = fc.heads_q, Hkv = fc.heads_kv, Lq = fc.len_q, Lk = fc.len_kv,
                  D = fc.dim;
    attn_sdpa_desc d = attn_test::make_desc(B, Hq, Hkv, Lq, Lk, D, D);
    d.causal = fc.causal;
    d.window_left = fc.window_left;
    d.window_right = fc.window_right;
    d.softcap = fc.softcap;
    std::vector<float> q = attn_test::random_tensor(size_t(B * Hq * Lq * D), 11);
    for (float &x : q) x *= fc.q_gain;
    const std::vector<float> k = attn_test::random_tensor(size_t(B * Hkv * Lk * D), 12);
    const std::vector<float> v = attn_test::random_tensor(size_t(B * Hkv * Lk * D), 13);
    const std::vector<float> slopes = attn_test::alibi_geometric(Hq);
    if (fc.alibi) d.alibi_slopes = slopes.data();
    std::vector<float> sinks(static_cast<size_t>(Hq));
    for (int64_t h = 0; h < Hq; ++h) sinks[size_t(h)] = h % 2 == 0 ? fc.sink : -fc.sink;
    if (!std::isnan(fc.sink)) d.sinks = sinks.data();
    if (!fc.kv_len.empty()) d.kv_len = fc.kv_len.data();
    const std::vector<float> mask = attn_test::random_tensor(size_t(B * Lq * Lk), 14, -2.0f, 2.0f);
    if (fc.mask) {
        d.mask = mask.data();
        d.mask_strides = attn_layout{Lq * Lk, 0, Lk};  // broadcast over heads
    }
    d.dropout_p = fc.dropout;
    d.dropout_seed = 99;
    std::vector<float> out(size_t(B * Hq * Lq * D)), lse(size_t(B * Hq * Lq));
    std::vector<float> weights(size_t(B * Hq * Lq * Lk));
    d.lse = lse.data();
    d.weights = weights.data();

    std::vector<double> want_lse, want_w;
    const std::vector<double> want = attn_test::sdpa_features_double(
        d, attn_test::to_double(q), attn_test::to_double(k), attn_test::to_double(v), &want_lse,
        &want_w);
    attn_sdpa_desc call = d;
    std::vector<float> qc = q, kc = k, vc = v;
    if (fc.bshd) {  // [batch, seq, heads, dim] for every tensor
        call.q = call.out = attn_layout{Lq * Hq * D, D, Hq * D};
        call.k = call.v = attn_layout{Lk * Hkv * D, D, Hkv * D};
        qc = laid_out(q, B, Hq, Lq, D, call.q);
        kc = laid_out(k, B, Hkv, Lk, D, call.k);
        vc = laid_out(v, B, Hkv, Lk, D, call.v);
    }
    ASSERT_EQ(attn_sdpa_f32(ctx.get(), &call, qc.data(), kc.data(), vc.data(), out.data()), ATTN_OK)
        << attn_last_error();
    if (fc.bshd) {  // back to BHSD for the comparison
        std::vector<float> dense(out.size());
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hq; ++h)
                for (int64_t i = 0; i < Lq; ++i)
                    for (int64_t c = 0; c < D; ++c)
                        dense[size_t(((b * Hq + h) * Lq + i) * D + c)] =
                            out[size_t(b * call.out.batch + h * call.out.head + i * call.out.seq + c)];
        out = dense;
    }
    EXPECT_LT(attn_test::max_rel_error(out, want), 3e-5) << fc.name << " on " << p.name;
    EXPECT_LT(attn_test::max_rel_error(lse, want_lse), 3e-5) << fc.name << " on " << p.name;
    EXPECT_LT(attn_test::max_rel_error(weights, want_w), 3e-5) << fc.name << " on " << p.name;
    // A row with no visible key: zeros and lse = the sink (-inf without sinks).
    for (int64_t b = 0; b < B; ++b)
        if (!fc.kv_len.empty() && fc.kv_len[size_t(b)] == 0)
            for (int64_t h = 0; h < Hq; ++h) {
                const int64_t row = (b * Hq + h) * Lq;
                EXPECT_EQ(lse[size_t(row)], d.sinks ? sinks[size_t(h)] : -INFINITY);
                EXPECT_EQ(out[size_t(row * D)], 0.0f);
            }
    // With sinks the weights of a row sum to less than 1.
    if (d.sinks && fc.dropout == 0.0f) {
        double sum = 0.0;
        for (int64_t j = 0; j < Lk; ++j) sum += weights[size_t(j)];
        EXPECT_LT(sum, 1.0);
        EXPECT_NEAR(sum, 1.0 - std::exp(double(sinks[0]) - want_lse[0]), 1e-5);
    }
}

std::string case_name(const testing::TestParamInfo<std::tuple<path, feature_case>> &info) {
    return std::get<1>(info.param).name + std::string("_") + std::get<0>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Features, features_test,
                         testing::Combine(testing::ValuesIn(attn_test::all_paths()),
                                          testing::ValuesIn(cases())),
                         case_name);

// 16-bit q, k, v through attn_sdpa (the bf16-pair policy on avx512_bf16 for the prefill, the
// decode kernel for one row): every new field at once, against the oracle on the stored
// values, within twice the plain 16-bit computation's error (P rounded to bf16 as V is bf16).
class features_16bit : public attn_test::path_test {};

TEST_P(features_16bit, Bf16InputsAllFields) {
    for (const int64_t Lq : {int64_t(1), int64_t(90)}) {
        const int64_t B = 1, Hq = 4, Hkv = 2, Lk = 300, D = 32;
        attn_sdpa_desc d = attn_test::make_desc(B, Hq, Hkv, Lq, Lk, D, D);
        d.q_type = d.kv_type = ATTN_DTYPE_BF16;
        d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        d.window_left = 45;
        d.softcap = 8.0f;
        const std::vector<float> slopes = attn_test::alibi_geometric(Hq);
        const std::vector<float> sinks = {1.0f, -1.0f, 10.0f, -10.0f};
        d.alibi_slopes = slopes.data();
        d.sinks = sinks.data();
        auto to_bf16 = [](const std::vector<float> &x, std::vector<double> *stored) {
            std::vector<uint16_t> bits(x.size());
            ASSERT_EQ(attn_convert(nullptr, int64_t(x.size()), x.data(), ATTN_DTYPE_F32, bits.data(),
                                   ATTN_DTYPE_BF16), ATTN_OK);
            std::vector<float> back(x.size());
            ASSERT_EQ(attn_convert(nullptr, int64_t(x.size()), bits.data(), ATTN_DTYPE_BF16,
                                   back.data(), ATTN_DTYPE_F32), ATTN_OK);
            *stored = attn_test::to_double(back);
            return;
        };
        const std::vector<float> q = attn_test::random_tensor(size_t(B * Hq * Lq * D), 21, -3, 3);
        const std::vector<float> k = attn_test::random_tensor(size_t(B * Hkv * Lk * D), 22);
        const std::vector<float> v = attn_test::random_tensor(size_t(B * Hkv * Lk * D), 23);
        std::vector<double> qd, kd, vd;
        to_bf16(q, &qd);
        to_bf16(k, &kd);
        to_bf16(v, &vd);
        std::vector<uint16_t> qb(q.size()), kb(k.size()), vb(v.size());
        attn_convert(nullptr, int64_t(q.size()), q.data(), ATTN_DTYPE_F32, qb.data(), ATTN_DTYPE_BF16);
        attn_convert(nullptr, int64_t(k.size()), k.data(), ATTN_DTYPE_F32, kb.data(), ATTN_DTYPE_BF16);
        attn_convert(nullptr, int64_t(v.size()), v.data(), ATTN_DTYPE_F32, vb.data(), ATTN_DTYPE_BF16);
        std::vector<float> out(size_t(B * Hq * Lq * D)), lse(size_t(B * Hq * Lq));
        d.lse = lse.data();
        ASSERT_EQ(attn_sdpa(ctx(), &d, qb.data(), kb.data(), vb.data(), out.data()), ATTN_OK)
            << attn_last_error();
        std::vector<double> want_lse;
        const std::vector<double> want = attn_test::sdpa_features_double(d, qd, kd, vd, &want_lse);
        // the yardstick: the plain computation of the 16-bit rule on the stored values (f32
        // sums, P rounded to bf16 as V is bf16); floor 4e-6, about 32 f32 ulps at 1
        std::vector<float> plain_lse;
        const std::vector<float> plain = attn_test::sdpa_features_in<float>(
            d, attn_test::to_float(qd), attn_test::to_float(kd), attn_test::to_float(vd),
            &plain_lse, nullptr, nullptr, true);
        EXPECT_TRUE(attn_test::within_yardstick(out, plain, want, 4e-6)) << "Lq " << Lq;
        // lse: f32 sums of exact products of bf16 values, as the plain computation's
        EXPECT_TRUE(attn_test::within_yardstick(lse, plain_lse, want_lse, 4e-6)) << "Lq " << Lq;
    }
}

// V rows hidden by the window hold NaN: they are never read, so the output stays finite
// (tile loop, bf16 policy, decode kernel with rows of different windows, split keys).
TEST_P(features_16bit, WindowHiddenValueRowsNeverRead) {
    for (const int64_t Lq : {int64_t(1), int64_t(3), int64_t(200)}) {
        const int64_t Lk = Lq == 1 ? 2500 : 600, D = 16;
        attn_sdpa_desc d = attn_test::make_desc(1, 2, 2, Lq, Lk, D, D);
        d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        d.window_left = 33;
        const std::vector<float> q = attn_test::random_tensor(size_t(2 * Lq * D), 31);
        const std::vector<float> k = attn_test::random_tensor(size_t(2 * Lk * D), 32);
        std::vector<float> v = attn_test::random_tensor(size_t(2 * Lk * D), 33);
        const int64_t first_seen = Lk - Lq - 33;  // row 0's window starts here
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t j = 0; j < first_seen; ++j) v[size_t((h * Lk + j) * D)] = NAN;
        std::vector<float> out(size_t(2 * Lq * D));
        ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK);
        for (float x : out) ASSERT_TRUE(std::isfinite(x)) << "Lq " << Lq;
        std::vector<float> v_clean = v;
        for (float &x : v_clean) x = std::isnan(x) ? 0.0f : x;
        const std::vector<double> want = attn_test::sdpa_features_double(
            d, attn_test::to_double(q), attn_test::to_double(k), attn_test::to_double(v_clean));
        EXPECT_LT(attn_test::max_rel_error(out, want), 3e-5) << "Lq " << Lq;
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, features_16bit, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
