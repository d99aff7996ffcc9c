// Contexts, ISA resolution, thread counts, the default context, status text, version and
// the thread-local last error.
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <tbb/info.h>

#include "api/error.hpp"
#include "kernels/kernels.hpp"
#include "test_util.hpp"

namespace {

using attn_test::context_ptr;
using attn_test::make_context;

const char *expected_isa_name(attn_isa isa) {
    switch (isa) {
    case ATTN_ISA_AMX: return "amx";
    case ATTN_ISA_AVX512_BF16: return "avx512_bf16";
    case ATTN_ISA_AVX512: return "avx512";
    case ATTN_ISA_AVX2: return "avx2";
    case ATTN_ISA_SSE4: return "sse4";
    default: return "scalar";
    }
}

// C = A B for a fixed 2x3 * 3x2 product: [[1,2,3],[4,5,6]] * [[1,0],[0,1],[1,1]].
void expect_small_gemm(attn_context *ctx) {
    const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1};
    float c[4] = {-1, -1, -1, -1};
    ASSERT_EQ(attn_gemm_f32(ctx, ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c,
                            2),
              ATTN_OK)
        << attn_last_error();
    EXPECT_EQ(c[0], 4.0f);
    EXPECT_EQ(c[1], 5.0f);
    EXPECT_EQ(c[2], 10.0f);
    EXPECT_EQ(c[3], 11.0f);
}

TEST(ApiContext, ConfigInitGivesDefaults) {
    attn_config cfg;
    std::memset(&cfg, 0x5a, sizeof cfg);
    attn_config_init(&cfg);
    EXPECT_EQ(cfg.impl, ATTN_IMPL_AUTO);
    EXPECT_EQ(cfg.max_isa, ATTN_ISA_AUTO);
    EXPECT_EQ(cfg.num_threads, 0);
    EXPECT_EQ(cfg.fpmath, ATTN_FPMATH_STRICT);
    attn_config_init(nullptr);  // tolerated
}

TEST(ApiContext, DefaultsPickTheBestIsaAndAllThreads) {
    const attn_isa best = attn::kernels::best_supported_isa();
    attn_context *ctx = nullptr;
    ASSERT_EQ(attn_context_create(nullptr, &ctx), ATTN_OK) << attn_last_error();
    ASSERT_NE(ctx, nullptr);
    EXPECT_STREQ(attn_context_isa(ctx), expected_isa_name(best));
    EXPECT_EQ(attn_context_num_threads(ctx), tbb::info::default_concurrency());
    expect_small_gemm(ctx);
    attn_context_destroy(ctx);
    attn_context_destroy(nullptr);  // tolerated
}

TEST(ApiContext, ReferenceIsScalarWhateverTheCap) {
    for (attn_isa cap : {ATTN_ISA_AUTO, ATTN_ISA_SCALAR, ATTN_ISA_SSE4}) {
        context_ptr ctx = make_context(ATTN_IMPL_REFERENCE, cap);
        ASSERT_TRUE(ctx) << attn_last_error();
        EXPECT_STREQ(attn_context_isa(ctx.get()), "scalar");
        expect_small_gemm(ctx.get());
    }
}

// Every cap up to what the CPU has is honoured and named; every cap above it is
// ATTN_UNSUPPORTED with a message naming the requested and the available ISA. On a CPU
// with AMX only the first branch runs.
TEST(ApiContext, IsaCapIsHonouredOrUnsupported) {
    const attn_isa best = attn::kernels::best_supported_isa();
    for (attn_isa cap : {ATTN_ISA_SCALAR, ATTN_ISA_SSE4, ATTN_ISA_AVX2, ATTN_ISA_AVX512,
                         ATTN_ISA_AVX512_BF16, ATTN_ISA_AMX}) {
        for (attn_impl impl : {ATTN_IMPL_AUTO, ATTN_IMPL_SIMD}) {
            attn_config cfg;
            attn_config_init(&cfg);
            cfg.impl = impl;
            cfg.max_isa = cap;
            attn_context *ctx = reinterpret_cast<attn_context *>(0x1);  // must stay untouched
            const attn_status s = attn_context_create(&cfg, &ctx);
            if (cap <= best) {
                ASSERT_EQ(s, ATTN_OK) << attn_last_error();
                EXPECT_STREQ(attn_context_isa(ctx), expected_isa_name(cap));
                expect_small_gemm(ctx);
                attn_context_destroy(ctx);
            } else {
                EXPECT_EQ(s, ATTN_UNSUPPORTED);
                EXPECT_EQ(ctx, reinterpret_cast<attn_context *>(0x1));
                const std::string msg = attn_last_error();
                EXPECT_NE(msg.find("attn_context_create: cfg->max_isa = "), std::string::npos);
                EXPECT_NE(msg.find(expected_isa_name(cap)), std::string::npos) << msg;
                EXPECT_NE(msg.find(std::string("at most ") + expected_isa_name(best)),
                          std::string::npos)
                    << msg;
            }
        }
    }
}

TEST(ApiContext, InvalidConfigsAreRejectedWithTheirValue) {
    struct bad_config {
        attn_config cfg;
        const char *message;
    };
    const bad_config cases[] = {
        {{attn_impl(3), ATTN_ISA_AUTO, 0}, "attn_context_create: cfg->impl = 3, must be"},
        {{attn_impl(-1), ATTN_ISA_AUTO, 0}, "attn_context_create: cfg->impl = -1, must be"},
        {{ATTN_IMPL_SIMD, attn_isa(7), 0}, "attn_context_create: cfg->max_isa = 7, must be"},
        {{ATTN_IMPL_AUTO, attn_isa(-2), 0}, "attn_context_create: cfg->max_isa = -2, must be"},
        {{ATTN_IMPL_AUTO, ATTN_ISA_AUTO, -1},
         "attn_context_create: cfg->num_threads = -1, must be >= 0"},
        {{ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, -8},
         "attn_context_create: cfg->num_threads = -8, must be >= 0"},
        {{ATTN_IMPL_AUTO, ATTN_ISA_AUTO, 0, attn_fpmath(2)},
         "attn_context_create: cfg->fpmath = 2, must be ATTN_FPMATH_STRICT (0) or "
         "ATTN_FPMATH_BF16 (1)"},
        {{ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, 0, attn_fpmath(-1)},
         "attn_context_create: cfg->fpmath = -1, must be"},
    };
    for (const bad_config &c : cases) {
        attn_context *ctx = nullptr;
        EXPECT_EQ(attn_context_create(&c.cfg, &ctx), ATTN_INVALID_ARGUMENT) << c.message;
        EXPECT_EQ(ctx, nullptr);
        EXPECT_EQ(std::string(attn_last_error()).rfind(c.message, 0), 0u)
            << attn_last_error() << "\nwant prefix: " << c.message;
    }
    EXPECT_EQ(attn_context_create(nullptr, nullptr), ATTN_INVALID_ARGUMENT);
    EXPECT_STREQ(attn_last_error(), "attn_context_create: ctx = NULL, must point to where the "
                                    "context goes");
}

TEST(ApiContext, NumThreadsIsReported) {
    for (int n : {1, 2, 3, 7}) {
        for (attn_impl impl : {ATTN_IMPL_REFERENCE, ATTN_IMPL_SIMD}) {
            context_ptr ctx = make_context(impl, ATTN_ISA_AUTO, n);
            ASSERT_TRUE(ctx) << attn_last_error();
            // At most n, and never more than the hardware offers.
            EXPECT_EQ(attn_context_num_threads(ctx.get()),
                      std::min(n, tbb::info::default_concurrency()));
            expect_small_gemm(ctx.get());
        }
    }
    context_ptr all = make_context(ATTN_IMPL_AUTO, ATTN_ISA_AUTO, 0);
    ASSERT_TRUE(all);
    EXPECT_EQ(attn_context_num_threads(all.get()), tbb::info::default_concurrency());
}

TEST(ApiContext, NullMeansTheDefaultContext) {
    EXPECT_STREQ(attn_context_isa(nullptr), expected_isa_name(attn::kernels::best_supported_isa()));
    EXPECT_EQ(attn_context_num_threads(nullptr), tbb::info::default_concurrency());
    expect_small_gemm(nullptr);
}

// The default context is created once, even when many threads ask for it first at once.
TEST(ApiContext, DefaultContextFromManyThreads) {
    std::vector<std::thread> threads;
    std::vector<int> ok(8, 0);
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([t, &ok] {
            const float x[4] = {0, 0, 0, 0};
            float y[4];
            ok[t] = attn_softmax_f32(nullptr, 1, 4, 1.0f, x, 4, y, 4) == ATTN_OK && y[0] == 0.25f &&
                    y[3] == 0.25f;
        });
    for (auto &th : threads) th.join();
    for (int t = 0; t < 8; ++t) EXPECT_TRUE(ok[t]) << "thread " << t;
}

// One context used by several threads at once gives each the same, right answer.
TEST(ApiContext, OneContextSharedByThreads) {
    context_ptr ctx = make_context(ATTN_IMPL_SIMD, ATTN_ISA_AUTO, 2);
    ASSERT_TRUE(ctx);
    const int64_t n = 64;
    std::vector<float> a = attn_test::random_tensor(n * n, 1), b = attn_test::random_tensor(n * n, 2);
    std::vector<float> want(n * n);
    ASSERT_EQ(attn_gemm_f32(ctx.get(), ATTN_NO_TRANS, ATTN_TRANS, n, n, n, 1.0f, a.data(), n,
                            b.data(), n, 0.0f, want.data(), n),
              ATTN_OK);
    std::vector<std::vector<float>> got(4, std::vector<float>(n * n, 0.0f));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int rep = 0; rep < 20; ++rep)
                attn_gemm_f32(ctx.get(), ATTN_NO_TRANS, ATTN_TRANS, n, n, n, 1.0f, a.data(), n,
                              b.data(), n, 0.0f, got[t].data(), n);
        });
    for (auto &th : threads) th.join();
    for (int t = 0; t < 4; ++t)
        EXPECT_EQ(std::memcmp(got[t].data(), want.data(), want.size() * 4), 0) << "thread " << t;
}

TEST(ApiStatus, StringsAreStaticDistinctAndNeverNull) {
    std::vector<std::string> seen;
    for (int s : {0, 1, 2, 3, 4, 5, -1, 1000}) {
        const char *text = attn_status_string(attn_status(s));
        ASSERT_NE(text, nullptr);
        EXPECT_GT(std::strlen(text), 0u);
        if (s >= 0 && s <= 4) {
            for (const std::string &other : seen) EXPECT_NE(other, text);
            seen.push_back(text);
        }
    }
    EXPECT_NE(std::string(attn_status_string(ATTN_OK)).find("ATTN_OK"), std::string::npos);
    EXPECT_NE(std::string(attn_status_string(ATTN_UNSUPPORTED)).find("ATTN_UNSUPPORTED"),
              std::string::npos);
    EXPECT_STREQ(attn_status_string(attn_status(77)), attn_status_string(attn_status(-5)));
    EXPECT_EQ(std::find(seen.begin(), seen.end(), attn_status_string(attn_status(77))),
              seen.end());
}

TEST(ApiStatus, VersionMatchesTheMacros) {
    EXPECT_STREQ(attn_version(), "0.3.0");
    EXPECT_EQ(attn_version(), attn_version());  // static text
    const std::string want = std::to_string(ATTN_VERSION_MAJOR) + "." +
                             std::to_string(ATTN_VERSION_MINOR) + "." +
                             std::to_string(ATTN_VERSION_PATCH);
    EXPECT_EQ(want, attn_version());
}

// The last error is per thread, is "" before any failure, and survives later successes.
TEST(ApiStatus, LastErrorIsThreadLocalAndStaysUntilTheNextFailure) {
    std::string fresh = "unset";
    std::thread([&] { fresh = attn_last_error(); }).join();
    EXPECT_EQ(fresh, "");

    EXPECT_EQ(attn_softmax_f32(nullptr, -7, 4, 1.0f, nullptr, 4, nullptr, 4),
              ATTN_INVALID_ARGUMENT);
    const std::string failure = attn_last_error();
    EXPECT_EQ(failure, "attn_softmax_f32: rows = -7, must be >= 0");

    std::string other_thread = "unset";
    std::thread([&] {
        attn_gemm_f32(nullptr, ATTN_NO_TRANS, ATTN_NO_TRANS, -1, 1, 1, 1.0f, nullptr, 1, nullptr,
                      1, 0.0f, nullptr, 1);
        other_thread = attn_last_error();
    }).join();
    EXPECT_EQ(other_thread, "attn_gemm_f32: m = -1, must be >= 0");
    EXPECT_EQ(attn_last_error(), failure);  // untouched by the other thread

    expect_small_gemm(nullptr);            // a success does not clear it
    EXPECT_EQ(attn_last_error(), failure);
}

// Every entry point runs inside guarded(): exceptions become statuses with a message and
// never cross into C. Checked directly, since valid calls do not throw on demand.
TEST(ApiStatus, ExceptionsBecomeStatuses) {
    using attn::api::guarded;
    EXPECT_EQ(guarded("attn_f", []() -> attn_status { throw std::bad_alloc(); }),
              ATTN_OUT_OF_MEMORY);
    EXPECT_STREQ(attn_last_error(), "attn_f: out of memory");
    EXPECT_EQ(guarded("attn_g", []() -> attn_status { throw std::runtime_error("tile 3"); }),
              ATTN_INTERNAL_ERROR);
    EXPECT_STREQ(attn_last_error(), "attn_g: internal error: tile 3");
    EXPECT_EQ(guarded("attn_h", []() -> attn_status { throw 42; }), ATTN_INTERNAL_ERROR);
    EXPECT_STREQ(attn_last_error(), "attn_h: internal error: unknown exception");
    EXPECT_EQ(guarded("attn_i", [] { return ATTN_OK; }), ATTN_OK);
    EXPECT_STREQ(attn_last_error(), "attn_h: internal error: unknown exception");
}

}  // namespace
