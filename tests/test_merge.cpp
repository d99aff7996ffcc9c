// Values of attn_merge_f32 on every path: hand cases, -inf parts, magnitudes that would
// overflow without max subtraction, and split keys: attention over the key halves merged
// with their lse equals attention over all keys.
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::path_test;
const float inf = std::numeric_limits<float>::infinity();

class MergeValues : public path_test {
  protected:
    // Merges parts of [rows, dim_v]; returns out, fills merged_lse.
    std::vector<float> merge(const std::vector<std::vector<float>> &outs,
                             const std::vector<std::vector<float>> &lses, int64_t rows,
                             int64_t dim_v, bool want_lse = true) {
        std::vector<const float *> out_ptrs, lse_ptrs;
        for (auto &o : outs) out_ptrs.push_back(o.data());
        for (auto &l : lses) lse_ptrs.push_back(l.data());
        std::vector<float> out(rows * dim_v, NAN);
        merged_lse.assign(rows, NAN);
        EXPECT_EQ(
            attn_merge_f32(ctx(), int64_t(outs.size()), rows, dim_v, out_ptrs.data(),
                           lse_ptrs.data(), out.data(), want_lse ? merged_lse.data() : nullptr),
            ATTN_OK)
            << attn_last_error();
        return out;
    }
    std::vector<float> merged_lse;
};

// Equal lses average the parts and add log 2; lses log 1 and log 3 weigh them 1/4 and 3/4.
TEST_P(MergeValues, HandComputed) {
    auto out = merge({{2, 4}, {6, 8}}, {{0.0f}, {0.0f}}, 1, 2);
    EXPECT_NEAR(out[0], 4.0f, 1e-6);
    EXPECT_NEAR(out[1], 6.0f, 1e-6);
    EXPECT_NEAR(merged_lse[0], std::log(2.0f), 1e-6);
    out = merge({{4, 0}, {0, 4}}, {{0.0f}, {std::log(3.0f)}}, 1, 2);
    EXPECT_NEAR(out[0], 1.0f, 1e-6);
    EXPECT_NEAR(out[1], 3.0f, 1e-6);
    EXPECT_NEAR(merged_lse[0], std::log(4.0f), 1e-6);
}

// lses near 100 would overflow exp in float without subtracting their maximum. A float
// near 100 carries an error of up to 4e-6, hence the tolerance on out.
TEST_P(MergeValues, LargeLseIsStable) {
    const auto out = merge({{1, 2, 3}, {3, 2, 1}}, {{100.0f}, {100.0f}}, 1, 3);
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(out[c], 2.0f, 1e-5);
    EXPECT_NEAR(merged_lse[0], 100.0 + std::log(2.0), 1e-5);
}

// Row 0: one part saw no key (-inf), so the other is taken as is. Row 1: no part saw a
// key: zeros and -inf. Whatever the -inf part's output row holds gets weight exactly 0.
TEST_P(MergeValues, NegativeInfinityParts) {
    const std::vector<float> seen = {1.5f, -2.0f, 0.25f, 7, 7, 7};
    const std::vector<float> unseen = {3e30f, -3e30f, 1e30f, 5, 5, 5};
    const auto out = merge({seen, unseen}, {{0.75f, -inf}, {-inf, -inf}}, 2, 3);
    for (int c = 0; c < 3; ++c) EXPECT_EQ(out[c], seen[c]);
    for (int c = 3; c < 6; ++c) EXPECT_EQ(out[c], 0.0f);
    EXPECT_EQ(merged_lse[0], 0.75f);
    EXPECT_EQ(merged_lse[1], -inf);
}

// Attention over key blocks [0,5), [5,12), [12,13) merged with their lses equals attention
// over all 13 keys, output and lse. A mask hides every key of the last block from some
// rows, so that block contributes -inf rows. lse NULL gives the same output.
// A NaN lse (a part whose row is NaN) makes the merged row NaN, whether the other parts are
// finite or -inf; the other rows are unaffected.
TEST_P(MergeValues, NaNPartMakesTheRowNaN) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // row 0: NaN beside a finite part; row 1: NaN beside -inf; row 2: finite parts
    auto out = merge({{1, 2, 3, 4, 5, 6}, {nan, nan, 7, 8, 9, 10}}, {{0.0f, -inf, 0.0f},
                                                                    {nan, nan, 0.0f}},
                     3, 2);
    for (int c = 0; c < 4; ++c) EXPECT_TRUE(std::isnan(out[size_t(c)])) << c;
    EXPECT_TRUE(std::isnan(merged_lse[0]));
    EXPECT_TRUE(std::isnan(merged_lse[1]));
    EXPECT_NEAR(out[4], 7.0f, 1e-6);
    EXPECT_NEAR(out[5], 8.0f, 1e-6);
    EXPECT_NEAR(merged_lse[2], std::log(2.0f), 1e-6);
}

TEST_P(MergeValues, SplitKeysEqualWholeAttention) {
    const int64_t B = 2, H = 2, Lq = 6, Lk = 13, D = 7, rows = B * H * Lq;
    attn_sdpa_desc whole;
    attn_sdpa_desc_init(&whole, B, H, Lq, Lk, D);
    const auto q = attn_test::random_tensor(rows * D, 1);
    const auto k = attn_test::random_tensor(B * H * Lk * D, 2);
    const auto v = attn_test::random_tensor(B * H * Lk * D, 3);
    std::vector<float> mask(Lq * Lk, 0.0f);
    for (int64_t i = 0; i < Lq; i += 2) mask[i * Lk + 12] = -inf;  // even rows never see key 12
    mask[1 * Lk + 3] = -1.0f;
    whole.mask = mask.data();
    whole.mask_strides = {0, 0, Lk};
    std::vector<float> want(rows * D), want_lse(rows);
    whole.lse = want_lse.data();
    ASSERT_EQ(attn_sdpa_f32(ctx(), &whole, q.data(), k.data(), v.data(), want.data()), ATTN_OK);

    const int64_t bounds[] = {0, 5, 12, 13};
    std::vector<std::vector<float>> outs, lses;
    for (int p = 0; p < 3; ++p) {
        const int64_t begin = bounds[p], len = bounds[p + 1] - begin;
        attn_sdpa_desc part = whole;
        part.len_kv = len;  // same strides: the part reads keys begin..begin+len of each head
        part.mask = mask.data() + begin;
        outs.emplace_back(rows * D);
        lses.emplace_back(rows);
        part.lse = lses.back().data();
        ASSERT_EQ(attn_sdpa_f32(ctx(), &part, q.data(), k.data() + begin * D, v.data() + begin * D,
                                outs.back().data()),
                  ATTN_OK)
            << attn_last_error();
    }
    EXPECT_EQ(lses[2][0], -inf);  // row 0 sees nothing of the last block
    const auto got = merge(outs, lses, rows, D);
    EXPECT_LE(attn_test::max_rel_error(got.data(), want.data(), got.size()), 2e-6);
    EXPECT_LE(attn_test::max_rel_error(merged_lse.data(), want_lse.data(), rows), 2e-6);
    const auto without_lse = merge(outs, lses, rows, D, false);
    EXPECT_EQ(without_lse, got);
}

INSTANTIATE_TEST_SUITE_P(Paths, MergeValues, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
