// Values of attn_gemm_f32 (row-major C = alpha op(A) op(B) + beta C) on every path:
// hand-computed products, both transposes, alpha/beta, beta == 0 ignoring NaN in C,
// odd and zero sizes, leading dimensions larger than the rows.
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::path_test;

// C = alpha op(A) op(B) + beta C in double, from the stored (possibly transposed) arrays.
std::vector<double> gemm_double(attn_trans ta, attn_trans tb, int64_t m, int64_t n, int64_t k,
                                double alpha, const std::vector<float> &a, int64_t lda,
                                const std::vector<float> &b, int64_t ldb, double beta,
                                const std::vector<float> &c, int64_t ldc) {
    std::vector<double> out(c.begin(), c.end());
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double dot = 0.0;
            for (int64_t p = 0; p < k; ++p)
                dot += double(ta == ATTN_TRANS ? a[p * lda + i] : a[i * lda + p]) *
                       double(tb == ATTN_TRANS ? b[j * ldb + p] : b[p * ldb + j]);
            out[i * ldc + j] = alpha * dot + (beta == 0.0 ? 0.0 : beta * c[i * ldc + j]);
        }
    return out;
}

class GemmValues : public path_test {};

// A = [[1,2,3],[4,5,6]], B = [[7,8],[9,10],[11,12]]: A B = [[58,64],[139,154]]. The same
// product is requested with A and/or B stored transposed; integers, so exact.
TEST_P(GemmValues, HandComputedAllTransposes) {
    const std::vector<float> a = {1, 2, 3, 4, 5, 6}, a_t = {1, 4, 2, 5, 3, 6};
    const std::vector<float> b = {7, 8, 9, 10, 11, 12}, b_t = {7, 9, 11, 8, 10, 12};
    const std::vector<float> want = {58, 64, 139, 154};
    for (attn_trans ta : {ATTN_NO_TRANS, ATTN_TRANS})
        for (attn_trans tb : {ATTN_NO_TRANS, ATTN_TRANS}) {
            std::vector<float> c(4, NAN);
            const auto &sa = ta == ATTN_TRANS ? a_t : a;
            const auto &sb = tb == ATTN_TRANS ? b_t : b;
            ASSERT_EQ(
                attn_gemm_f32(ctx(), ta, tb, 2, 2, 3, 1.0f, sa.data(), ta == ATTN_TRANS ? 2 : 3,
                              sb.data(), tb == ATTN_TRANS ? 3 : 2, 0.0f, c.data(), 2),
                ATTN_OK);
            EXPECT_EQ(c, want) << "trans_a=" << ta << " trans_b=" << tb;
        }
}

// C = 2 A B + 0.5 C with A B = [[58,64],[139,154]] and C = [[2,4],[6,8]].
TEST_P(GemmValues, AlphaAndBeta) {
    const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
    std::vector<float> c = {2, 4, 6, 8};
    ASSERT_EQ(attn_gemm_f32(ctx(), ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 3, 2.0f, a.data(), 3,
                            b.data(), 2, 0.5f, c.data(), 2),
              ATTN_OK);
    EXPECT_EQ(c, (std::vector<float>{117, 130, 281, 312}));
    // beta = 1 accumulates: C += A B.
    ASSERT_EQ(attn_gemm_f32(ctx(), ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 3, 1.0f, a.data(), 3,
                            b.data(), 2, 1.0f, c.data(), 2),
              ATTN_OK);
    EXPECT_EQ(c, (std::vector<float>{175, 194, 420, 466}));
}

// beta == 0 must not read C: NaN and infinity left in C do not reach the result.
TEST_P(GemmValues, BetaZeroIgnoresNaNInC) {
    const int64_t m = 9, n = 21, k = 7;
    const auto a = attn_test::random_tensor(m * k, 1), b = attn_test::random_tensor(k * n, 2);
    std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
    c[3] = INFINITY;
    const auto want = gemm_double(ATTN_NO_TRANS, ATTN_NO_TRANS, m, n, k, 1.5, a, k, b, n, 0.0,
                                  std::vector<float>(m * n, 0.0f), n);
    ASSERT_EQ(attn_gemm_f32(ctx(), ATTN_NO_TRANS, ATTN_NO_TRANS, m, n, k, 1.5f, a.data(), k,
                            b.data(), n, 0.0f, c.data(), n),
              ATTN_OK);
    EXPECT_LE(attn_test::max_rel_error(c, want), 1e-5);
}

// Odd sizes that are no multiple of any vector width or block, with every transpose and
// leading dimensions wider than the rows; the padding of C must stay untouched.
TEST_P(GemmValues, OddSizesAndLeadingDimensionsMatchDouble) {
    const float sentinel = -1234.5f;
    struct shape {
        int64_t m, n, k;
    };
    for (shape s : {shape{1, 1, 1}, shape{7, 13, 5}, shape{17, 3, 33}, shape{37, 29, 300}}) {
        for (attn_trans ta : {ATTN_NO_TRANS, ATTN_TRANS})
            for (attn_trans tb : {ATTN_NO_TRANS, ATTN_TRANS}) {
                const int64_t a_rows = ta == ATTN_TRANS ? s.k : s.m;
                const int64_t a_cols = ta == ATTN_TRANS ? s.m : s.k;
                const int64_t b_rows = tb == ATTN_TRANS ? s.n : s.k;
                const int64_t b_cols = tb == ATTN_TRANS ? s.k : s.n;
                const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = s.n + 2;
                const auto a = attn_test::random_tensor(a_rows * lda, 11);
                const auto b = attn_test::random_tensor(b_rows * ldb, 12);
                auto c = attn_test::random_tensor(s.m * ldc, 13);
                for (int64_t i = 0; i < s.m; ++i)
                    for (int64_t j = s.n; j < ldc; ++j) c[i * ldc + j] = sentinel;
                const auto want =
                    gemm_double(ta, tb, s.m, s.n, s.k, 0.75, a, lda, b, ldb, -0.5, c, ldc);
                ASSERT_EQ(attn_gemm_f32(ctx(), ta, tb, s.m, s.n, s.k, 0.75f, a.data(), lda,
                                        b.data(), ldb, -0.5f, c.data(), ldc),
                          ATTN_OK);
                // Each entry is a k-term float sum of products in [-1,1].
                const double tol = 2e-7 * double(s.k) + 1e-6;
                EXPECT_LE(attn_test::max_rel_error(c, want), tol)
                    << s.m << "x" << s.n << "x" << s.k << " trans_a=" << ta << " trans_b=" << tb;
                for (int64_t i = 0; i < s.m; ++i)
                    for (int64_t j = s.n; j < ldc; ++j)
                        ASSERT_EQ(c[i * ldc + j], sentinel) << "padding of C written";
            }
    }
}

// m or n = 0: nothing to do, C untouched. k = 0: op(A) op(B) is the zero matrix, so
// C = beta C (cblas semantics); with beta == 0 that is zeros even over NaN.
TEST_P(GemmValues, ZeroSizes) {
    const std::vector<float> a(12, 1.0f), b(12, 1.0f);
    std::vector<float> c = {1, 2, 3, 4};
    ASSERT_EQ(attn_gemm_f32(ctx(), ATTN_NO_TRANS, ATTN_NO_TRANS, 0, 2, 3, 1.0f, a.data(), 3,
                            b.data(), 2, 0.0f, c.data(), 2),
              ATTN_OK);
    ASSERT_EQ(attn_gemm_f32(ctx(), ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 0, 3, 1.0f, a.data(), 3,
                            b.data(), 1, 0.0f, c.data(), 2),
              ATTN_OK);
    EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4}));

    ASSERT_EQ(attn_gemm_f32(ctx(), ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 0, 1.0f, a.data(), 1,
                            b.data(), 2, 2.0f, c.data(), 2),
              ATTN_OK);
    EXPECT_EQ(c, (std::vector<float>{2, 4, 6, 8}));
    c.assign(4, NAN);
    ASSERT_EQ(attn_gemm_f32(ctx(), ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 0, 1.0f, a.data(), 1,
                            b.data(), 2, 0.0f, c.data(), 2),
              ATTN_OK);
    EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

// A larger product that crosses any cache block: against double at a k-scaled tolerance.
TEST_P(GemmValues, BlockedSizeMatchesDouble) {
    const int64_t m = 131, n = 97, k = 515;
    const auto a = attn_test::random_tensor(m * k, 21), b = attn_test::random_tensor(n * k, 22);
    std::vector<float> c(m * n, 0.0f);
    const auto want = gemm_double(ATTN_NO_TRANS, ATTN_TRANS, m, n, k, 1.0, a, k, b, k, 0.0, c, n);
    ASSERT_EQ(attn_gemm_f32(ctx(), ATTN_NO_TRANS, ATTN_TRANS, m, n, k, 1.0f, a.data(), k, b.data(),
                            k, 0.0f, c.data(), n),
              ATTN_OK);
    EXPECT_LE(attn_test::max_rel_error(c, want), 2e-7 * double(k));
}

INSTANTIATE_TEST_SUITE_P(Paths, GemmValues, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
