// Every instruction-set level the library has either runs here (a context capped at it
// reports its name and computes) or is reported as a skipped test naming the level, so that
// a level this CPU lacks is visible in the test output rather than silently absent.
#include <cstring>
#include <string>

#include "kernels/kernels.hpp"
#include "test_util.hpp"

namespace {

class IsaLevel : public testing::TestWithParam<std::pair<attn_isa, const char *>> {};

TEST_P(IsaLevel, RunsOrIsSkippedByName) {
    const auto [isa, test_name] = GetParam();
    const std::string name = std::string(test_name).substr(std::strlen("simd_"));
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = ATTN_IMPL_SIMD;
    cfg.max_isa = isa;
    attn_context *ctx = nullptr;
    const attn_status s = attn_context_create(&cfg, &ctx);
    if (!attn::kernels::isa_supported(isa)) {
        EXPECT_EQ(s, ATTN_UNSUPPORTED);
        GTEST_SKIP() << name << ": this CPU (or its OS) lacks the level; its kernels are not "
                     << "tested here";
    }
    ASSERT_EQ(s, ATTN_OK) << attn_last_error();
    EXPECT_EQ(std::string(attn_context_isa(ctx)), name);
    // the worked example's first output row through this level
    const float qk[] = {1, 0, 0, 1, 1, 1}, v[] = {1, 0, 0, 2, 3, 1};
    float out[6];
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 3, 3, 2);
    ASSERT_EQ(attn_sdpa_f32(ctx, &d, qk, qk, v, out), ATTN_OK) << attn_last_error();
    EXPECT_NEAR(out[0], 1.6044f, 1e-4);
    EXPECT_NEAR(out[1], 0.7967f, 1e-4);
    attn_context_destroy(ctx);
}

INSTANTIATE_TEST_SUITE_P(Levels, IsaLevel, testing::ValuesIn(attn_test::simd_levels()),
                         [](const auto &info) { return std::string(info.param.second); });

}  // namespace
