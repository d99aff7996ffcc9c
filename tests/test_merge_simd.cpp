// The SIMD merge (attn_merge_f32, ATTN_IMPL_SIMD) against the reference, per ISA.
// Criterion: with e_ref the reference's error against a double-precision merge,
//   max |simd - ref| / (1 + |ref|)  <=  2 * e_ref + 1e-6   (out and lse),
// -inf parts and all -inf rows exactly as the reference, and bitwise identical results for
// 1, 2 and 3 threads.
#include <cmath>
#include <cstring>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::random_tensor;

struct merge_input {
    int64_t parts, rows, dim_v;
    std::vector<std::vector<float>> outs, lses;
    std::vector<const float *> out_at, lse_at;

    merge_input(int64_t p, int64_t r, int64_t dv, float lse_range) : parts(p), rows(r), dim_v(dv) {
        for (int64_t i = 0; i < p; ++i) {
            outs.push_back(random_tensor(size_t(r * dv), uint32_t(100 + i), -3.0f, 3.0f));
            lses.push_back(random_tensor(size_t(r), uint32_t(200 + i), -lse_range, lse_range));
            // every third row of part i has no key (lse -inf); row 0 has none in any part
            for (int64_t row = i % 3; row < r; row += 3) lses[i][size_t(row)] = -INFINITY;
            lses[i][0] = -INFINITY;
        }
        for (int64_t i = 0; i < p; ++i) {
            out_at.push_back(outs[size_t(i)].data());
            lse_at.push_back(lses[size_t(i)].data());
        }
    }

    // The merge in double: out, then lse appended.
    std::vector<double> exact() const {
        std::vector<double> out(size_t(rows * dim_v), 0.0), lse(size_t(rows), -INFINITY);
        for (int64_t r = 0; r < rows; ++r) {
            double m = -INFINITY;
            for (int64_t p = 0; p < parts; ++p) m = std::max(m, double(lses[size_t(p)][size_t(r)]));
            if (m == -INFINITY) continue;
            double sum = 0.0;
            for (int64_t p = 0; p < parts; ++p) sum += std::exp(lses[size_t(p)][size_t(r)] - m);
            lse[size_t(r)] = m + std::log(sum);
            for (int64_t p = 0; p < parts; ++p) {
                const double w = std::exp(lses[size_t(p)][size_t(r)] - lse[size_t(r)]);
                for (int64_t c = 0; c < dim_v; ++c)
                    out[size_t(r * dim_v + c)] += w * outs[size_t(p)][size_t(r * dim_v + c)];
            }
        }
        out.insert(out.end(), lse.begin(), lse.end());
        return out;
    }

    std::vector<float> run(attn_context *ctx) const {
        std::vector<float> out(size_t(rows * dim_v + rows), NAN);
        EXPECT_EQ(attn_merge_f32(ctx, parts, rows, dim_v, out_at.data(), lse_at.data(), out.data(),
                                 out.data() + rows * dim_v),
                  ATTN_OK)
            << attn_last_error();
        return out;
    }
};

class MergeSimd : public testing::TestWithParam<attn_test::path> {};

TEST_P(MergeSimd, MatchesReference) {
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa);
    auto ref_ctx = attn_test::make_context(ATTN_IMPL_REFERENCE);
    struct shape {
        int64_t parts, rows, dim_v;
        float lse_range;
    };
    const shape shapes[] = {{1, 5, 3, 2.0f},     {2, 100, 16, 5.0f},  {3, 37, 17, 30.0f},
                            {7, 300, 64, 80.0f}, {4, 9, 129, 1e4f},   {5, 1000, 1, 3.0f}};
    for (const shape &s : shapes) {
        SCOPED_TRACE(testing::Message() << s.parts << " parts, " << s.rows << " x " << s.dim_v);
        const merge_input in(s.parts, s.rows, s.dim_v, s.lse_range);
        const std::vector<float> want = in.run(ref_ctx.get()), got = in.run(ctx.get());
        const std::vector<double> exact = in.exact();
        const double e_ref = attn_test::max_rel_error(want, exact);
        EXPECT_LE(attn_test::max_rel_error(got.data(), want.data(), got.size()), 2 * e_ref + 1e-6)
            << "reference error " << e_ref;
        // row 0 has no key in any part: zeros and -inf, exactly
        for (int64_t c = 0; c < s.dim_v; ++c) EXPECT_EQ(got[size_t(c)], 0.0f);
        EXPECT_EQ(got[size_t(s.rows * s.dim_v)], -INFINITY);
    }
}

TEST_P(MergeSimd, BitwiseIdenticalAcrossThreadCounts) {
    const merge_input in(6, 5000, 48, 20.0f);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
        auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa, threads);
        results.push_back(in.run(ctx.get()));
    }
    for (size_t t = 1; t < results.size(); ++t)
        EXPECT_EQ(std::memcmp(results[0].data(), results[t].data(), results[0].size() * 4), 0)
            << "threads " << t + 1;
}

INSTANTIATE_TEST_SUITE_P(PerIsa, MergeSimd, testing::ValuesIn(attn_test::simd_paths()),
                         attn_test::path_name);

}  // namespace
