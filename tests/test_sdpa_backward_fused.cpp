// The fused backward's own arrangement, per ISA: dQ split over key chunks (one kv head, long
// keys: several chunks, merged in order) and GQA groups summed in a fixed order give the same
// bits for 1, 2 and 3 threads and from run to run; and the composed backward, still reachable
// through ops/backward_switch.hpp, agrees with it to rounding.
#include <cmath>
#include <vector>

#include "ops/backward_switch.hpp"
#include "test_util.hpp"

namespace {

using attn_test::random_tensor;

struct problem {
    attn_sdpa_desc d;
    std::vector<float> q, k, v, out, dout, lse;
    problem(int64_t heads_q, int64_t heads_kv, int64_t len_q, int64_t len_kv, int64_t dim,
            attn_causal causal) {
        d = attn_test::make_desc(1, heads_q, heads_kv, len_q, len_kv, dim, dim);
        d.causal = causal;
        q = random_tensor(size_t(heads_q * len_q * dim), 31);
        k = random_tensor(size_t(heads_kv * len_kv * dim), 32);
        v = random_tensor(size_t(heads_kv * len_kv * dim), 33);
        dout = random_tensor(q.size(), 34);
        out.resize(q.size());
        lse.resize(size_t(heads_q * len_q));
        attn_sdpa_desc f = d;
        f.lse = lse.data();
        auto ctx = attn_test::make_context(ATTN_IMPL_REFERENCE);
        EXPECT_EQ(attn_sdpa_f32(ctx.get(), &f, q.data(), k.data(), v.data(), out.data()), ATTN_OK);
    }
    std::vector<float> grads(attn_context *ctx) const {
        std::vector<float> dq(q.size(), NAN), dk(k.size(), NAN), dv(v.size(), NAN);
        EXPECT_EQ(attn_sdpa_backward_f32(ctx, &d, q.data(), k.data(), v.data(), out.data(),
                                         dout.data(), lse.data(), dq.data(), dk.data(), dv.data()),
                  ATTN_OK)
            << attn_last_error();
        dq.insert(dq.end(), dk.begin(), dk.end());
        dq.insert(dq.end(), dv.begin(), dv.end());
        return dq;
    }
};

class SdpaBackwardFused : public testing::TestWithParam<attn_test::path> {};

TEST_P(SdpaBackwardFused, KeyChunksAndGroupsBitwiseAcrossThreads) {
    ATTN_SKIP_UNLESS_THREADS(2);
    // one kv head and 1000 keys: 8 key tiles, so dQ is summed from several chunks; and a
    // group of 4 query heads over one kv head, bottom-right causal
    const problem cases[] = {problem(1, 1, 300, 1000, 32, ATTN_CAUSAL_NONE),
                             problem(4, 1, 150, 260, 24, ATTN_CAUSAL_BOTTOM_RIGHT)};
    for (const problem &p : cases) {
        std::vector<std::vector<float>> runs;
        for (int threads : {1, 2, 3, 2}) {
            auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa, threads);
            runs.push_back(p.grads(ctx.get()));
        }
        for (size_t r = 1; r < runs.size(); ++r) EXPECT_TRUE(attn_test::bitwise_equal(runs[0], runs[r]));
        for (float x : runs[0]) ASSERT_TRUE(std::isfinite(x));
    }
}

TEST_P(SdpaBackwardFused, ComposedAgreesWithFused) {
    const problem p(2, 1, 130, 200, 40, ATTN_CAUSAL_TOP_LEFT);
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa, 2);
    const std::vector<float> fused = p.grads(ctx.get());
    attn::ops::set_backward_composed(true);
    const std::vector<float> composed = p.grads(ctx.get());
    attn::ops::set_backward_composed(false);
    EXPECT_FALSE(attn_test::bitwise_equal(fused, composed));  // two different computations
    EXPECT_LE(attn_test::max_rel_error(fused.data(), composed.data(), fused.size()), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(PerIsa, SdpaBackwardFused, testing::ValuesIn(attn_test::simd_paths()),
                         attn_test::path_name);

}  // namespace
