// attn_softmax_f32 on the SIMD path of every ISA this CPU runs, against the reference:
// a sweep of row lengths (1..300 with odd and prime lengths, and long rows), scales of both
// signs, padded leading dimensions, in place; the special rows (masked entries, all masked,
// NaN, magnitudes of 1e30, scale * x beyond float, bitwise); bitwise equality of results for
// 1, 2 and 3 threads.
//
// Tolerance, for the SIMD path and the reference alike, with e(x) = max |x - exact| /
// (1 + |exact|) against softmax computed in double here: e(path) <= 2 * e(plain) + 1e-6,
// plain the same softmax in plain float32 here.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::make_context;
using attn_test::path;
using attn_test::random_tensor;

const float inf = std::numeric_limits<float>::infinity();
const float nan_f = std::numeric_limits<float>::quiet_NaN();

class SoftmaxSimd : public testing::TestWithParam<path> {
  protected:
    void SetUp() override {
        simd_ = make_context(ATTN_IMPL_SIMD, GetParam().isa);
        ref_ = make_context(ATTN_IMPL_REFERENCE);
        ASSERT_TRUE(simd_ && ref_);
    }
    attn_test::context_ptr simd_, ref_;
};

// softmax(scale * x) per row in the number type T, on the products: a product of -inf
// weighs 0; the rows here have finite products beside those. T = double: the oracle;
// T = float: the plain float32 computation, the yardstick.
template <class T>
std::vector<T> softmax_in(const std::vector<float> &x, int64_t rows, int64_t cols, int64_t ldx,
                          float scale) {
    std::vector<T> out(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
        auto product = [&](int64_t j) { return T(scale) * T(x[size_t(i * ldx + j)]); };
        T m = T(-INFINITY), sum = T(0);
        for (int64_t j = 0; j < cols; ++j) m = std::max(m, product(j));
        for (int64_t j = 0; j < cols; ++j) sum += T(std::exp(product(j) - m));
        for (int64_t j = 0; j < cols; ++j) out[size_t(i * cols + j)] = T(std::exp(product(j) - m)) / sum;
    }
    return out;
}

std::vector<float> dense(const std::vector<float> &y, int64_t rows, int64_t cols, int64_t ldy) {
    std::vector<float> out(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
        std::memcpy(&out[size_t(i * cols)], &y[size_t(i * ldy)], size_t(cols) * sizeof(float));
    return out;
}

TEST_P(SoftmaxSimd, MatchesReferenceOverLengthsScalesAndStrides) {
    const int64_t lengths[] = {1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 64, 97, 127, 211, 256, 300, 2053};
    const float scales[] = {1.0f, 0.125f, -2.0f, 0.0f, 30.0f};
    uint32_t seed = 10;
    for (int64_t cols : lengths)
        for (float scale : scales) {
            const int64_t rows = 7, ldx = cols + (cols % 3), ldy = cols + 1;
            SCOPED_TRACE(testing::Message() << "cols=" << cols << " scale=" << scale);
            auto x = random_tensor(size_t(rows * ldx), ++seed, -4.0f, 4.0f);
            // Mask a few entries (never a whole row here): the infinity whose product is -inf
            // (+inf for a negative scale; none exists for scale 0, where 0 * inf is NaN).
            const float masked = scale > 0.0f ? -inf : inf;
            for (int64_t i = 0; i < rows; ++i)
                if (cols > 1 && scale != 0.0f) x[size_t(i * ldx + (i * 7) % cols)] = masked;
            std::vector<float> y_simd(size_t(rows * ldy), -1.0f), y_ref = y_simd;
            ASSERT_EQ(attn_softmax_f32(simd_.get(), rows, cols, scale, x.data(), ldx, y_simd.data(), ldy), ATTN_OK);
            ASSERT_EQ(attn_softmax_f32(ref_.get(), rows, cols, scale, x.data(), ldx, y_ref.data(), ldy), ATTN_OK);
            const auto got = dense(y_simd, rows, cols, ldy), want = dense(y_ref, rows, cols, ldy);
            const auto exact = softmax_in<double>(x, rows, cols, ldx, scale);
            const auto plain = softmax_in<float>(x, rows, cols, ldx, scale);
            // both paths against float64, the plain f32 softmax the yardstick; floor 1e-6
            // (8 float ulps at 1): a few-ulp exp and a sum in another order
            ASSERT_TRUE(attn_test::within_yardstick(got, plain, exact, 1e-6)) << "SIMD path";
            ASSERT_TRUE(attn_test::within_yardstick(want, plain, exact, 1e-6)) << "reference";
            // Masked entries are exactly 0; each row sums to 1; the padding of y is untouched.
            for (int64_t i = 0; i < rows; ++i) {
                double sum = 0.0;
                for (int64_t j = 0; j < cols; ++j) {
                    if (std::isinf(x[size_t(i * ldx + j)])) ASSERT_EQ(got[size_t(i * cols + j)], 0.0f);
                    sum += got[size_t(i * cols + j)];
                }
                ASSERT_NEAR(sum, 1.0, 1e-5);
                ASSERT_EQ(y_simd[size_t(i * ldy + cols)], -1.0f);
            }
        }
}

TEST_P(SoftmaxSimd, InPlaceEqualsOutOfPlace) {
    const int64_t rows = 5, cols = 77;
    auto x = random_tensor(size_t(rows * cols), 3, -10.0f, 10.0f);
    std::vector<float> y(x.size());
    ASSERT_EQ(attn_softmax_f32(simd_.get(), rows, cols, 0.5f, x.data(), cols, y.data(), cols), ATTN_OK);
    ASSERT_EQ(attn_softmax_f32(simd_.get(), rows, cols, 0.5f, x.data(), cols, x.data(), cols), ATTN_OK);
    ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
}

// Row 0: all masked -> zeros. Row 1: one NaN -> all NaN. Row 2: magnitudes of 1e30 -> the
// same as the reference, finite. Row 3: one unmasked entry -> exactly 1 there. Row 4: +-1e30
// with one masked -> weight all on the largest.
TEST_P(SoftmaxSimd, SpecialRows) {
    const int64_t cols = 19;
    std::vector<float> x(size_t(5 * cols));
    for (int64_t j = 0; j < cols; ++j) {
        x[size_t(0 * cols + j)] = -inf;
        x[size_t(1 * cols + j)] = float(j);
        x[size_t(2 * cols + j)] = (j % 2 ? 1e30f : -1e30f) * float(j % 5) / 4.0f;
        x[size_t(3 * cols + j)] = j == 11 ? 3.0f : -inf;
        x[size_t(4 * cols + j)] = j == 18 ? 1e30f : (j == 3 ? -inf : -1e30f);
    }
    x[size_t(1 * cols + 13)] = nan_f;
    std::vector<float> y(x.size()), y_ref(x.size());
    ASSERT_EQ(attn_softmax_f32(simd_.get(), 5, cols, 1.0f, x.data(), cols, y.data(), cols), ATTN_OK);
    ASSERT_EQ(attn_softmax_f32(ref_.get(), 5, cols, 1.0f, x.data(), cols, y_ref.data(), cols), ATTN_OK);
    for (int64_t j = 0; j < cols; ++j) {
        EXPECT_EQ(y[size_t(0 * cols + j)], 0.0f) << j;
        EXPECT_TRUE(std::isnan(y[size_t(1 * cols + j)])) << j;
        EXPECT_TRUE(std::isfinite(y[size_t(2 * cols + j)])) << j;
        EXPECT_NEAR(y[size_t(2 * cols + j)], y_ref[size_t(2 * cols + j)], 1e-6) << j;
        EXPECT_EQ(y[size_t(3 * cols + j)], j == 11 ? 1.0f : 0.0f) << j;
        EXPECT_EQ(y[size_t(4 * cols + j)], j == 18 ? 1.0f : 0.0f) << j;
    }
}

// scale = 1e30 on values of order 1: the exponent at each row's maximum must be exactly 0
// (a fused scale*x - max leaves the product's rounding error there, ~1e23, and the row
// becomes NaN). One column: every weight is 1. Several: the largest entry takes all.
TEST_P(SoftmaxSimd, HugeScaleKeepsTheMaximumAtWeightOne) {
    const auto x = random_tensor(9 * 5, 21, -3.0f, 3.0f);
    std::vector<float> y(x.size(), -1.0f), y_ref(x.size(), -1.0f);
    ASSERT_EQ(attn_softmax_f32(simd_.get(), 9 * 5, 1, 1e30f, x.data(), 1, y.data(), 1), ATTN_OK);
    for (float v : y) ASSERT_EQ(v, 1.0f);
    for (float scale : {1e30f, -1e30f, 3e37f}) {
        ASSERT_EQ(attn_softmax_f32(simd_.get(), 9, 5, scale, x.data(), 5, y.data(), 5), ATTN_OK);
        ASSERT_EQ(attn_softmax_f32(ref_.get(), 9, 5, scale, x.data(), 5, y_ref.data(), 5), ATTN_OK);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], y_ref[i]) << "scale " << scale << " at " << i;
        // In place, pass 2 recomputes scale*x from x: it must round it as pass 1 did.
        std::vector<float> in_place = x;
        ASSERT_EQ(attn_softmax_f32(simd_.get(), 9, 5, scale, in_place.data(), 5, in_place.data(), 5),
                  ATTN_OK);
        ASSERT_TRUE(attn_test::bitwise_equal(in_place, y)) << "in place, scale " << scale;
    }
}

// Rows where scale * x overflows float, among ordinary rows: every length 1..40 and 77,
// scales +-10, 1 to 3 overflowing entries tied at the largest product, others overflowing
// below it, masked entries, rows whose every product is -inf. Overflow rows take exact
// values (1/count or 0), so the SIMD result equals the reference bitwise; in place too.
TEST_P(SoftmaxSimd, OverflowRowsEqualReferenceBitwise) {
    const float big = 3e38f;
    uint32_t seed = 70;
    for (int64_t cols = 1; cols <= 78; cols += cols < 40 ? 1 : 37)
        for (float scale : {10.0f, -10.0f}) {
            SCOPED_TRACE(testing::Message() << "cols=" << cols << " scale=" << scale);
            const int64_t rows = 6;
            const float sign = scale > 0 ? 1.0f : -1.0f;
            auto x = random_tensor(size_t(rows * cols), ++seed, -4.0f, 4.0f);
            auto at = [&](int64_t i, int64_t j) -> float & { return x[size_t(i * cols + j)]; };
            // Row 0 stays ordinary. Row r = 1, 2, 3: r entries tied at sign * big, one below
            // (also overflowing) when there is room. Row 4: every product -inf, one masked.
            // Row 5: -inf products beside finite ones (one column: the only entry, weight 1).
            for (int64_t r = 1; r <= 3; ++r) {
                for (int64_t t = 0; t < r; ++t) at(r, (t * 7 + r) % cols) = sign * big;
                if (cols > r) at(r, (r * 7 + 5) % cols) = at(r, (r * 7 + 5) % cols) == sign * big
                                                              ? sign * big
                                                              : sign * 2e38f;
            }
            for (int64_t j = 0; j < cols; ++j) at(4, j) = -sign * (big - float(j % 3) * 1e37f);
            if (cols > 1) at(4, cols / 2) = -inf;
            for (int64_t j = 0; j < cols; j += 3) at(5, j) = -sign * big;
            std::vector<float> y_simd(x.size(), -1.0f), y_ref(x.size(), -2.0f), in_place = x;
            auto run = [&](attn_context *ctx, const float *in, float *out) {
                return attn_softmax_f32(ctx, rows, cols, scale, in, cols, out, cols);
            };
            ASSERT_EQ(run(simd_.get(), x.data(), y_simd.data()), ATTN_OK);
            ASSERT_EQ(run(ref_.get(), x.data(), y_ref.data()), ATTN_OK);
            ASSERT_EQ(run(simd_.get(), in_place.data(), in_place.data()), ATTN_OK);
            ASSERT_TRUE(attn_test::bitwise_equal(in_place, y_simd));
            for (int64_t i = 0; i < rows; ++i) {
                double sum = 0.0;
                for (int64_t j = 0; j < cols; ++j) {
                    const size_t k = size_t(i * cols + j);
                    sum += y_simd[k];
                    if (i >= 1 && i <= 4) ASSERT_EQ(y_simd[k], y_ref[k]) << i << "," << j;
                    if (i >= 1 && i <= 3 && x[k] != sign * big)
                        ASSERT_EQ(y_simd[k], 0.0f) << i << "," << j;
                    if (i == 5 && cols > 1 && x[k] == -sign * big) ASSERT_EQ(y_simd[k], 0.0f) << j;
                    if (i == 0 || i == 5)
                        ASSERT_NEAR(y_simd[k], y_ref[k], 1e-6 * (1.0 + y_ref[k])) << i << "," << j;
                }
                ASSERT_NEAR(sum, 1.0, 1e-5) << "row " << i;
            }
        }
}

TEST_P(SoftmaxSimd, BitwiseIdenticalForOneTwoThreeThreads) {
    ATTN_SKIP_UNLESS_THREADS(2);
    const int64_t rows = 333, cols = 515;
    const auto x = random_tensor(size_t(rows * cols), 9, -6.0f, 6.0f);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
        auto ctx = make_context(ATTN_IMPL_SIMD, GetParam().isa, threads);
        ASSERT_TRUE(ctx);
        std::vector<float> y(x.size());
        ASSERT_EQ(attn_softmax_f32(ctx.get(), rows, cols, 0.7f, x.data(), cols, y.data(), cols), ATTN_OK);
        if (threads == 1)
            first = y;
        else
            ASSERT_EQ(std::memcmp(y.data(), first.data(), y.size() * sizeof(float)), 0) << threads;
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, SoftmaxSimd, testing::ValuesIn(attn_test::simd_paths()),
                         attn_test::path_name);

}  // namespace
