// Infinite scores in attention (attn.h, attn_sdpa_f32: "Special scores"): the score
// s = scale * q.k + mask is a float; a score of -inf weighs 0 and a row of them gives zeros
// with lse -inf; a score of +inf or NaN makes the row NaN (out and lse). A negative scale
// flips the sign of an infinite dot product first. Every path, prefill tiles and split-key
// decoding; the rows without an infinity match the reference bit for bit on the reference
// path and within 1e-5 elsewhere.
#include <cmath>
#include <limits>
#include <vector>

#include "test_features_util.hpp"
#include "test_util.hpp"

namespace {

using attn_test::path_test;
const float inf = std::numeric_limits<float>::infinity();

struct special_case {
    const char *name;
    int64_t len_q, len_kv;
    float scale;
    float q0;      // q[row 0, dim 0]
    float mask01;  // mask[row 0, key 1]
    bool nan_row;  // row 0 is NaN; else zeros with lse -inf
};

class SdpaSpecialScores : public path_test {};

TEST_P(SdpaSpecialScores, InfiniteScoresFollowTheRule) {
    const int64_t dim = 8;
    const special_case cases[] = {
        // k[., 0] > 0 for every key: q0 = +inf gives a dot of +inf, times scale -1: -inf
        {"+inf q, scale -1: every score -inf", 9, 37, -1.0f, inf, 0.0f, false},
        {"-inf q, scale -1: every score +inf", 9, 37, -1.0f, -inf, 0.0f, true},
        {"+inf q, scale 0.5: every score +inf", 9, 37, 0.5f, inf, 0.0f, true},
        {"+inf mask entry", 9, 37, 0.5f, 0.25f, inf, true},
        {"-inf mask entry among finite ones", 9, 37, -0.5f, 0.25f, -inf, false},
        {"decode, +inf q, scale -1", 1, 2100, -1.0f, inf, 0.0f, false},
        {"decode, -inf q, scale -1", 1, 2100, -1.0f, -inf, 0.0f, true},
        {"decode, +inf mask entry", 1, 2100, 0.5f, 0.25f, inf, true},
    };
    for (const special_case &c : cases) {
        SCOPED_TRACE(c.name);
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, 1, c.len_q, c.len_kv, dim);
        d.scale = c.scale;
        auto q = attn_test::random_tensor(size_t(c.len_q * dim), 7, -1.0f, 1.0f);
        auto k = attn_test::random_tensor(size_t(c.len_kv * dim), 8, -1.0f, 1.0f);
        const auto v = attn_test::random_tensor(size_t(c.len_kv * dim), 9, -1.0f, 1.0f);
        for (int64_t j = 0; j < c.len_kv; ++j) k[size_t(j * dim)] = 0.5f + 0.001f * float(j % 7);
        q[0] = c.q0;
        std::vector<float> mask(size_t(c.len_q * c.len_kv), 0.0f);
        mask[1] = c.mask01;
        d.mask = mask.data();
        d.mask_strides = {c.len_q * c.len_kv, c.len_q * c.len_kv, c.len_kv};
        std::vector<float> out(size_t(c.len_q * dim), -7.0f), lse(size_t(c.len_q), -7.0f);
        d.lse = lse.data();
        ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
            << attn_last_error();

        if (c.mask01 == -inf) {
            // a -inf mask entry is an ordinary masked key: the row is finite
            for (int64_t x = 0; x < dim; ++x) EXPECT_TRUE(std::isfinite(out[size_t(x)]));
            EXPECT_TRUE(std::isfinite(lse[0]));
        } else if (c.nan_row) {
            for (int64_t x = 0; x < dim; ++x) EXPECT_TRUE(std::isnan(out[size_t(x)])) << x;
            EXPECT_TRUE(std::isnan(lse[0]));
        } else {
            for (int64_t x = 0; x < dim; ++x) EXPECT_EQ(out[size_t(x)], 0.0f) << x;
            EXPECT_EQ(lse[0], -inf);
        }

        // the other rows are attention's, against float64 on the same inputs: values in
        // [-1, 1], 8 dims and at most 2100 keys keep f32 attention within a few 1e-7 of it,
        // so 1e-5 catches any row disturbed by row 0's infinities
        std::vector<double> want_lse;
        const std::vector<double> want = attn_test::sdpa_features_double(
            d, attn_test::to_double(q), attn_test::to_double(k), attn_test::to_double(v), &want_lse);
        for (size_t i = size_t(dim); i < out.size(); ++i)
            EXPECT_NEAR(out[i], want[i], 1e-5) << "element " << i;
        for (size_t i = 1; i < lse.size(); ++i) EXPECT_NEAR(lse[i], want_lse[i], 1e-5) << "row " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, SdpaSpecialScores, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
