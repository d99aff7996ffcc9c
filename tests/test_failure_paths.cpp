// Failure paths: scratch the system cannot give (ATTN_OUT_OF_MEMORY, nothing written, nothing
// leaked), many context create/destroy cycles, ISA caps against what the CPU has, and
// pointers that are not 64-byte aligned (every op, every path, same result as aligned).
#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "test_util.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define ATTN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTN_TEST_ASAN 1
#endif
#endif

namespace {

using attn_test::random_tensor;

// Bytes the C heap currently holds for the program (arena chunks in use + mmapped blocks).
size_t heap_in_use() {
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

class failure_paths : public attn_test::path_test {};

// Why the system might grant an allocation of `bytes` (empty when it cannot): Linux refuses
// one larger than RAM + swap unless /proc/sys/vm/overcommit_memory is 1 ("always").
std::string could_be_granted(double bytes) {
    std::string why;
    if (FILE *f = std::fopen("/proc/sys/vm/overcommit_memory", "r")) {
        int mode = -1;
        if (std::fscanf(f, "%d", &mode) == 1 && mode == 1)
            why = "vm.overcommit_memory = 1 grants any allocation that fits the address space";
        std::fclose(f);
    }
    if (FILE *f = std::fopen("/proc/meminfo", "r")) {
        char key[64];
        double kib = 0.0, total = 0.0;
        while (std::fscanf(f, "%63s %lf kB", key, &kib) == 2)
            if (std::strcmp(key, "MemTotal:") == 0 || std::strcmp(key, "SwapTotal:") == 0)
                total += kib * 1024.0;
        std::fclose(f);
        if (total >= bytes) why = "RAM + swap hold the allocation";
    }
    return why;
}

// Self-attention with d_model = 1 and heads * head_dim = 2^20 over 2^20 tokens: the inputs
// are 2^20 floats each (4 MiB), but the projections Q, K, V are [2^20, 2^20] = 4 TiB each.
// No implementation can compute this without that scratch, and no system can give it.
TEST_P(failure_paths, out_of_memory_writes_nothing_and_leaks_nothing) {
#ifdef ATTN_TEST_ASAN
    GTEST_SKIP() << "AddressSanitizer's operator new reports a failed allocation and exits "
                    "instead of throwing std::bad_alloc";
#endif
    const int64_t tokens = int64_t(1) << 20, width = int64_t(1) << 20;
    const std::string granted = could_be_granted(double(tokens) * double(width) * 4.0);
    if (!granted.empty())
        GTEST_SKIP() << "a 4 TiB allocation may succeed on this machine: " << granted;
    attn_mha_desc d;
    attn_mha_desc_init(&d, 1, tokens, tokens, 1, 1);
    d.head_dim = width;
    std::vector<float> x(size_t(tokens), 0.5f), w(size_t(width), 0.25f);
    d.w_q = d.w_k = d.w_v = d.w_o = w.data();
    std::vector<float> y(size_t(tokens), 42.0f);

    auto attempt = [&] {
        attn_status s = attn_mha_forward_f32(ctx(), &d, x.data(), x.data(), y.data());
        EXPECT_EQ(s, ATTN_OUT_OF_MEMORY) << attn_last_error();
        EXPECT_STRNE(attn_last_error(), "");
    };
    attempt();  // first failure: lazily created state (message buffers, default pools)
    const size_t before = heap_in_use();
    for (int i = 0; i < 20; ++i) attempt();
    const size_t after = heap_in_use();
    EXPECT_LE(after, before + 4096) << "heap grew by " << (after - before) << " bytes over 20 failed calls";
    for (float v : y) ASSERT_EQ(v, 42.0f) << "a failed call wrote its output";

    // The backward needs the same projections: same outcome, gradients untouched.
    std::vector<float> dx(size_t(tokens), 42.0f), dw(size_t(width), 42.0f);
    attn_mha_grads g{dw.data(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    EXPECT_EQ(attn_mha_backward_f32(ctx(), &d, x.data(), x.data(), x.data(), dx.data(), nullptr, &g),
              ATTN_OUT_OF_MEMORY)
        << attn_last_error();
    for (float v : dx) ASSERT_EQ(v, 42.0f);
    for (float v : dw) ASSERT_EQ(v, 42.0f);
}

// 10 000 create/destroy cycles over every configuration, some of them used for a call. The
// heap must not grow with the number of cycles (LeakSanitizer checks the same in the
// sanitizer build).
TEST(failure_paths_contexts, ten_thousand_create_destroy_cycles) {
    const attn_impl impls[] = {ATTN_IMPL_AUTO, ATTN_IMPL_REFERENCE, ATTN_IMPL_SIMD};
    std::vector<float> x = random_tensor(64, 1), y(64);
    auto cycle = [&](int i) {
        attn_config cfg;
        attn_config_init(&cfg);
        cfg.impl = impls[i % 3];
        cfg.num_threads = i % 4;
        attn_context *c = nullptr;
        ASSERT_EQ(attn_context_create(&cfg, &c), ATTN_OK) << attn_last_error();
        if (i % 10 == 0) ASSERT_EQ(attn_softmax_f32(c, 4, 16, 1.0f, x.data(), 16, y.data(), 16), ATTN_OK);
        attn_context_destroy(c);
    };
    for (int i = 0; i < 100; ++i) cycle(i);  // TBB's own pools reach their steady state
    const size_t before = heap_in_use();
    for (int i = 100; i < 10000; ++i) {
        cycle(i);
        if (HasFatalFailure()) return;
    }
    const size_t after = heap_in_use();
    // A leak of even one small object per cycle would be ~100 KiB.
    EXPECT_LE(after, before + 64 * 1024) << "heap grew by " << (after - before) << " bytes";
    attn_context_destroy(nullptr);
}

// Every ISA cap at or below what this CPU has gives a context of exactly that ISA; a cap
// above it is ATTN_UNSUPPORTED. The CPU is probed here independently of the library.
TEST(failure_paths_contexts, isa_caps_follow_the_cpu) {
    __builtin_cpu_init();
    const bool fma = __builtin_cpu_supports("fma");
    struct cap {
        attn_isa isa;
        const char *name;
        bool cpu_has;
    } caps[] = {
        {ATTN_ISA_SSE4, "sse4", __builtin_cpu_supports("sse4.2") != 0},
        {ATTN_ISA_AVX2, "avx2", __builtin_cpu_supports("avx2") && fma},
        {ATTN_ISA_AVX512, "avx512",
         __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && fma},
    };
    for (const cap &c : caps) {
        attn_config cfg;
        attn_config_init(&cfg);
        cfg.impl = ATTN_IMPL_SIMD;
        cfg.max_isa = c.isa;
        attn_context *ctx = nullptr;
        attn_status s = attn_context_create(&cfg, &ctx);
        if (c.cpu_has) {
            ASSERT_EQ(s, ATTN_OK) << c.name << ": " << attn_last_error();
            EXPECT_STREQ(attn_context_isa(ctx), c.name);
            attn_context_destroy(ctx);
        } else {
            EXPECT_EQ(s, ATTN_UNSUPPORTED) << c.name;
            EXPECT_NE(std::string(attn_last_error()).find(c.name), std::string::npos) << attn_last_error();
        }
    }
}

// A buffer whose data starts `shift` floats after a 64-byte boundary.
struct shifted {
    std::vector<float> storage;
    size_t shift;
    shifted(const std::vector<float> &values, size_t shift_) : storage(values.size() + 32), shift(shift_) {
        float *p = data();
        std::memcpy(p, values.data(), values.size() * sizeof(float));
    }
    float *data() {
        auto base = reinterpret_cast<uintptr_t>(storage.data());
        auto aligned = (base + 63) & ~uintptr_t(63);
        return reinterpret_cast<float *>(aligned) + shift;
    }
    std::vector<float> values(size_t n) { return std::vector<float>(data(), data() + n); }
};

// Runs `call` with every buffer 64-byte aligned, then with every buffer one float further,
// and compares every output.
void expect_alignment_blind(const std::vector<std::vector<float>> &buffers, size_t outputs_from,
                            const std::function<attn_status(std::vector<float *> &)> &call) {
    std::vector<std::vector<float>> results[2];
    for (size_t shift : {size_t(0), size_t(1)}) {
        std::vector<shifted> bufs;
        for (auto &b : buffers) bufs.emplace_back(b, shift);
        std::vector<float *> ptrs;
        for (auto &b : bufs) ptrs.push_back(b.data());
        ASSERT_EQ(call(ptrs), ATTN_OK) << attn_last_error();
        for (size_t i = outputs_from; i < bufs.size(); ++i) results[shift].push_back(bufs[i].values(buffers[i].size()));
    }
    for (size_t i = 0; i < results[0].size(); ++i)
        EXPECT_LE(attn_test::max_rel_error(results[1][i].data(), results[0][i].data(), results[0][i].size()), 1e-6)
            << "output " << i;
}

TEST_P(failure_paths, unaligned_pointers_give_the_aligned_result) {
    attn_context *c = ctx();
    // gemm: C[45,37] = A[45,70] B[70,37]
    expect_alignment_blind({random_tensor(45 * 70, 1), random_tensor(70 * 37, 2), random_tensor(45 * 37, 3)}, 2,
                           [&](std::vector<float *> &p) {
                               return attn_gemm_f32(c, ATTN_NO_TRANS, ATTN_NO_TRANS, 45, 37, 70, 1.0f, p[0], 70,
                                                    p[1], 37, 0.5f, p[2], 37);
                           });
    expect_alignment_blind({random_tensor(9 * 77, 4), std::vector<float>(9 * 77)}, 1, [&](std::vector<float *> &p) {
        return attn_softmax_f32(c, 9, 77, 0.5f, p[0], 77, p[1], 77);
    });
    // sdpa with weights and lse, GQA and causal; then its backward.
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 2, 4, 19, 45, 24);
    d.heads_kv = 2;
    d.k = d.v = attn_layout{2 * 45 * 24, 45 * 24, 24};
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    size_t nq = 2 * 4 * 19 * 24, nkv = 2 * 2 * 45 * 24, nw = 2 * 4 * 19 * 45, nl = 2 * 4 * 19;
    auto q = random_tensor(nq, 5), k = random_tensor(nkv, 6), v = random_tensor(nkv, 7);
    expect_alignment_blind({q, k, v, std::vector<float>(nq), std::vector<float>(nw), std::vector<float>(nl)}, 3,
                           [&](std::vector<float *> &p) {
                               attn_sdpa_desc dd = d;
                               dd.weights = p[4], dd.lse = p[5];
                               return attn_sdpa_f32(c, &dd, p[0], p[1], p[2], p[3]);
                           });
    std::vector<float> out(nq), lse(nl);
    attn_sdpa_desc fd = d;
    fd.lse = lse.data();
    ASSERT_EQ(attn_sdpa_f32(c, &fd, q.data(), k.data(), v.data(), out.data()), ATTN_OK);
    expect_alignment_blind({q, k, v, out, random_tensor(nq, 8), lse, std::vector<float>(nq), std::vector<float>(nkv),
                            std::vector<float>(nkv)},
                           6, [&](std::vector<float *> &p) {
                               return attn_sdpa_backward_f32(c, &d, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]);
                           });
    // Multi-head attention, d_model 24, 4 heads of 6, 2 key/value heads.
    attn_mha_desc m;
    attn_mha_desc_init(&m, 2, 7, 11, 24, 4);
    m.heads_kv = 2;
    expect_alignment_blind({random_tensor(2 * 7 * 24, 9), random_tensor(2 * 11 * 24, 10), random_tensor(24 * 24, 11),
                            random_tensor(12 * 24, 12), random_tensor(12 * 24, 13), random_tensor(24 * 24, 14),
                            random_tensor(24, 15), std::vector<float>(2 * 7 * 24)},
                           7, [&](std::vector<float *> &p) {
                               attn_mha_desc mm = m;
                               mm.w_q = p[2], mm.w_k = p[3], mm.w_v = p[4], mm.w_o = p[5], mm.b_o = p[6];
                               return attn_mha_forward_f32(c, &mm, p[0], p[1], p[7]);
                           });
    // merge of three parts
    expect_alignment_blind({random_tensor(13 * 20, 16), random_tensor(13 * 20, 17), random_tensor(13 * 20, 18),
                            random_tensor(13, 19), random_tensor(13, 20), random_tensor(13, 21),
                            std::vector<float>(13 * 20), std::vector<float>(13)},
                           6, [&](std::vector<float *> &p) {
                               const float *outs[] = {p[0], p[1], p[2]}, *lses[] = {p[3], p[4], p[5]};
                               return attn_merge_f32(c, 3, 13, 20, outs, lses, p[6], p[7]);
                           });
}

INSTANTIATE_TEST_SUITE_P(all, failure_paths, testing::ValuesIn(attn_test::all_paths()), attn_test::path_name);

}  // namespace
