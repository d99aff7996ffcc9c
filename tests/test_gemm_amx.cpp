// attn_gemm with bf16 products on the AMX tile kernels (src/kernels/amx/gemm_amx.hpp), on the
// real tiles (amx) and on the tile model (amx_emulated, any CPU with avx512_bf16): against a
// float64 oracle, the two against each other bit for bit, and bitwise equal for 1, 2 and 3
// threads. A level this CPU lacks is skipped by name.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"
#include "test_util.hpp"

namespace {

using attn_test::make_context;

uint16_t to_bf16(float x) {  // round to nearest even (the values here are finite)
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
double from_bf16(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

struct shape {
    int64_t m, n, k;
    attn_trans ta, tb;
};

// The shapes: edges in every dimension (rows and columns past whole 32 x 32 blocks, an odd
// depth, a depth of two panels), and every transposition.
const shape shapes[] = {{37, 45, 70, ATTN_NO_TRANS, ATTN_NO_TRANS},
                        {33, 70, 1101, ATTN_NO_TRANS, ATTN_TRANS},
                        {64, 32, 95, ATTN_TRANS, ATTN_NO_TRANS},
                        {5, 3, 7, ATTN_TRANS, ATTN_TRANS}};

struct product {
    std::vector<uint16_t> a, b;
    std::vector<float> c0;
};

product inputs(const shape &s) {
    product p;
    for (float x : attn_test::random_tensor(size_t(s.m * s.k), 31, -2.0f, 2.0f)) p.a.push_back(to_bf16(x));
    for (float x : attn_test::random_tensor(size_t(s.k * s.n), 32, -2.0f, 2.0f)) p.b.push_back(to_bf16(x));
    p.c0 = attn_test::random_tensor(size_t(s.m * s.n), 33);
    return p;
}

// (alpha, beta): the general finish, and the two that accumulate whole blocks in C itself.
const std::pair<float, float> scalings[] = {{0.75f, -1.5f}, {1.0f, 0.0f}, {1.0f, 1.0f}};

std::vector<float> run(attn_isa isa, int threads, const shape &s, const product &p, float alpha,
                       float beta) {
    auto ctx = make_context(ATTN_IMPL_SIMD, isa, threads);
    EXPECT_TRUE(ctx) << attn_last_error();
    std::vector<float> c = p.c0;
    if (!ctx) return c;
    const int64_t lda = s.ta == ATTN_TRANS ? s.m : s.k, ldb = s.tb == ATTN_TRANS ? s.k : s.n;
    EXPECT_EQ(attn_gemm(ctx.get(), s.ta, s.tb, s.m, s.n, s.k, alpha, p.a.data(), ATTN_DTYPE_BF16,
                        lda, p.b.data(), ATTN_DTYPE_BF16, ldb, beta, c.data(), ATTN_DTYPE_F32, s.n),
              ATTN_OK)
        << attn_last_error();
    return c;
}

// Each element within (k + 4) f32 roundings of the float64 product of the same bf16 values:
// the products of two bf16 are exact in f32, and every product passes through at most k + 4
// rounded additions (its chain of at most k/2, the two chains' sum, the panels' and C's), each
// off by at most 2^-24 of the magnitudes summed.
void expect_near_oracle(const shape &s, const product &p, float alpha, float beta,
                        const std::vector<float> &c, const std::string &what) {
    const int64_t lda = s.ta == ATTN_TRANS ? s.m : s.k, ldb = s.tb == ATTN_TRANS ? s.k : s.n;
    int checked = 0;
    for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
            double sum = 0.0, magnitude = 0.0;
            for (int64_t q = 0; q < s.k; ++q) {
                const double x = from_bf16(p.a[size_t(s.ta == ATTN_TRANS ? q * lda + i : i * lda + q)]);
                const double y = from_bf16(p.b[size_t(s.tb == ATTN_TRANS ? j * ldb + q : q * ldb + j)]);
                sum += x * y;
                magnitude += std::fabs(x * y);
            }
            const double c0 = p.c0[size_t(i * s.n + j)];
            const double want = alpha * sum + beta * c0;
            const double bound = double(s.k + 4) * 0x1p-24 * (alpha * magnitude + std::fabs(beta * c0));
            ASSERT_LE(std::fabs(double(c[size_t(i * s.n + j)]) - want), bound)
                << what << " m " << s.m << " n " << s.n << " k " << s.k << " at " << i << "," << j;
            ++checked;
        }
    EXPECT_EQ(checked, s.m * s.n);
}

class gemm_amx : public testing::TestWithParam<std::pair<attn_isa, const char *>> {};

TEST_P(gemm_amx, oracle_and_thread_counts) {
    const auto [isa, name] = GetParam();
    if (!attn::kernels::isa_supported(isa))
        GTEST_SKIP() << name << ": this CPU (or its OS) lacks the level";
    const attn::kernels::kernel_table *kt = attn::kernels::kernel_table_for(isa);
    ASSERT_NE(kt->gemm_block_kernel_tiles, nullptr) << name << " runs GEMM on tiles";
    for (const shape &s : shapes)
        for (auto [alpha, beta] : scalings) {
            const product p = inputs(s);
            const std::vector<float> one = run(isa, 1, s, p, alpha, beta);
            expect_near_oracle(s, p, alpha, beta, one, name);
            for (int threads : {2, 3})
                EXPECT_TRUE(attn_test::bitwise_equal(one, run(isa, threads, s, p, alpha, beta)))
                    << name << " threads " << threads << " m " << s.m << " k " << s.k;
        }
}

INSTANTIATE_TEST_SUITE_P(levels, gemm_amx,
                         testing::Values(std::make_pair(ATTN_ISA_AMX, "amx"),
                                         std::make_pair(ATTN_ISA_AMX_EMULATED, "amx_emulated")),
                         [](const auto &info) { return std::string(info.param.second); });

// The model is the tiles: the same GEMM gives the same bits on both.
TEST(gemm_amx_model, equals_the_real_tiles_bitwise) {
    if (!attn::kernels::isa_supported(ATTN_ISA_AMX))
        GTEST_SKIP() << "amx: this CPU (or its OS) lacks the tiles; amx_emulated alone is tested";
    for (const shape &s : shapes)
        for (auto [alpha, beta] : scalings) {
            const product p = inputs(s);
            EXPECT_TRUE(attn_test::bitwise_equal(run(ATTN_ISA_AMX, 2, s, p, alpha, beta),
                                                 run(ATTN_ISA_AMX_EMULATED, 2, s, p, alpha, beta)))
                << "m " << s.m << " n " << s.n << " k " << s.k << " alpha " << alpha;
        }
}

// amx_emulated is chosen only when asked for: never by ATTN_ISA_AUTO, and the tile kernels
// are on the amx levels only.
TEST(gemm_amx_model, only_explicitly_and_only_on_the_amx_levels) {
    EXPECT_NE(attn::kernels::best_supported_isa(), ATTN_ISA_AMX_EMULATED);
    EXPECT_STRNE(attn_context_isa(nullptr), "amx_emulated");
    for (auto &p : attn_test::simd_paths()) {
        const bool amx = p.isa == ATTN_ISA_AMX || p.isa == ATTN_ISA_AMX_EMULATED;
        EXPECT_EQ(attn::kernels::kernel_table_for(p.isa)->gemm_block_kernel_tiles != nullptr, amx)
            << p.name;
    }
}

}  // namespace
