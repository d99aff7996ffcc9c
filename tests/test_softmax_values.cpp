// Values of attn_softmax_f32 (y[i,:] = softmax(scale * x[i,:])) on every path: exact
// hand cases, huge magnitudes, -inf entries, all -inf rows, NaN rows, in place, padding,
// and scale * x beyond the float range.
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::path_test;
const float inf = std::numeric_limits<float>::infinity();

// softmax(scale * x) of each row in double, on the products: a product of -inf weighs 0, a
// row of them is zeros (finite products only beside them).
std::vector<double> softmax_double(const std::vector<float> &x, int64_t rows, int64_t cols,
                                   double scale) {
    std::vector<double> y(x.size(), 0.0);
    auto product = [&](int64_t i, int64_t j) { return scale * double(x[i * cols + j]); };
    for (int64_t i = 0; i < rows; ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j < cols; ++j) m = std::max(m, product(i, j));
        if (m == -INFINITY) continue;
        double sum = 0.0;
        for (int64_t j = 0; j < cols; ++j) sum += std::exp(product(i, j) - m);
        for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = std::exp(product(i, j) - m) / sum;
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

// ---- scale * x beyond float (docs/validation.md, "Special values") -----------------------
// The weights are those of the exact products: the entries tied at the largest scale * x
// share the weight (1/count each, bitwise), every other entry gets 0; an entry whose product
// overflows to -inf is 0 like a masked one, unless every unmasked entry does; an infinite x
// counts by its product (x = -inf with scale < 0 is +inf: it takes the weight); NaN still
// makes the row NaN.
struct overflow_case {
    const char *name;
    float scale;
    std::vector<float> x, want;  // want: exact, or NaN for "all NaN"
};

std::vector<overflow_case> overflow_cases() {
    const float third = 1.0f / 3.0f, big = 3e38f, nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<overflow_case> cases = {
        {"one +inf product", 10.0f, {1.0f, big, -2.0f, 5.0f}, {0, 1, 0, 0}},
        {"two +inf products", 10.0f, {big, 0.0f, big}, {0.5f, 0, 0.5f}},
        {"three +inf products", 10.0f, {big, 7.0f, big, big}, {third, 0, third, third}},
        {"the largest of unequal +inf products", 10.0f, {2e38f, big, 1e38f, big / 2}, {0, 1, 0, 0}},
        {"negative scale", -10.0f, {-big, big, -big, 1.0f}, {0.5f, 0, 0.5f, 0}},
        {"with masked entries", 10.0f, {-inf, big, -inf, big, 4.0f}, {0, 0.5f, 0, 0.5f, 0}},
        {"-inf in x, negative scale: +inf products", -10.0f, {-inf, -big, 5.0f, -inf},
         {0.5f, 0, 0, 0.5f}},
        {"+inf in x, negative scale: -inf product", -1.0f, {inf}, {0}},
        {"-inf in x, negative scale: +inf product", -1.0f, {-inf}, {1}},
        {"two rows' worth: +inf in x, scale -1", -1.0f, {inf, inf}, {0, 0}},
        {"0 * -inf is NaN", 0.0f, {-inf, 1.0f}, {nan, nan}},
        {"NaN wins over overflow", 10.0f, {big, nan, 1.0f}, {nan, nan, nan}},
        {"0 * inf is NaN", 0.0f, {1.0f, inf, 2.0f}, {nan, nan, nan}},
        {"single column, +inf product", 10.0f, {big}, {1}},
        {"single column, -inf product", 10.0f, {-big}, {1}},
        {"every product -inf: the largest wins", 10.0f, {-big, -2e38f, -inf}, {0, 1, 0}},
        {"every finite product below the range, tied", -10.0f, {big, inf, big}, {0.5f, 0, 0.5f}},
        {"-inf in x beats overflow, negative scale", -10.0f, {big, -inf, big}, {0, 1, 0}},
        {"+inf in x", 1.0f, {inf, 1.0f, inf}, {0.5f, 0, 0.5f}},
        {"+inf in x, negative scale", -1.0f, {inf, 1.0f, -inf}, {0, 0, 1}},
        {"FLT_MAX without overflow", 1.0f, {3.4028235e38f, 3.4028235e38f, 0.0f}, {0.5f, 0.5f, 0}},
    };
    // 17 columns: products overflow in the vector body and in the tail of every ISA
    // (4, 8 and 16 lanes), among masked and -inf-overflowing entries.
    overflow_case wide{"17 columns", 10.0f, std::vector<float>(17), std::vector<float>(17, 0.0f)};
    for (int j = 0; j < 17; ++j) wide.x[size_t(j)] = j % 5 == 1 ? -inf : (j % 3 ? -big : float(j));
    for (int j : {2, 9, 16}) wide.x[size_t(j)] = big, wide.want[size_t(j)] = third;
    cases.push_back(wide);
    return cases;
}

void expect_overflow_row(const std::vector<float> &y, const overflow_case &c, const char *how) {
    for (size_t j = 0; j < c.want.size(); ++j) {
        if (std::isnan(c.want[j]))
            EXPECT_TRUE(std::isnan(y[j])) << c.name << ", " << how << ", column " << j;
        else
            EXPECT_EQ(y[j], c.want[j]) << c.name << ", " << how << ", column " << j;
    }
}

TEST_P(SoftmaxValues, OverflowingProductsShareTheWeightExactly) {
    for (const overflow_case &c : overflow_cases()) {
        const int64_t cols = int64_t(c.x.size());
        expect_overflow_row(run(c.x, 1, cols, c.scale), c, "out of place");
        std::vector<float> in_place = c.x;
        ASSERT_EQ(attn_softmax_f32(ctx(), 1, cols, c.scale, in_place.data(), cols,
                                   in_place.data(), cols),
                  ATTN_OK);
        expect_overflow_row(in_place, c, "in place");
    }
}

// A product that overflows to -inf next to finite ones weighs 0; the finite ones are the
// softmax of themselves, as in double. The row after it is unaffected.
TEST_P(SoftmaxValues, NegativeOverflowIsZeroBesideFiniteProducts) {
    const std::vector<float> x = {-3e38f, 1.0f, 2.5f, -3e38f, 0.5f,  // row 0, scale 10
                                  0.1f,   0.2f, 0.3f, 0.4f,   0.5f};
    const auto y = run(x, 2, 5, 10.0f);
    std::vector<float> finite = x;
    finite[0] = finite[3] = -inf;  // the same row with those two masked
    const auto want = softmax_double(finite, 2, 5, 10.0);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[3], 0.0f);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
}

// Infinite entries count by their products (attn.h, attn_softmax_f32): with scale < 0 an x of
// +inf weighs 0 beside finite products, which are the softmax of themselves; the two rows of
// the fuzzer's finding ([2, 1], scale -1: +inf -> 0, -inf -> 1), out of place and in place.
TEST_P(SoftmaxValues, InfiniteEntriesCountByTheirProducts) {
    const std::vector<float> x = {inf, 1.0f, 2.0f, inf, -0.5f,   // row 0, scale -1
                                  0.1f, inf, -3.0f, 0.4f, inf};  // row 1
    const auto y = run(x, 2, 5, -1.0f);
    const auto want = softmax_double(x, 2, 5, -1.0);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[6], 0.0f);

    const std::vector<float> finding = {inf, -inf};
    for (bool in_place : {false, true}) {
        std::vector<float> in = finding, separate(2, -7.0f);
        float *got = in_place ? in.data() : separate.data();
        ASSERT_EQ(attn_softmax_f32(ctx(), 2, 1, -1.0f, in.data(), 1, got, 1), ATTN_OK)
            << attn_last_error();
        EXPECT_EQ(got[0], 0.0f) << "x = +inf, scale = -1: a product of -inf, a masked row"
                                << (in_place ? ", in place" : "");
        EXPECT_EQ(got[1], 1.0f) << "x = -inf, scale = -1: a product of +inf takes the weight"
                                << (in_place ? ", in place" : "");
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, SoftmaxValues, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
