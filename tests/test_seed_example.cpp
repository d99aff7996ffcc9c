// The worked example of the source text (sections D and F), checked through the C API on
// every path: three tokens, d_k = 2, Q = K = [[1,0],[0,1],[1,1]], V = [[1,0],[0,2],[3,1]].
// Printed figures have 4 decimals, so each is checked to |got - printed| <= 5e-5.
#include <cmath>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::path_test;

constexpr double printed_tol = 5e-5;
const std::vector<float> q_tokens = {1, 0, 0, 1, 1, 1};  // Q = K, [3, 2]
const std::vector<float> v_tokens = {1, 0, 0, 2, 3, 1};  // V, [3, 2]

void expect_printed(const std::vector<float> &got, const std::vector<double> &printed,
                    const char *what) {
    ASSERT_EQ(got.size(), printed.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LE(std::fabs(double(got[i]) - printed[i]), printed_tol)
            << what << "[" << i / 3 << "," << i % 3 << "] = " << got[i] << ", printed "
            << printed[i];
}

class SeedExample : public path_test {
  protected:
    // One head, one batch: the seed's matrices, with the attention matrix and lse captured.
    void run_sdpa(attn_causal causal) {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, 1, 3, 3, 2);
        d.causal = causal;
        weights.assign(9, -1.0f);
        lse.assign(3, -1.0f);
        out.assign(6, -1.0f);
        d.weights = weights.data();
        d.lse = lse.data();
        ASSERT_EQ(
            attn_sdpa_f32(ctx(), &d, q_tokens.data(), q_tokens.data(), v_tokens.data(), out.data()),
            ATTN_OK)
            << attn_last_error();
    }
    std::vector<float> weights, lse, out;
};

// Step 1: Q K^T, every entry a small integer, so exact.
TEST_P(SeedExample, ScoresAreQTimesKTransposed) {
    std::vector<float> scores(9, NAN);
    ASSERT_EQ(attn_gemm_f32(ctx(), ATTN_NO_TRANS, ATTN_TRANS, 3, 3, 2, 1.0f, q_tokens.data(), 2,
                            q_tokens.data(), 2, 0.0f, scores.data(), 3),
              ATTN_OK);
    EXPECT_EQ(scores, (std::vector<float>{1, 0, 1, 0, 1, 1, 1, 1, 2}));
}

// Step 2: dividing by sqrt(2) is alpha = 0.7071 in the product.
TEST_P(SeedExample, ScaledScores) {
    std::vector<float> scaled(9, NAN);
    ASSERT_EQ(attn_gemm_f32(ctx(), ATTN_NO_TRANS, ATTN_TRANS, 3, 3, 2, 1.0f / std::sqrt(2.0f),
                            q_tokens.data(), 2, q_tokens.data(), 2, 0.0f, scaled.data(), 3),
              ATTN_OK);
    expect_printed(scaled, {0.7071, 0, 0.7071, 0, 0.7071, 0.7071, 0.7071, 0.7071, 1.4142},
                   "QK^T/sqrt(2)");
}

const std::vector<double> seed_a = {0.4011, 0.1978, 0.4011, 0.1978, 0.4011,
                                    0.4011, 0.2483, 0.2483, 0.5035};

// Step 3: the attention matrix A, from sdpa's weights and from softmax of the scores.
TEST_P(SeedExample, AttentionMatrix) {
    run_sdpa(ATTN_CAUSAL_NONE);
    expect_printed(weights, seed_a, "A");
    for (int i = 0; i < 3; ++i)
        EXPECT_NEAR(weights[3 * i] + weights[3 * i + 1] + weights[3 * i + 2], 1.0f, 1e-6);

    const std::vector<float> scores = {1, 0, 1, 0, 1, 1, 1, 1, 2};
    std::vector<float> a(9, NAN);
    ASSERT_EQ(attn_softmax_f32(ctx(), 3, 3, 1.0f / std::sqrt(2.0f), scores.data(), 3, a.data(), 3),
              ATTN_OK);
    expect_printed(a, seed_a, "softmax(QK^T/sqrt(2))");
}

// Step 3, row 1 by hand: e^0.7071 = 2.0281, e^0 = 1, row sum 5.0562. The lse is log of that
// sum, and exp(lse) * A[0,j] recovers each exponential.
TEST_P(SeedExample, RowOneExponentialsAndSum) {
    run_sdpa(ATTN_CAUSAL_NONE);
    EXPECT_NEAR(lse[0], std::log(5.0562), printed_tol);
    const double row_sum = std::exp(double(lse[0]));
    EXPECT_NEAR(row_sum, 5.0562, printed_tol);
    EXPECT_NEAR(row_sum * weights[0], 2.0281, printed_tol);
    EXPECT_NEAR(row_sum * weights[1], 1.0, printed_tol);
    EXPECT_NEAR(row_sum * weights[2], 2.0281, printed_tol);
}

// Step 4: Attention(Q, K, V) = A V.
TEST_P(SeedExample, Output) {
    run_sdpa(ATTN_CAUSAL_NONE);
    ASSERT_EQ(out.size(), 6u);
    const std::vector<double> printed = {1.6044, 0.7967, 1.4011, 1.2033, 1.7587, 1.0000};
    for (size_t i = 0; i < 6; ++i)
        EXPECT_LE(std::fabs(double(out[i]) - printed[i]), printed_tol)
            << "out[" << i / 2 << "," << i % 2 << "] = " << out[i];
}

// Section F: causal masking renormalises row 2 over positions 1 and 2 and leaves row 3.
TEST_P(SeedExample, CausalAttentionMatrix) {
    run_sdpa(ATTN_CAUSAL_TOP_LEFT);
    expect_printed(weights, {1.0, 0, 0, 0.3302, 0.6698, 0, 0.2483, 0.2483, 0.5035}, "A_causal");
    EXPECT_EQ(weights[1], 0.0f);  // masked weights are exactly zero
    EXPECT_EQ(weights[2], 0.0f);
    EXPECT_EQ(weights[5], 0.0f);
    // Row 1 sees only itself: its output is v_1 and its lse is its own scaled score 0.7071.
    EXPECT_NEAR(out[0], 1.0f, 1e-6);
    EXPECT_NEAR(out[1], 0.0f, 1e-6);
    EXPECT_NEAR(lse[0], 0.7071, printed_tol);
}

// Section E: turning token three's query moves only the third row of A; keys and values
// stay put, so rows 1 and 2 are bitwise unchanged.
TEST_P(SeedExample, TurningQueryThreeMovesOnlyRowThree) {
    run_sdpa(ATTN_CAUSAL_NONE);
    const std::vector<float> before = weights;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 3, 3, 2);
    const float angle = 0.6f;  // rotate q_3 = (1, 1) by 0.6 rad in the plane of the keys
    const std::vector<float> q = {1, 0, 0, 1, std::cos(angle) - std::sin(angle),
                                  std::sin(angle) + std::cos(angle)};
    std::vector<float> turned(9, NAN), out_turned(6);
    d.weights = turned.data();
    ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), q_tokens.data(), v_tokens.data(),
                            out_turned.data()),
              ATTN_OK);
    for (int x = 0; x < 6; ++x) EXPECT_EQ(turned[x], before[x]) << "row " << x / 3;
    double moved = 0.0;
    for (int x = 6; x < 9; ++x) moved += std::fabs(turned[x] - before[x]);
    EXPECT_GT(moved, 0.05);
}

INSTANTIATE_TEST_SUITE_P(Paths, SeedExample, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
