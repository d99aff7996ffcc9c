// Values of attn_softmax_f32 (y[i,:] = softmax(scale * x[i,:])) on every path: exact
// hand cases, huge magnitudes, -inf entries, all -inf rows, NaN rows, in place, padding.
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::path_test;
const float inf = std::numeric_limits<float>::infinity();

// softmax(scale * x) of each row in double; -inf entries weigh 0, all -inf rows are zeros.
std::vector<double> softmax_double(const std::vector<float> &x, int64_t rows, int64_t cols,
                                   double scale) {
    std::vector<double> y(x.size(), 0.0);
    for (int64_t i = 0; i < rows; ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j < cols; ++j)
            if (x[i * cols + j] != -inf) m = std::max(m, scale * x[i * cols + j]);
        if (m == -INFINITY) continue;
        double sum = 0.0;
        for (int64_t j = 0; j < cols; ++j)
            if (x[i * cols + j] != -inf) sum += std::exp(scale * x[i * cols + j] - m);
        for (int64_t j = 0; j < cols; ++j)
            if (x[i * cols + j] != -inf)
                y[i * cols + j] = std::exp(scale * x[i * cols + j] - m) / sum;
    }
    return y;
}

class SoftmaxValues : public path_test {
  protected:
    std::vector<float> run(const std::vector<float> &x, int64_t rows, int64_t cols,
                           float scale = 1.0f) {
        std::vector<float> y(x.size(), -7.0f);
        EXPECT_EQ(attn_softmax_f32(ctx(), rows, cols, scale, x.data(), cols, y.data(), cols),
                  ATTN_OK)
            << attn_last_error();
        return y;
    }
};

// softmax(0, ln 2, ln 3) = (1, 2, 3) / 6; scale ln 2 on (0, 1, 2) gives (1, 2, 4) / 7.
TEST_P(SoftmaxValues, HandComputed) {
    const auto y = run({0.0f, std::log(2.0f), std::log(3.0f)}, 1, 3);
    EXPECT_NEAR(y[0], 1.0 / 6, 1e-6);
    EXPECT_NEAR(y[1], 2.0 / 6, 1e-6);
    EXPECT_NEAR(y[2], 3.0 / 6, 1e-6);
    const auto z = run({0.0f, 1.0f, 2.0f}, 1, 3, std::log(2.0f));
    EXPECT_NEAR(z[0], 1.0 / 7, 1e-6);
    EXPECT_NEAR(z[1], 2.0 / 7, 1e-6);
    EXPECT_NEAR(z[2], 4.0 / 7, 1e-6);
}

// Random rows, widths around and beyond any vector width: rows sum to 1 and match double.
TEST_P(SoftmaxValues, RandomRowsMatchDoubleAndSumToOne) {
    for (int64_t cols : {1, 3, 8, 17, 64, 301}) {
        const int64_t rows = 13;
        const auto x = attn_test::random_tensor(rows * cols, uint32_t(cols), -6.0f, 6.0f);
        const auto y = run(x, rows, cols, 0.8f);
        EXPECT_LE(attn_test::max_rel_error(y, softmax_double(x, rows, cols, 0.8)), 1e-6)
            << "cols " << cols;
        for (int64_t i = 0; i < rows; ++i) {
            double sum = 0.0;
            for (int64_t j = 0; j < cols; ++j) sum += y[i * cols + j];
            EXPECT_NEAR(sum, 1.0, 1e-5) << "cols " << cols << " row " << i;
        }
    }
}

// Any finite magnitude, 1e30 included, without overflow to inf or NaN.
TEST_P(SoftmaxValues, HugeMagnitudesAreStable) {
    const std::vector<float> x = {
        1e30f,  1e30f,  -1e30f,  // row 0
        1e30f,  0.0f,   0.0f,    // row 1
        -1e30f, -1e30f, -1e30f,  // row 2
    };
    const auto y = run(x, 3, 3);
    const std::vector<float> want = {0.5f, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f, 1 / 3.f, 1 / 3.f, 1 / 3.f};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
}

// -inf entries get weight exactly 0; an all -inf row becomes zeros; other rows are unchanged.
TEST_P(SoftmaxValues, NegativeInfinityEntriesAndRows) {
    const std::vector<float> x = {
        0.0f, -inf, 0.0f, -inf,  // row 0
        -inf, -inf, -inf, -inf,  // row 1
        5.0f, -inf, -inf, -inf,  // row 2
    };
    const auto y = run(x, 3, 4);
    EXPECT_NEAR(y[0], 0.5f, 1e-7);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_NEAR(y[2], 0.5f, 1e-7);
    EXPECT_EQ(y[3], 0.0f);
    for (int j = 4; j < 8; ++j) EXPECT_EQ(y[j], 0.0f) << "all -inf row, column " << j - 4;
    EXPECT_EQ(y[8], 1.0f);
    for (int j = 9; j < 12; ++j) EXPECT_EQ(y[j], 0.0f);
}

// A NaN anywhere in a row makes that whole row NaN and leaves the other rows alone.
TEST_P(SoftmaxValues, NaNPoisonsOnlyItsRow) {
    const int64_t rows = 3, cols = 19;
    auto x = attn_test::random_tensor(rows * cols, 5);
    x[cols + 11] = std::numeric_limits<float>::quiet_NaN();
    const auto y = run(x, rows, cols);
    const auto want = softmax_double(x, rows, cols, 1.0);
    for (int64_t j = 0; j < cols; ++j) {
        EXPECT_TRUE(std::isnan(y[cols + j])) << "row 1, column " << j;
        EXPECT_NEAR(y[j], want[j], 1e-6);
        EXPECT_NEAR(y[2 * cols + j], want[2 * cols + j], 1e-6);
    }
}

// In place (x == y, ldx == ldy) equals out of place, bitwise.
TEST_P(SoftmaxValues, InPlaceEqualsOutOfPlace) {
    const int64_t rows = 7, cols = 45;
    auto x = attn_test::random_tensor(rows * cols, 9, -3.0f, 3.0f);
    x[4] = -inf;
    const auto y = run(x, rows, cols, 1.7f);
    ASSERT_EQ(attn_softmax_f32(ctx(), rows, cols, 1.7f, x.data(), cols, x.data(), cols), ATTN_OK);
    EXPECT_EQ(x, y);
}

// Leading dimensions wider than the rows: only the first cols entries of each row of y change.
TEST_P(SoftmaxValues, LeadingDimensions) {
    const int64_t rows = 5, cols = 11, ldx = 16, ldy = 13;
    const auto x = attn_test::random_tensor(rows * ldx, 3);
    std::vector<float> y(rows * ldy, 42.0f);
    ASSERT_EQ(attn_softmax_f32(ctx(), rows, cols, 1.0f, x.data(), ldx, y.data(), ldy), ATTN_OK);
    std::vector<float> packed(rows * cols);
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) packed[i * cols + j] = x[i * ldx + j];
    const auto want = softmax_double(packed, rows, cols, 1.0);
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) EXPECT_NEAR(y[i * ldy + j], want[i * cols + j], 1e-6);
        for (int64_t j = cols; j < ldy; ++j) EXPECT_EQ(y[i * ldy + j], 42.0f) << "padding written";
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, SoftmaxValues, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
