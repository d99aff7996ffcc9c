// Argument validation of attn_gemm_f32, attn_softmax_f32 and attn_merge_f32: one case per
// rule, on the reference and the SIMD implementation. Each case checks the status, that the
// message names the function, the argument and its value, and that no byte of any tensor
// changed. (SDPA and MHA: test_api_validation_attention.cpp.)
#include <cmath>
#include <cstdint>
#include <limits>

#include "test_api_harness.hpp"

namespace {

using attn_test::rule_case;
using attn_test::tensor_pool;

constexpr int64_t kHuge = int64_t(1) << 62;

// ---------------------------------------------------------------------------------------
// gemm: C[3,4] = A[3,5] B[5,4] (+ 0.5 C). A and B have room for the transposed variants.
struct gemm_call {
    static constexpr const char *function = "attn_gemm_f32";
    tensor_pool pool{512};
    // Held as int, as a C caller would: an int outside the enum is still a valid argument.
    int trans_a = ATTN_NO_TRANS, trans_b = ATTN_NO_TRANS;
    int64_t m = 3, n = 4, k = 5, lda = 5, ldb = 4, ldc = 4;
    float alpha = 1.0f, beta = 0.5f;
    float *a = pool.input(30), *b = pool.input(30), *c = pool.output(24);
    attn_status run(attn_context *ctx) {
        return attn_gemm_f32(ctx, attn_trans(trans_a), attn_trans(trans_b), m, n, k, alpha, a, lda,
                             b, ldb, beta, c, ldc);
    }
};

std::vector<rule_case<gemm_call>> gemm_rules() {
    using g = gemm_call;
    return {
        {"trans_a unknown", [](g &x) { x.trans_a = 2; }, {"trans_a = 2"}},
        {"trans_b unknown", [](g &x) { x.trans_b = -1; }, {"trans_b = -1"}},
        {"m negative", [](g &x) { x.m = -1; }, {"m = -1", ">= 0"}},
        {"n negative", [](g &x) { x.n = -2; }, {"n = -2"}},
        {"k negative", [](g &x) { x.k = -3; }, {"k = -3"}},
        {"lda below k", [](g &x) { x.lda = 4; }, {"lda = 4", "max(1, k) = 5"}},
        {"lda below m when A is transposed",
         [](g &x) {
             x.trans_a = ATTN_TRANS;
             x.lda = 2;
         },
         {"lda = 2", "max(1, m) = 3"}},
        {"ldb below n", [](g &x) { x.ldb = 3; }, {"ldb = 3", "max(1, n) = 4"}},
        {"ldb below k when B is transposed",
         [](g &x) {
             x.trans_b = ATTN_TRANS;
             x.ldb = 4;
         },
         {"ldb = 4", "max(1, k) = 5"}},
        {"ldc below n", [](g &x) { x.ldc = 3; }, {"ldc = 3"}},
        {"ldc zero with n zero", [](g &x) { x.n = 0, x.ldb = 1, x.ldc = 0; }, {"ldc = 0"}},
        {"a null", [](g &x) { x.a = nullptr; }, {"a = NULL", "m * k > 0"}},
        {"b null", [](g &x) { x.b = nullptr; }, {"b = NULL"}},
        {"c null", [](g &x) { x.c = nullptr; }, {"c = NULL"}},
        {"c is a", [](g &x) { x.c = x.a; }, {"c = ", "overlaps a = "}},
        {"c overlaps the end of b", [](g &x) { x.c = x.b + 19; }, {"c = ", "overlaps b = "}},
        {"extent of a overflows", [](g &x) { x.m = kHuge; },
         {"a = [size 4611686018427387904 stride 5", "overflows"}},
        {"extent of c overflows", [](g &x) { x.ldc = kHuge; },
         {"c = [size 3 stride 4611686018427387904", "overflows"}},
    };
}

// ---------------------------------------------------------------------------------------
// softmax: y[3,4] = softmax(x[3,4]); x and y have room for wider leading dimensions.
struct softmax_call {
    static constexpr const char *function = "attn_softmax_f32";
    tensor_pool pool{256};
    int64_t rows = 3, cols = 4, ldx = 4, ldy = 4;
    float scale = 0.5f;
    float *x = pool.input(24);
    float *y = pool.output(24);
    attn_status run(attn_context *ctx) {
        return attn_softmax_f32(ctx, rows, cols, scale, x, ldx, y, ldy);
    }
};

std::vector<rule_case<softmax_call>> softmax_rules() {
    using s = softmax_call;
    const float inf = std::numeric_limits<float>::infinity();
    return {
        {"rows negative", [](s &x) { x.rows = -1; }, {"rows = -1"}},
        {"cols negative", [](s &x) { x.cols = -4; }, {"cols = -4"}},
        {"scale NaN", [](s &x) { x.scale = std::nanf(""); }, {"scale = nan", "finite"}},
        {"scale infinite", [=](s &x) { x.scale = -inf; }, {"scale = -inf"}},
        {"ldx below cols", [](s &x) { x.ldx = 3; }, {"ldx = 3", "max(1, cols) = 4"}},
        {"ldy below cols", [](s &x) { x.ldy = 2; }, {"ldy = 2"}},
        {"x null", [](s &x) { x.x = nullptr; }, {"x = NULL", "rows * cols > 0"}},
        {"y null", [](s &x) { x.y = nullptr; }, {"y = NULL"}},
        {"y overlaps x shifted", [](s &x) { x.y = x.x + 1; }, {"y = ", "overlaps x = "}},
        {"y is x with another leading dimension",
         [](s &x) {
             x.x = x.y;
             x.ldy = 5;
         },
         {"ldy = 5", "ldx = 4", "ldx == ldy"}},
        {"extent overflows", [](s &x) { x.ldx = kHuge; }, {"x = [size 3 stride", "overflows"}},
    };
}

// ---------------------------------------------------------------------------------------
// merge: 3 parts of [4, 5] with their lse, into out [4, 5] and lse [4].
struct merge_call {
    static constexpr const char *function = "attn_merge_f32";
    tensor_pool pool{512};
    int64_t parts = 3, rows = 4, dim_v = 5;
    std::vector<const float *> outs_array, lses_array;
    const float *const *outs;
    const float *const *lses;
    float *out = pool.output(20), *lse = pool.output(4);
    merge_call() {
        for (int p = 0; p < 3; ++p) {
            outs_array.push_back(pool.input(20));
            lses_array.push_back(pool.input(4));
        }
        outs = outs_array.data();
        lses = lses_array.data();
        pool.watch(outs_array.data(), 3 * sizeof(float *));
        pool.watch(lses_array.data(), 3 * sizeof(float *));
    }
    attn_status run(attn_context *ctx) {
        return attn_merge_f32(ctx, parts, rows, dim_v, outs, lses, out, lse);
    }
};

std::vector<rule_case<merge_call>> merge_rules() {
    using m = merge_call;
    return {
        {"parts zero", [](m &x) { x.parts = 0; }, {"parts = 0", ">= 1"}},
        {"rows negative", [](m &x) { x.rows = -1; }, {"rows = -1"}},
        {"dim_v zero", [](m &x) { x.dim_v = 0; }, {"dim_v = 0"}},
        {"rows * dim_v overflows", [](m &x) { x.rows = kHuge, x.dim_v = 8; },
         {"rows * dim_v = 4611686018427387904 * 8", "overflows"}},
        {"outs null", [](m &x) { x.outs = nullptr; }, {"outs = NULL"}},
        {"lses null", [](m &x) { x.lses = nullptr; }, {"lses = NULL"}},
        {"out null", [](m &x) { x.out = nullptr; }, {"out = NULL"}},
        {"outs[1] null", [](m &x) { x.outs_array[1] = nullptr; }, {"outs[1] = NULL"}},
        {"lses[2] null", [](m &x) { x.lses_array[2] = nullptr; }, {"lses[2] = NULL"}},
        {"out is outs[2]", [](m &x) { x.out = const_cast<float *>(x.outs_array[2]); },
         {"out = ", "overlaps outs[2] = "}},
        {"lse is lses[0]", [](m &x) { x.lse = const_cast<float *>(x.lses_array[0]); },
         {"lse = ", "overlaps lses[0] = "}},
        {"lse inside out", [](m &x) { x.lse = x.out + 16; }, {"out = ", "overlaps lse = "}},
        {"out over the pointer array",
         [](m &x) { x.out = reinterpret_cast<float *>(x.outs_array.data()); },
         {"out = ", "overlaps outs = "}},
    };
}

// ---------------------------------------------------------------------------------------

class ApiValidation : public testing::TestWithParam<attn_test::path> {
protected:
    void SetUp() override {
        ctx_ = attn_test::make_context(GetParam().impl, GetParam().isa);
        ASSERT_TRUE(ctx_) << attn_last_error();
    }
    attn_test::context_ptr ctx_;
};

TEST_P(ApiValidation, GemmRules) {
    attn_test::expect_baseline_writes<gemm_call>(ctx_.get());
    for (const auto &rule : gemm_rules()) attn_test::expect_rejected(ctx_.get(), rule);
}

TEST_P(ApiValidation, SoftmaxRules) {
    attn_test::expect_baseline_writes<softmax_call>(ctx_.get());
    for (const auto &rule : softmax_rules()) attn_test::expect_rejected(ctx_.get(), rule);
}

TEST_P(ApiValidation, MergeRules) {
    attn_test::expect_baseline_writes<merge_call>(ctx_.get());
    for (const auto &rule : merge_rules()) attn_test::expect_rejected(ctx_.get(), rule);
}

// Empty shapes need no data at all; k == 0 still scales C by beta.
TEST_P(ApiValidation, GemmEmptyShapesNeedNoData) {
    EXPECT_EQ(attn_gemm_f32(ctx_.get(), ATTN_NO_TRANS, ATTN_NO_TRANS, 0, 4, 5, 1.0f, nullptr, 5,
                            nullptr, 4, 0.0f, nullptr, 4),
              ATTN_OK);
    EXPECT_EQ(attn_gemm_f32(ctx_.get(), ATTN_NO_TRANS, ATTN_NO_TRANS, 3, 0, 5, 1.0f, nullptr, 5,
                            nullptr, 1, 0.0f, nullptr, 1),
              ATTN_OK);
    float c[6] = {1, 2, 3, 4, 5, 6};
    ASSERT_EQ(attn_gemm_f32(ctx_.get(), ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, 0, 1.0f, nullptr, 1,
                            nullptr, 3, 0.5f, c, 3),
              ATTN_OK)
        << attn_last_error();
    for (int i = 0; i < 6; ++i) EXPECT_EQ(c[i], 0.5f * float(i + 1));
}

// Softmax in place (x == y, ldx == ldy) is allowed and gives rows summing to 1.
TEST_P(ApiValidation, SoftmaxInPlaceIsAllowed) {
    float x[2][5] = {{1, 2, 3, 4, 99}, {0, 0, 0, 0, 99}};
    ASSERT_EQ(attn_softmax_f32(ctx_.get(), 2, 4, 1.0f, &x[0][0], 5, &x[0][0], 5), ATTN_OK)
        << attn_last_error();
    for (auto &row : x) {
        EXPECT_NEAR(row[0] + row[1] + row[2] + row[3], 1.0f, 1e-6f);
        EXPECT_EQ(row[4], 99.0f);  // beyond cols: untouched
    }
    EXPECT_NEAR(x[1][0], 0.25f, 1e-7f);
}

TEST_P(ApiValidation, MergeWithoutRowsNeedsNoData) {
    EXPECT_EQ(attn_merge_f32(ctx_.get(), 2, 0, 4, nullptr, nullptr, nullptr, nullptr), ATTN_OK);
}

INSTANTIATE_TEST_SUITE_P(Impl, ApiValidation, testing::ValuesIn(attn_test::validation_paths()),
                         attn_test::path_name);

}  // namespace
