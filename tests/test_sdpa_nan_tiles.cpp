// NaN in whole key tiles: shapes where every row of a tile sees every key unmasked, so the
// fused path takes each row's max straight from S = Q K^T (a NaN score left out of that max
// must still make the row NaN through the softmax sum), on every path.
#include <cmath>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::random_tensor;

class sdpa_nan_tiles : public attn_test::path_test {
  protected:
    // q [1, 1, len, 64], k and v [1, 1, len, 64]; returns out, fills lse.
    std::vector<float> run(int64_t len, attn_causal causal, const std::vector<float> &q,
                           const std::vector<float> &k, const std::vector<float> &v,
                           std::vector<float> &lse) {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, 1, len, len, dim);
        d.causal = causal;
        lse.assign(size_t(len), -7.0f);
        d.lse = lse.data();
        std::vector<float> out(size_t(len * dim), -7.0f);
        EXPECT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
            << attn_last_error();
        return out;
    }
    static constexpr int64_t len = 256, dim = 64;
};

TEST_P(sdpa_nan_tiles, nan_query_row_is_nan_and_alone) {
    auto q = random_tensor(len * dim, 11), k = random_tensor(len * dim, 12), v = random_tensor(len * dim, 13);
    std::vector<float> lse_base, lse;
    auto base = run(len, ATTN_CAUSAL_NONE, q, k, v, lse_base);
    for (int64_t e = 0; e < dim; ++e) q[size_t(70 * dim + e)] = NAN;  // every score of row 70
    q[size_t(150 * dim + 9)] = NAN;                                 // and of row 150
    auto out = run(len, ATTN_CAUSAL_NONE, q, k, v, lse);
    for (int64_t r = 0; r < len; ++r) {
        const bool nan_row = r == 70 || r == 150;
        EXPECT_EQ(std::isnan(lse[size_t(r)]), nan_row) << "row " << r;
        for (int64_t e = 0; e < dim; ++e) {
            const float x = out[size_t(r * dim + e)];
            if (nan_row) EXPECT_TRUE(std::isnan(x)) << "row " << r << ", column " << e;
            else EXPECT_EQ(x, base[size_t(r * dim + e)]) << "row " << r << ", column " << e;
        }
    }
}

TEST_P(sdpa_nan_tiles, nan_key_reaches_exactly_the_rows_that_see_it) {
    // Causal: key 100 is seen by rows 100..255; rows from 127 on see its whole key tile.
    auto q = random_tensor(len * dim, 21), k = random_tensor(len * dim, 22), v = random_tensor(len * dim, 23);
    std::vector<float> lse_base, lse;
    auto base = run(len, ATTN_CAUSAL_TOP_LEFT, q, k, v, lse_base);
    k[size_t(100 * dim + 5)] = NAN;
    auto out = run(len, ATTN_CAUSAL_TOP_LEFT, q, k, v, lse);
    for (int64_t r = 0; r < len; ++r) {
        const bool nan_row = r >= 100;
        EXPECT_EQ(std::isnan(lse[size_t(r)]), nan_row) << "row " << r;
        for (int64_t e = 0; e < dim; ++e) {
            const float x = out[size_t(r * dim + e)];
            if (nan_row) EXPECT_TRUE(std::isnan(x)) << "row " << r << ", column " << e;
            else EXPECT_EQ(x, base[size_t(r * dim + e)]) << "row " << r << ", column " << e;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(all, sdpa_nan_tiles, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
