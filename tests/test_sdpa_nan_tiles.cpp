// NaN in whole key tiles: shapes where every row of a tile sees every key unmasked, so the
// fused path takes each row's max straight from S = Q K^T (a NaN score left out of that max
// must still make the row NaN through the softmax sum), on every path. And NaN in V: a key
// hidden from a row is never read for it; a visible key is, whatever its weight.
#include <cmath>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::random_tensor;

class sdpa_nan_tiles : public attn_test::path_test {
  protected:
    // q [1, 1, len, 64], k and v [1, 1, len, 64], each row seeing keys i-window .. i+window
    // (-1: all); returns out, fills lse.
    std::vector<float> run(int64_t len, attn_causal causal, const std::vector<float> &q,
                           const std::vector<float> &k, const std::vector<float> &v,
                           std::vector<float> &lse, int64_t window = -1) {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, 1, len, len, dim);
        d.causal = causal;
        d.window_left = d.window_right = window;
        lse.assign(size_t(len), -7.0f);
        d.lse = lse.data();
        std::vector<float> out(size_t(len * dim), -7.0f);
        EXPECT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
            << attn_last_error();
        return out;
    }
    // Row r of out is NaN throughout (and its lse NaN) where nan_row(r), else base's row
    // bitwise (and its lse a number).
    template <class Rows>
    static void expect_nan_rows(const std::vector<float> &out, const std::vector<float> &lse,
                                const std::vector<float> &base, Rows nan_row) {
        for (int64_t r = 0; r < len; ++r) {
            EXPECT_EQ(std::isnan(lse[size_t(r)]), nan_row(r)) << "row " << r;
            for (int64_t e = 0; e < dim; ++e) {
                const float x = out[size_t(r * dim + e)];
                if (nan_row(r)) EXPECT_TRUE(std::isnan(x)) << "row " << r << ", column " << e;
                else EXPECT_EQ(x, base[size_t(r * dim + e)]) << "row " << r << ", column " << e;
            }
        }
    }
    static constexpr int64_t len = 1100, dim = 64;  // two key tiles on AVX-512 (1024 keys and 76)
};

TEST_P(sdpa_nan_tiles, nan_query_row_is_nan_and_alone) {
    auto q = random_tensor(len * dim, 11), k = random_tensor(len * dim, 12), v = random_tensor(len * dim, 13);
    std::vector<float> lse_base, lse;
    auto base = run(len, ATTN_CAUSAL_NONE, q, k, v, lse_base);
    for (int64_t e = 0; e < dim; ++e) q[size_t(70 * dim + e)] = NAN;  // every score of row 70
    q[size_t(150 * dim + 9)] = NAN;                                 // and of row 150
    auto out = run(len, ATTN_CAUSAL_NONE, q, k, v, lse);
    expect_nan_rows(out, lse, base, [&](int64_t r) { return r == 70 || r == 150; });
}

TEST_P(sdpa_nan_tiles, nan_key_reaches_exactly_the_rows_that_see_it) {
    // Causal: key 100 is seen by rows 100..1099; from the last key of its tile on (row 63, 127
    // or 1023 by ISA), a row sees the whole tile.
    auto q = random_tensor(len * dim, 21), k = random_tensor(len * dim, 22), v = random_tensor(len * dim, 23);
    std::vector<float> lse_base, lse;
    auto base = run(len, ATTN_CAUSAL_TOP_LEFT, q, k, v, lse_base);
    k[size_t(100 * dim + 5)] = NAN;
    auto out = run(len, ATTN_CAUSAL_TOP_LEFT, q, k, v, lse);
    expect_nan_rows(out, lse, base, [&](int64_t r) { return r >= 100; });
}

// A sliding window (each row sees keys i-40 .. i+40): rows see parts of tiles cut at both
// ends, so a NaN score must be left out exactly where the window hides its key, at either
// edge of a row's visible run, and reach every row whose window holds it.
TEST_P(sdpa_nan_tiles, nan_key_reaches_exactly_the_rows_whose_window_holds_it) {
    constexpr int64_t reach = 40, key = 1030;  // key 1030: past the first tile on every ISA
    auto q = random_tensor(len * dim, 51), k = random_tensor(len * dim, 52), v = random_tensor(len * dim, 53);
    std::vector<float> lse_base, lse;
    const auto base = run(len, ATTN_CAUSAL_NONE, q, k, v, lse_base, reach);
    k[size_t(key * dim + 3)] = NAN;
    const auto out = run(len, ATTN_CAUSAL_NONE, q, k, v, lse, reach);
    expect_nan_rows(out, lse, base, [&](int64_t r) { return r >= key - reach && r <= key + reach; });
}

// A key hidden from a row (causal) is never read for it: a NaN in that key's V row reaches
// exactly the rows that see the key, on every path, including rows that share a register
// block with them near the diagonal.
TEST_P(sdpa_nan_tiles, nan_value_at_hidden_key_stays_hidden) {
    auto q = random_tensor(len * dim, 31), k = random_tensor(len * dim, 32), v = random_tensor(len * dim, 33);
    std::vector<float> lse_base, lse;
    auto base = run(len, ATTN_CAUSAL_TOP_LEFT, q, k, v, lse_base);
    constexpr int64_t key = 100, column = 5;
    v[size_t(key * dim + column)] = NAN;
    auto out = run(len, ATTN_CAUSAL_TOP_LEFT, q, k, v, lse);
    for (int64_t r = 0; r < len; ++r) {
        EXPECT_EQ(lse[size_t(r)], lse_base[size_t(r)]) << "row " << r;
        for (int64_t e = 0; e < dim; ++e) {
            const float x = out[size_t(r * dim + e)];
            if (r >= key && e == column) EXPECT_TRUE(std::isnan(x)) << "row " << r;
            else EXPECT_EQ(x, base[size_t(r * dim + e)]) << "row " << r << ", column " << e;
        }
    }
}

// A key masked by -inf is visible with weight 0: its V row is read, so a NaN there reaches
// the row (0 * NaN), as in the formula; a row whose every key is masked is zeros, lse -inf.
TEST_P(sdpa_nan_tiles, zero_weight_keys_are_read_and_fully_masked_rows_are_zero) {
    auto q = random_tensor(len * dim, 41), k = random_tensor(len * dim, 42), v = random_tensor(len * dim, 43);
    std::vector<float> mask(size_t(len * len), 0.0f);
    constexpr int64_t key = 100, column = 7, masked_row = 30, blank_row = 31;
    mask[size_t(masked_row * len + key)] = -INFINITY;
    for (int64_t j = 0; j < len; ++j) mask[size_t(blank_row * len + j)] = -INFINITY;
    v[size_t(key * dim + column)] = NAN;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, len, len, dim);
    d.mask = mask.data();
    d.mask_strides = {len * len, len * len, len};
    std::vector<float> lse(size_t(len), -7.0f), out(size_t(len * dim), -7.0f);
    d.lse = lse.data();
    ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
        << attn_last_error();
    for (int64_t r = 0; r < len; ++r) {
        for (int64_t e = 0; e < dim; ++e) {
            const float x = out[size_t(r * dim + e)];
            if (r == blank_row) EXPECT_EQ(x, 0.0f) << "column " << e;
            else if (e == column) EXPECT_TRUE(std::isnan(x)) << "row " << r;
            else EXPECT_TRUE(std::isfinite(x)) << "row " << r << ", column " << e;
        }
        EXPECT_EQ(lse[size_t(r)] == -INFINITY, r == blank_row) << "row " << r;
    }
}

// The backward: a NaN in the V row of a key hidden from a query row does not reach that row's
// dQ (the SIMD path's blocks of rows cross the diagonal).
TEST_P(sdpa_nan_tiles, backward_nan_value_at_hidden_key_stays_hidden) {
    auto q = random_tensor(len * dim, 51), k = random_tensor(len * dim, 52), v = random_tensor(len * dim, 53);
    const auto dout = random_tensor(len * dim, 54);
    auto dq_of = [&](const std::vector<float> &values) {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, 1, len, len, dim);
        d.causal = ATTN_CAUSAL_TOP_LEFT;
        std::vector<float> out(size_t(len * dim)), dq(out.size()), dk(out.size()), dv(out.size());
        EXPECT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), values.data(), out.data()), ATTN_OK)
            << attn_last_error();
        EXPECT_EQ(attn_sdpa_backward_f32(ctx(), &d, q.data(), k.data(), values.data(), out.data(),
                                         dout.data(), nullptr, dq.data(), dk.data(), dv.data()),
                  ATTN_OK)
            << attn_last_error();
        return dq;
    };
    const auto base = dq_of(v);
    constexpr int64_t key = 100;
    v[size_t(key * dim + 3)] = NAN;
    const auto dq = dq_of(v);
    for (int64_t r = 0; r < len; ++r)
        for (int64_t e = 0; e < dim; ++e) {
            const float x = dq[size_t(r * dim + e)];
            if (r >= key) EXPECT_TRUE(std::isnan(x)) << "row " << r << ", column " << e;
            else EXPECT_EQ(x, base[size_t(r * dim + e)]) << "row " << r << ", column " << e;
        }
}

INSTANTIATE_TEST_SUITE_P(all, sdpa_nan_tiles, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
