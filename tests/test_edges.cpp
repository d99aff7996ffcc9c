// Numerical edges, on every path (the reference and each SIMD ISA): scores of magnitude 1e30,
// NaN confined to its row, infinities, fully masked rows, denormals, a single key, dim 1,
// 100 000 keys of dim 1, and dropout_p just below 1. Expected values are exact where the
// mathematics makes them exact, otherwise the double-precision oracle of test_util.hpp.
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::random_tensor;
const float inf = std::numeric_limits<float>::infinity();

class edges : public attn_test::path_test {
  protected:
    // Dense sdpa: returns out; fills weights / lse when asked.
    std::vector<float> sdpa(attn_sdpa_desc d, const std::vector<float> &q, const std::vector<float> &k,
                            const std::vector<float> &v, std::vector<float> *weights = nullptr,
                            std::vector<float> *lse = nullptr) {
        std::vector<float> out(size_t(d.batch * d.heads_q * d.len_q * d.dim_v), -7.0f);
        if (weights) weights->assign(size_t(d.batch * d.heads_q * d.len_q * d.len_kv), -7.0f), d.weights = weights->data();
        if (lse) lse->assign(size_t(d.batch * d.heads_q * d.len_q), -7.0f), d.lse = lse->data();
        EXPECT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK) << attn_last_error();
        return out;
    }
    std::vector<float> softmax(int64_t rows, int64_t cols, float scale, const std::vector<float> &x) {
        std::vector<float> y(x.size(), -7.0f);
        EXPECT_EQ(attn_softmax_f32(ctx(), rows, cols, scale, x.data(), cols, y.data(), cols), ATTN_OK)
            << attn_last_error();
        return y;
    }
};

TEST_P(edges, softmax_of_magnitude_1e30_is_finite_and_exact) {
    // Two maxima at 1e30 share the weight; then scale 1e30 on ordinary values.
    std::vector<float> x = {1e30f, 0.0f, -1e30f, 1e30f, 1.0f, 0.5f, -2.0f, 1.0f};
    auto y = softmax(1, 4, 1.0f, x);
    EXPECT_EQ(y[0], 0.5f);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_EQ(y[2], 0.0f);
    EXPECT_EQ(y[3], 0.5f);
    auto z = softmax(1, 4, 1e30f, std::vector<float>(x.begin() + 4, x.end()));
    const float want[] = {0.5f, 0.0f, 0.0f, 0.5f};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(z[i], want[i]) << "element " << i;
}

TEST_P(edges, sdpa_scores_of_magnitude_1e30_pick_the_best_key) {
    // scale 1e30: scores 1e30, 5e29, -1e30 for every query; all weight on key 0.
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 2, 3, 2);
    d.scale = 1e30f;
    std::vector<float> q = {1, 0, 1, 0}, k = {1, 0, 0.5f, 0, -1, 0}, v = {3, -1, 5, 7, 11, 13};
    std::vector<float> w, lse;
    auto out = sdpa(d, q, k, v, &w, &lse);
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(out[i * 2 + 0], 3.0f);
        EXPECT_EQ(out[i * 2 + 1], -1.0f);
        EXPECT_EQ(w[i * 3 + 0], 1.0f);
        EXPECT_EQ(w[i * 3 + 1], 0.0f);
        EXPECT_NEAR(lse[i], 1e30, 1e24);
    }
}

// A NaN in a row makes that row NaN (the softmax contract, which A = softmax(scale q.k + mask)
// inherits), and no other row.
TEST_P(edges, nan_stays_in_its_row) {
    std::vector<float> x = random_tensor(3 * 20, 1);
    auto clean = softmax(3, 20, 1.0f, x);
    x[20 + 7] = NAN;
    auto y = softmax(3, 20, 1.0f, x);
    for (int j = 0; j < 20; ++j) {
        EXPECT_TRUE(std::isnan(y[20 + j])) << "softmax row 1, column " << j;
        EXPECT_EQ(y[j], clean[j]);
        EXPECT_EQ(y[40 + j], clean[40 + j]);
    }
    // sdpa: NaN in query row 2 of head 1 makes that output row NaN and no other.
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 2, 5, 9, 8);
    auto q = random_tensor(2 * 5 * 8, 2), k = random_tensor(2 * 9 * 8, 3), v = random_tensor(2 * 9 * 8, 4);
    auto base = sdpa(d, q, k, v);
    q[(5 + 2) * 8 + 3] = NAN;
    auto out = sdpa(d, q, k, v);
    for (int64_t r = 0; r < 10; ++r)
        for (int64_t e = 0; e < 8; ++e) {
            if (r == 7) EXPECT_TRUE(std::isnan(out[r * 8 + e])) << "row " << r;
            else EXPECT_NEAR(out[r * 8 + e], base[r * 8 + e], 1e-6) << "row " << r;
        }
}

TEST_P(edges, infinities) {
    // -inf entries get weight 0; an all -inf row becomes zeros.
    std::vector<float> x = {0.0f, -inf, 0.0f, -inf, -inf, -inf, -inf, -inf};
    auto y = softmax(2, 4, 1.0f, x);
    const float want[] = {0.5f, 0.0f, 0.5f, 0.0f, 0, 0, 0, 0};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(y[i], want[i]) << "element " << i;
    // +inf in a value every query weighs positively: that output column is +inf, the rest finite.
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 3, 4, 2);
    auto q = random_tensor(6, 5), k = random_tensor(8, 6), v = random_tensor(8, 7);
    v[2 * 2 + 1] = inf;
    auto out = sdpa(d, q, k, v);
    for (int i = 0; i < 3; ++i) {
        EXPECT_TRUE(std::isfinite(out[i * 2])) << "row " << i;
        EXPECT_EQ(out[i * 2 + 1], inf) << "row " << i;
    }
    // A -inf mask entry hides exactly that key: same result as a causal mask.
    attn_sdpa_desc_init(&d, 1, 1, 4, 4, 3);
    auto q2 = random_tensor(12, 8), k2 = random_tensor(12, 9), v2 = random_tensor(12, 10);
    std::vector<float> mask(16, 0.0f);
    for (int i = 0; i < 4; ++i)
        for (int j = i + 1; j < 4; ++j) mask[i * 4 + j] = -inf;
    d.mask = mask.data();
    d.mask_strides = attn_layout{0, 0, 4};
    auto masked = sdpa(d, q2, k2, v2);
    d.mask = nullptr;
    d.causal = ATTN_CAUSAL_TOP_LEFT;
    auto causal = sdpa(d, q2, k2, v2);
    EXPECT_LE(attn_test::max_rel_error(masked.data(), causal.data(), masked.size()), 1e-6);
}

TEST_P(edges, fully_masked_rows_are_zero_with_lse_minus_inf) {
    // Batch 1 has kv_len 0; with bottom-right causal and len_q > len_kv, rows 0 and 1 of
    // batch 0 see no key either.
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 2, 2, 5, 3, 4);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    std::vector<int32_t> kv_len = {3, 0};
    d.kv_len = kv_len.data();
    auto q = random_tensor(2 * 2 * 5 * 4, 11), k = random_tensor(2 * 2 * 3 * 4, 12), v = random_tensor(2 * 2 * 3 * 4, 13);
    std::vector<float> w, lse;
    auto out = sdpa(d, q, k, v, &w, &lse);
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t i = 0; i < 5; ++i) {
                int64_t r = (b * 2 + h) * 5 + i;
                bool empty = b == 1 || i < 2;
                if (!empty) {
                    EXPECT_TRUE(std::isfinite(lse[r])) << "row " << r;
                    continue;
                }
                EXPECT_EQ(lse[r], -inf) << "row " << r;
                for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(out[r * 4 + e], 0.0f) << "row " << r;
                for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(w[r * 3 + j], 0.0f) << "row " << r;
            }
}

TEST_P(edges, denormal_inputs) {
    // q of 1e-40 (denormal): every score is ~0, the weights uniform, out the mean of v.
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 3, 16, 8);
    std::vector<float> q(3 * 8, 1e-40f);
    auto k = random_tensor(16 * 8, 14), v = random_tensor(16 * 8, 15);
    auto out = sdpa(d, q, k, v);
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t e = 0; e < 8; ++e) {
            double mean = 0.0;
            for (int64_t j = 0; j < 16; ++j) mean += v[j * 8 + e] / 16.0;
            EXPECT_NEAR(out[i * 8 + e], mean, 1e-6);
        }
    // Denormal values: the output is tiny, finite, and never NaN.
    std::vector<float> tiny(16 * 8);
    for (size_t i = 0; i < tiny.size(); ++i) tiny[i] = v[i] * 1e-39f;
    auto small = sdpa(d, random_tensor(3 * 8, 16), k, tiny);
    for (float x : small) EXPECT_TRUE(std::isfinite(x) && std::fabs(x) < 1e-38f) << x;
    auto y = softmax(1, 5, 1.0f, std::vector<float>{1e-40f, -1e-40f, 0.0f, 1e-45f, 1e-39f});
    for (float p : y) EXPECT_NEAR(p, 0.2f, 1e-7f);
}

TEST_P(edges, a_single_key_gets_all_the_weight) {
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 2, 3, 7, 1, 5);
    auto q = random_tensor(2 * 3 * 7 * 5, 17), k = random_tensor(2 * 3 * 5, 18), v = random_tensor(2 * 3 * 5, 19);
    std::vector<float> lse;
    auto out = sdpa(d, q, k, v, nullptr, &lse);
    for (int64_t bh = 0; bh < 6; ++bh)
        for (int64_t i = 0; i < 7; ++i) {
            double score = 0.0;
            for (int64_t e = 0; e < 5; ++e) {
                EXPECT_NEAR(out[(bh * 7 + i) * 5 + e], v[bh * 5 + e], 1e-7) << "head " << bh << " row " << i;
                score += double(q[(bh * 7 + i) * 5 + e]) * k[bh * 5 + e];
            }
            EXPECT_NEAR(lse[bh * 7 + i], score * d.scale, 1e-6);
        }
}

TEST_P(edges, dim_1_and_long_rows) {
    // dim 1, and 100 000 keys of dim 1 for two queries: against the double oracle.
    for (int64_t len_kv : {int64_t(13), int64_t(100000)}) {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, 1, 2, len_kv, 1);
        auto q = random_tensor(2, 20, -2.0f, 2.0f), k = random_tensor(size_t(len_kv), 21, -2.0f, 2.0f);
        auto v = random_tensor(size_t(len_kv), 22, 0.0f, 1.0f);
        std::vector<float> lse;
        auto out = sdpa(d, q, k, v, nullptr, &lse);
        std::vector<double> want_lse;
        auto want = attn_test::sdpa_double(d, attn_test::to_double(q), attn_test::to_double(k),
                                           attn_test::to_double(v), &want_lse);
        EXPECT_LE(attn_test::max_rel_error(out, want), 1e-4) << "len_kv " << len_kv;
        EXPECT_LE(attn_test::max_rel_error(lse, want_lse), 1e-4) << "len_kv " << len_kv;
    }
    std::vector<float> x = random_tensor(100000, 23, -30.0f, 30.0f);
    auto y = softmax(1, 100000, 1.0f, x);
    double sum = 0.0;
    for (float p : y) sum += p;
    EXPECT_NEAR(sum, 1.0, 1e-4);
}

TEST_P(edges, dropout_just_below_one) {
    // p = 0.999999: nearly every weight dropped, the kept ones scaled by ~1e6; the weights
    // output is the softmax before dropout.
    const int64_t len_q = 16, len_kv = 65536, rows = 2 * len_q;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 2, len_q, len_kv, 4);
    d.dropout_p = 0.999999f;
    // The test means something only if a few of the 2M weights survive (about 2 expected):
    // take the first seed for which some do.
    const uint32_t thresh = attn::dropout::threshold(d.dropout_p);
    int kept = 0;
    for (d.dropout_seed = 1; kept == 0 && d.dropout_seed < 100; ++d.dropout_seed)
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t i = 0; i < len_q; ++i)
                for (int64_t j = 0; j < len_kv; ++j)
                    kept += !attn::dropout::dropped(attn::dropout::row_key(d.dropout_seed, 0, h, i), j, thresh);
    --d.dropout_seed;
    ASSERT_GT(kept, 0);
    auto q = random_tensor(size_t(rows * 4), 24), k = random_tensor(size_t(2 * len_kv * 4), 25);
    auto v = random_tensor(size_t(2 * len_kv * 4), 26);
    std::vector<float> w;
    auto out = sdpa(d, q, k, v, &w);
    auto want = attn_test::sdpa_double(d, attn_test::to_double(q), attn_test::to_double(k), attn_test::to_double(v));
    int nonzero = 0;
    for (float x : out) {
        EXPECT_TRUE(std::isfinite(x));
        nonzero += x != 0.0f;
    }
    EXPECT_GT(nonzero, 0);
    EXPECT_LE(attn_test::max_rel_error(out, want), 1e-4);
    for (int64_t r = 0; r < rows; ++r) {
        double sum = 0.0;
        for (int64_t j = 0; j < len_kv; ++j) sum += w[size_t(r * len_kv + j)];
        EXPECT_NEAR(sum, 1.0, 1e-4) << "row " << r;
    }
}

INSTANTIATE_TEST_SUITE_P(all, edges, testing::ValuesIn(attn_test::all_paths()), attn_test::path_name);

}  // namespace
