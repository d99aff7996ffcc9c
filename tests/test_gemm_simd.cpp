// The SIMD GEMM on every ISA this CPU runs: the micro-kernel alone on packed panels (edge
// tiles, beta == 0 with NaN in C, untouched memory around the tile), packing, then
// attn_gemm_f32 against the reference over a sweep of shapes, transposes, alpha/beta and
// leading dimensions, and bitwise equality of results for 1, 2 and 3 threads.
//
// Tolerance, for the SIMD path and the reference alike, with e(x) = max |x - exact| /
// (1 + |exact|) against the product in double computed here: e(path) <= 2 * e(plain) + 1e-6,
// plain the same product in plain float32 here.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/kernels.hpp"
#include "test_util.hpp"

namespace {

using attn_test::make_context;
using attn_test::path;
using attn_test::random_tensor;

const float nan_f = std::numeric_limits<float>::quiet_NaN();

class GemmSimd : public testing::TestWithParam<path> {
  protected:
    const attn::kernels::kernel_table &table() const {
        return *attn::kernels::kernel_table_for(GetParam().isa);
    }
};

// ---- micro-kernel ---------------------------------------------------------------------

// C[0:m_r, 0:n_r] = beta C + alpha A B on packed panels, for full and edge tiles; elements
// outside the tile (sentinels) must not change, and beta == 0 must ignore NaN in C.
TEST_P(GemmSimd, MicroKernelMatchesScalarLoopOnPackedPanels) {
    const auto &t = table();
    const int64_t MR = t.gemm_mr, NR = t.gemm_nr, kc = 37, ldc = NR + 5;
    const auto a = random_tensor(size_t(kc * MR), 1);
    const auto b = random_tensor(size_t(kc * NR), 2);
    const float sentinel = 12345.0f;
    for (int64_t m_r : {int64_t{1}, MR - 1, MR})
        for (int64_t n_r : {int64_t{1}, NR - 1, NR, int64_t(t.vector_floats) + 1})
            for (float beta : {0.0f, 0.5f}) {
                SCOPED_TRACE(testing::Message() << "m_r=" << m_r << " n_r=" << n_r
                                                << " beta=" << beta);
                // C gets one spare row and spare columns, all sentinels outside the tile.
                std::vector<float> c(size_t((MR + 1) * ldc), sentinel);
                const auto c0 = random_tensor(c.size(), 3);
                for (int64_t i = 0; i < m_r; ++i)
                    for (int64_t j = 0; j < n_r; ++j)
                        c[size_t(i * ldc + j)] = beta == 0.0f ? nan_f : c0[size_t(i * ldc + j)];
                t.gemm_micro_kernel(kc, 1.5f, a.data(), b.data(), beta, c.data(), ldc, m_r, n_r);
                for (int64_t i = 0; i <= MR; ++i)
                    for (int64_t j = 0; j < ldc; ++j) {
                        const float got = c[size_t(i * ldc + j)];
                        if (i >= m_r || j >= n_r) {
                            ASSERT_EQ(got, sentinel) << "wrote outside the tile at " << i << "," << j;
                            continue;
                        }
                        double dot = 0.0, mag = 0.0;
                        for (int64_t p = 0; p < kc; ++p) {
                            dot += double(a[size_t(p * MR + i)]) * b[size_t(p * NR + j)];
                            mag += std::fabs(double(a[size_t(p * MR + i)]) * b[size_t(p * NR + j)]);
                        }
                        const double want =
                            1.5 * dot + (beta == 0.0f ? 0.0 : beta * double(c0[size_t(i * ldc + j)]));
                        // fp32 accumulation of kc terms: |error| <= kc eps sum|a b| (+ rounding of C).
                        ASSERT_NEAR(got, want, 1.5 * kc * 6e-8 * mag + 1e-6) << i << "," << j;
                    }
            }
}

// Packing absorbs both transposes: the packed panels of A (stored m x k or k x m) and of
// B (stored k x n or n x k) are identical, and zero beyond the matrix edge.
TEST_P(GemmSimd, PackingAbsorbsTransposesAndZeroPads) {
    const auto &t = table();
    const int64_t MR = t.gemm_mr, NR = t.gemm_nr, mc = 2 * MR + 3, nc = NR + 7, kc = 19;
    const int64_t ld_pad = 4;
    const auto a = random_tensor(size_t(mc * (kc + ld_pad)), 4);  // op(A) = a, lda = kc + 4
    std::vector<float> a_t(size_t(kc * (mc + ld_pad)));          // the same op(A), stored k x m
    for (int64_t i = 0; i < mc; ++i)
        for (int64_t p = 0; p < kc; ++p) a_t[size_t(p * (mc + ld_pad) + i)] = a[size_t(i * (kc + ld_pad) + p)];
    const int64_t a_slivers = (mc + MR - 1) / MR;
    std::vector<float> pa(size_t(a_slivers * kc * MR), nan_f), pa_t(pa.size(), nan_f);
    t.gemm_pack_a(ATTN_NO_TRANS, mc, kc, a.data(), kc + ld_pad, pa.data());
    t.gemm_pack_a(ATTN_TRANS, mc, kc, a_t.data(), mc + ld_pad, pa_t.data());
    for (int64_t s = 0; s < a_slivers; ++s)
        for (int64_t p = 0; p < kc; ++p)
            for (int64_t r = 0; r < MR; ++r) {
                const int64_t i = s * MR + r;
                const float want = i < mc ? a[size_t(i * (kc + ld_pad) + p)] : 0.0f;
                const size_t at = size_t(s * kc * MR + p * MR + r);
                ASSERT_EQ(pa[at], want) << "A sliver " << s << " p " << p << " r " << r;
                ASSERT_EQ(pa_t[at], want) << "A^T sliver " << s << " p " << p << " r " << r;
            }

    const auto b = random_tensor(size_t(kc * (nc + ld_pad)), 5);  // op(B) = b, ldb = nc + 4
    std::vector<float> b_t(size_t(nc * (kc + ld_pad)));
    for (int64_t p = 0; p < kc; ++p)
        for (int64_t j = 0; j < nc; ++j) b_t[size_t(j * (kc + ld_pad) + p)] = b[size_t(p * (nc + ld_pad) + j)];
    const int64_t b_slivers = (nc + NR - 1) / NR;
    std::vector<float> pb(size_t(b_slivers * kc * NR), nan_f), pb_t(pb.size(), nan_f);
    t.gemm_pack_b(ATTN_NO_TRANS, kc, nc, b.data(), nc + ld_pad, pb.data());
    t.gemm_pack_b(ATTN_TRANS, kc, nc, b_t.data(), kc + ld_pad, pb_t.data());
    for (int64_t s = 0; s < b_slivers; ++s)
        for (int64_t p = 0; p < kc; ++p)
            for (int64_t q = 0; q < NR; ++q) {
                const int64_t j = s * NR + q;
                const float want = j < nc ? b[size_t(p * (nc + ld_pad) + j)] : 0.0f;
                const size_t at = size_t(s * kc * NR + p * NR + q);
                ASSERT_EQ(pb[at], want) << "B sliver " << s << " p " << p << " q " << q;
                ASSERT_EQ(pb_t[at], want) << "B^T sliver " << s << " p " << p << " q " << q;
            }
}

// ---- through the C API ----------------------------------------------------------------

struct gemm_case {
    int64_t m, n, k;
    attn_trans ta, tb;
    float alpha, beta;
    int64_t pad;  // lda, ldb, ldc exceed the row length by this much
};

struct gemm_operands {
    std::vector<float> a, b, c;
    int64_t lda, ldb, ldc;
};

gemm_operands make_operands(const gemm_case &g, uint32_t seed) {
    gemm_operands o;
    const int64_t a_rows = g.ta == ATTN_TRANS ? g.k : g.m, a_cols = g.ta == ATTN_TRANS ? g.m : g.k;
    const int64_t b_rows = g.tb == ATTN_TRANS ? g.n : g.k, b_cols = g.tb == ATTN_TRANS ? g.k : g.n;
    o.lda = a_cols + g.pad;
    o.ldb = b_cols + g.pad;
    o.ldc = g.n + g.pad;
    o.a = random_tensor(size_t(a_rows * o.lda), seed);
    o.b = random_tensor(size_t(b_rows * o.ldb), seed + 1);
    o.c = random_tensor(size_t(g.m * o.ldc), seed + 2);
    if (g.beta == 0.0f) std::fill(o.c.begin(), o.c.end(), nan_f);  // must not be read
    return o;
}

attn_status run_gemm(attn_context *ctx, const gemm_case &g, const gemm_operands &o,
                     std::vector<float> &c) {
    c = o.c;
    return attn_gemm_f32(ctx, g.ta, g.tb, g.m, g.n, g.k, g.alpha, o.a.data(), o.lda, o.b.data(),
                         o.ldb, g.beta, c.data(), o.ldc);
}

// The m x n result (padding columns dropped), as float and from a double product.
std::vector<float> dense(const gemm_case &g, const gemm_operands &o, const std::vector<float> &c) {
    std::vector<float> out(size_t(g.m * g.n));
    for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < g.n; ++j) out[size_t(i * g.n + j)] = c[size_t(i * o.ldc + j)];
    return out;
}

template <class T>
std::vector<T> product_in(const gemm_case &g, const gemm_operands &o) {
    std::vector<T> out(size_t(g.m * g.n));
    for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < g.n; ++j) {
            T dot = T(0);
            for (int64_t p = 0; p < g.k; ++p)
                dot += T(g.ta == ATTN_TRANS ? o.a[size_t(p * o.lda + i)] : o.a[size_t(i * o.lda + p)]) *
                       T(g.tb == ATTN_TRANS ? o.b[size_t(j * o.ldb + p)] : o.b[size_t(p * o.ldb + j)]);
            const T cij = g.beta == 0.0f ? T(0) : T(g.beta) * T(o.c[size_t(i * o.ldc + j)]);
            out[size_t(i * g.n + j)] = T(g.alpha) * dot + cij;
        }
    return out;
}

std::vector<gemm_case> sweep() {
    std::vector<gemm_case> cases;
    const int64_t shapes[][3] = {{1, 1, 1},     {1, 300, 7},    {300, 1, 13},   {5, 3, 300},
                                 {17, 31, 29},  {13, 33, 257},  {64, 64, 64},   {97, 101, 103},
                                 {127, 129, 1}, {128, 257, 255}, {211, 67, 300}};
    int variant = 0;
    for (auto &s : shapes)
        for (attn_trans ta : {ATTN_NO_TRANS, ATTN_TRANS})
            for (attn_trans tb : {ATTN_NO_TRANS, ATTN_TRANS}) {
                // Rotate alpha/beta/padding through the sweep so every combination of
                // transposes meets each of them on some shape.
                const float alphas[] = {1.0f, -0.75f, 2.0f};
                const float betas[] = {0.0f, 1.0f, -0.5f};
                cases.push_back({s[0], s[1], s[2], ta, tb, alphas[variant % 3],
                                 betas[(variant / 3) % 3], int64_t(variant % 2) * 3});
                ++variant;
            }
    cases.push_back({1025, 67, 513, ATTN_NO_TRANS, ATTN_TRANS, 1.0f, 0.0f, 0});
    cases.push_back({1025, 67, 513, ATTN_TRANS, ATTN_NO_TRANS, 0.5f, 2.0f, 1});
    return cases;
}

TEST_P(GemmSimd, MatchesReferenceOverShapesTransposesAndScalars) {
    auto simd = make_context(ATTN_IMPL_SIMD, GetParam().isa);
    auto ref = make_context(ATTN_IMPL_REFERENCE);
    ASSERT_TRUE(simd && ref);
    uint32_t seed = 100;
    for (const gemm_case &g : sweep()) {
        SCOPED_TRACE(testing::Message() << g.m << "x" << g.n << "x" << g.k << " ta=" << g.ta
                                        << " tb=" << g.tb << " alpha=" << g.alpha
                                        << " beta=" << g.beta << " pad=" << g.pad);
        const gemm_operands o = make_operands(g, seed += 3);
        std::vector<float> c_simd, c_ref;
        ASSERT_EQ(run_gemm(simd.get(), g, o, c_simd), ATTN_OK);
        ASSERT_EQ(run_gemm(ref.get(), g, o, c_ref), ATTN_OK);
        const auto got = dense(g, o, c_simd), want = dense(g, o, c_ref);
        const auto exact = product_in<double>(g, o);
        const auto plain = product_in<float>(g, o);
        // both paths against float64, the plain f32 product the yardstick; floor 1e-6 (8
        // float ulps at 1): the roundings of alpha and beta C, and sums in another order
        ASSERT_TRUE(attn_test::within_yardstick(got, plain, exact, 1e-6)) << "SIMD path";
        ASSERT_TRUE(attn_test::within_yardstick(want, plain, exact, 1e-6)) << "reference";
        // Padding columns of C are outside the matrix: untouched.
        for (int64_t i = 0; i < g.m; ++i)
            for (int64_t j = g.n; j < o.ldc; ++j)
                ASSERT_TRUE(std::memcmp(&c_simd[size_t(i * o.ldc + j)], &o.c[size_t(i * o.ldc + j)],
                                        sizeof(float)) == 0);
    }
}

// alpha == 0 and k == 0 leave beta * C (A and B unread: NaN in them does not matter).
TEST_P(GemmSimd, AlphaZeroOrEmptyDepthScalesC) {
    auto simd = make_context(ATTN_IMPL_SIMD, GetParam().isa);
    const int64_t m = 9, n = 11, k = 5;
    const std::vector<float> a(size_t(m * k), nan_f), b(size_t(k * n), nan_f);
    const auto c0 = random_tensor(size_t(m * n), 7);
    for (int64_t kk : {k, int64_t{0}}) {
        std::vector<float> c = c0;
        ASSERT_EQ(attn_gemm_f32(simd.get(), ATTN_NO_TRANS, ATTN_NO_TRANS, m, n, kk,
                                kk == 0 ? 1.0f : 0.0f, a.data(), k, b.data(), n, -2.0f, c.data(), n),
                  ATTN_OK);
        for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i], -2.0f * c0[i]);
        std::vector<float> c_nan(c0.size(), nan_f);
        ASSERT_EQ(attn_gemm_f32(simd.get(), ATTN_NO_TRANS, ATTN_NO_TRANS, m, n, kk, 0.0f, a.data(),
                                k, b.data(), n, 0.0f, c_nan.data(), n),
                  ATTN_OK);
        for (float x : c_nan) ASSERT_EQ(x, 0.0f);
    }
}

// The API promises bitwise identical results for every thread count: k is never split.
TEST_P(GemmSimd, BitwiseIdenticalForOneTwoThreeThreads) {
    ATTN_SKIP_UNLESS_THREADS(2);
    const gemm_case cases[] = {{1025, 67, 513, ATTN_NO_TRANS, ATTN_TRANS, 1.0f, 0.5f, 2},
                               {300, 300, 300, ATTN_TRANS, ATTN_NO_TRANS, -1.0f, 0.0f, 0},
                               {40, 700, 600, ATTN_NO_TRANS, ATTN_NO_TRANS, 1.0f, 1.0f, 0}};
    for (const gemm_case &g : cases) {
        SCOPED_TRACE(testing::Message() << g.m << "x" << g.n << "x" << g.k);
        const gemm_operands o = make_operands(g, 77);
        std::vector<float> first;
        for (int threads : {1, 2, 3}) {
            auto ctx = make_context(ATTN_IMPL_SIMD, GetParam().isa, threads);
            ASSERT_TRUE(ctx);
            std::vector<float> c;
            ASSERT_EQ(run_gemm(ctx.get(), g, o, c), ATTN_OK);
            if (threads == 1) {
                first = c;
                continue;
            }
            ASSERT_EQ(std::memcmp(c.data(), first.data(), c.size() * sizeof(float)), 0)
                << threads << " threads differ from 1 thread";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, GemmSimd, testing::ValuesIn(attn_test::simd_paths()),
                         attn_test::path_name);

}  // namespace
