// The merge (attn_merge_f32) on every path, the reference included, per ISA.
// Criterion, with e(x) = max |x - exact| / (1 + |exact|) against a float64 merge written here,
//   e(path) <= 2 * e(plain) + 1e-6   (out and lse),
// plain the same merge in plain float32;
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

    // The merge in the number type T: out, then lse appended (T = double: the oracle;
    // T = float: the plain float32 computation, the yardstick).
    template <class T>
    std::vector<T> merged() const {
        std::vector<T> out(size_t(rows * dim_v), T(0)), lse(size_t(rows), T(-INFINITY));
        for (int64_t r = 0; r < rows; ++r) {
            T m = T(-INFINITY);
            for (int64_t p = 0; p < parts; ++p) m = std::max(m, T(lses[size_t(p)][size_t(r)]));
            if (m == T(-INFINITY)) continue;
            T sum = T(0);
            for (int64_t p = 0; p < parts; ++p) sum += T(std::exp(T(lses[size_t(p)][size_t(r)]) - m));
            lse[size_t(r)] = m + T(std::log(sum));
            for (int64_t p = 0; p < parts; ++p) {
                const T w = T(std::exp(T(lses[size_t(p)][size_t(r)]) - lse[size_t(r)]));
                for (int64_t c = 0; c < dim_v; ++c)
                    out[size_t(r * dim_v + c)] += w * T(outs[size_t(p)][size_t(r * dim_v + c)]);
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

class MergeOracle : public testing::TestWithParam<attn_test::path> {};

TEST_P(MergeOracle, WithinYardstick) {
    auto ctx = attn_test::make_context(GetParam().impl, GetParam().isa);
    struct shape {
        int64_t parts, rows, dim_v;
        float lse_range;
    };
    const shape shapes[] = {{1, 5, 3, 2.0f},     {2, 100, 16, 5.0f},  {3, 37, 17, 30.0f},
                            {7, 300, 64, 80.0f}, {4, 9, 129, 1e4f},   {5, 1000, 1, 3.0f}};
    for (const shape &s : shapes) {
        SCOPED_TRACE(testing::Message() << s.parts << " parts, " << s.rows << " x " << s.dim_v);
        const merge_input in(s.parts, s.rows, s.dim_v, s.lse_range);
        const std::vector<float> got = in.run(ctx.get());
        // floor 1e-6: about 8 float ulps at 1, for a few-ulp exp and log
        EXPECT_TRUE(attn_test::within_yardstick(got, in.merged<float>(), in.merged<double>(), 1e-6));
        // row 0 has no key in any part: zeros and -inf, exactly
        for (int64_t c = 0; c < s.dim_v; ++c) EXPECT_EQ(got[size_t(c)], 0.0f);
        EXPECT_EQ(got[size_t(s.rows * s.dim_v)], -INFINITY);
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, MergeOracle, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

class MergeSimd : public testing::TestWithParam<attn_test::path> {};

TEST_P(MergeSimd, BitwiseIdenticalAcrossThreadCounts) {
    ATTN_SKIP_UNLESS_THREADS(2);
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
