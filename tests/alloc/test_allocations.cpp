// The heap allocations of a repeated attn_sdpa or attn_sdpa_backward call. This binary replaces operator new and
// delete (every form) and the malloc family (malloc, calloc, realloc, posix_memalign,
// aligned_alloc, memalign, free) with counters in front of glibc's allocator, so it is a test
// executable of its own: the replacement would count every allocation of any test linked with
// it. Only calls made while a measurement is armed count, from any thread (TBB's workers
// included). oneTBB's own objects (tasks, arenas) do not come through here when libtbb finds
// libtbbmalloc, as Debian's does: they come from its pools, which this test does not see.
//
// The property: a context keeps its scratch, so after one warm-up call a repeated call of the
// same or a smaller shape allocates no memory proportional to the problem. Checked for a
// prefill, a decoding step with split keys and a serving step (q_start over a paged cache), on
// a SIMD context with 1 and 2 threads: the bytes a repeated call allocates stay under a small
// constant, whatever the shape. And for the fused backward (f32 tensors; bf16 tensors on the
// levels with bf16 products), whose repeated calls would otherwise fault in megabytes of fresh
// pages each training step. With ATTN_ALLOC_REPORT=1 in the environment every counted
// allocation is printed with its size and its caller (module and offset, for addr2line or
// gdb's `info symbol`).
#include <dlfcn.h>
#include <execinfo.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attn/attn.h"

extern "C" {
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void __libc_free(void *);
}

namespace {

constexpr int kFrames = 6;
struct allocation {
    size_t bytes;
    void *caller;
    void *frames[kFrames];  // with ATTN_ALLOC_REPORT: the call stack, innermost first
    int depth;
};
constexpr size_t kRecords = 1024;
std::atomic<bool> armed{false};
bool with_stacks = false;
thread_local bool in_note = false;  // backtrace() may allocate: not counted again
std::atomic<uint64_t> count{0}, total_bytes{0};
std::atomic<size_t> recorded{0};
allocation records[kRecords];  // the first kRecords of a measurement

__attribute__((noinline)) void note(size_t bytes, void *caller) {
    if (!armed.load(std::memory_order_relaxed)) return;
    count.fetch_add(1, std::memory_order_relaxed);
    total_bytes.fetch_add(bytes, std::memory_order_relaxed);
    const size_t at = recorded.fetch_add(1, std::memory_order_relaxed);
    if (at >= kRecords) return;
    records[at].bytes = bytes, records[at].caller = caller, records[at].depth = 0;
    if (with_stacks && !in_note) {
        in_note = true;
        records[at].depth = backtrace(records[at].frames, kFrames);
        in_note = false;
    }
}

void *aligned(size_t align, size_t bytes) {
    return __libc_memalign(align < sizeof(void *) ? sizeof(void *) : align, bytes ? bytes : 1);
}
void *or_throw(void *p) {
    if (!p) throw std::bad_alloc();
    return p;
}

}  // namespace

// The malloc family (the library's C allocations, TBB's, and the C++ runtime's own).
extern "C" {
void *malloc(size_t n) {
    note(n, __builtin_return_address(0));
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size) {
    note(n * size, __builtin_return_address(0));
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n) {
    note(n, __builtin_return_address(0));
    return __libc_realloc(p, n);
}
int posix_memalign(void **out, size_t align, size_t n) {
    note(n, __builtin_return_address(0));
    void *p = __libc_memalign(align, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
void *aligned_alloc(size_t align, size_t n) {
    note(n, __builtin_return_address(0));
    return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n) {
    note(n, __builtin_return_address(0));
    return __libc_memalign(align, n);
}
void free(void *p) { __libc_free(p); }
}

// operator new in every form: the caller is the code that allocates (std::vector, make_unique).
void *operator new(size_t n) {
    note(n, __builtin_return_address(0));
    return or_throw(__libc_malloc(n ? n : 1));
}
void *operator new[](size_t n) {
    note(n, __builtin_return_address(0));
    return or_throw(__libc_malloc(n ? n : 1));
}
void *operator new(size_t n, const std::nothrow_t &) noexcept {
    note(n, __builtin_return_address(0));
    return __libc_malloc(n ? n : 1);
}
void *operator new[](size_t n, const std::nothrow_t &) noexcept {
    note(n, __builtin_return_address(0));
    return __libc_malloc(n ? n : 1);
}
void *operator new(size_t n, std::align_val_t a) {
    note(n, __builtin_return_address(0));
    return or_throw(aligned(size_t(a), n));
}
void *operator new[](size_t n, std::align_val_t a) {
    note(n, __builtin_return_address(0));
    return or_throw(aligned(size_t(a), n));
}
void *operator new(size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
    note(n, __builtin_return_address(0));
    return aligned(size_t(a), n);
}
void *operator new[](size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
    note(n, __builtin_return_address(0));
    return aligned(size_t(a), n);
}
void operator delete(void *p) noexcept { __libc_free(p); }
void operator delete[](void *p) noexcept { __libc_free(p); }
void operator delete(void *p, size_t) noexcept { __libc_free(p); }
void operator delete[](void *p, size_t) noexcept { __libc_free(p); }
void operator delete(void *p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete(void *p, size_t, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void *p, size_t, std::align_val_t) noexcept { __libc_free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { __libc_free(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { __libc_free(p); }
void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { __libc_free(p); }
void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { __libc_free(p); }

namespace {

struct usage {
    uint64_t allocations = 0, bytes = 0;
};

// Counts the allocations of f(); with ATTN_ALLOC_REPORT set, prints each one.
template <class F>
usage measure(const char *what, F f) {
    count = 0, total_bytes = 0, recorded = 0;
    with_stacks = std::getenv("ATTN_ALLOC_REPORT") != nullptr;
    if (with_stacks) {  // the first backtrace() loads the unwinder, which allocates
        void *frames[kFrames];
        backtrace(frames, kFrames);
    }
    armed = true;
    f();
    armed = false;
    const usage u{count.load(), total_bytes.load()};
    if (std::getenv("ATTN_ALLOC_REPORT")) {
        std::printf("%s: %llu allocations, %llu bytes\n", what, (unsigned long long)u.allocations,
                    (unsigned long long)u.bytes);
        for (size_t i = 0; i < std::min<size_t>(recorded.load(), kRecords); ++i) {
            std::printf("  %8zu bytes, called from", records[i].bytes);
            // frame 0 is note() itself, frame 1 the replaced allocator
            for (int f = 2; f < records[i].depth; ++f) {
                Dl_info info{};
                const bool named = dladdr(records[i].frames[f], &info) != 0;
                const uintptr_t base = named ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
                std::printf(" %s+%#lx", named ? info.dli_fname : "?",
                            (unsigned long)(reinterpret_cast<uintptr_t>(records[i].frames[f]) - base));
            }
            std::printf("\n");
        }
    }
    return u;
}

attn_context *simd_context(int threads) {
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = ATTN_IMPL_SIMD;
    cfg.num_threads = threads;
    attn_context *c = nullptr;
    return attn_context_create(&cfg, &c) == ATTN_OK ? c : nullptr;
}

// One attention problem with its tensors, of a size set by `scale` (1: small, 2: large).
struct problem {
    attn_sdpa_desc d;
    std::vector<float> q, k, v, out;
    std::vector<int32_t> q_start, kv_len, block_table;

    attn_status run(attn_context *ctx) { return attn_sdpa(ctx, &d, q.data(), k.data(), v.data(), out.data()); }
    void fill() {
        for (std::vector<float> *t : {&q, &k, &v})
            for (size_t i = 0; i < t->size(); ++i) (*t)[i] = float(int(i * 7919 % 33) - 16) / 16.0f;
    }
};

// Causal prefill: 1 x 4 heads x 128 * scale tokens, dim 64.
problem prefill(int scale) {
    problem p;
    const int64_t L = 128 * scale, H = 4, D = 64;
    attn_sdpa_desc_init(&p.d, 1, H, L, L, D);
    p.d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    p.q.resize(size_t(H * L * D)), p.k = p.q, p.v = p.q, p.out = p.q;
    p.fill();
    return p;
}

// One decoding token, 8 query heads over 2 KV heads, 2048 * scale keys, dim 64: few query
// tiles, so the keys are split into chunks.
problem decode(int scale) {
    problem p;
    const int64_t Lk = 2048 * scale, H = 8, KV = 2, D = 64;
    attn_sdpa_desc_init(&p.d, 1, H, 1, Lk, D);
    p.d.heads_kv = KV;
    p.d.k = p.d.v = attn_layout{KV * Lk * D, Lk * D, D};
    p.d.lse = nullptr;
    p.q.resize(size_t(H * D)), p.out = p.q;
    p.k.resize(size_t(KV * Lk * D)), p.v = p.k;
    p.fill();
    return p;
}

// A serving step: two prefill chunks and two decoding tokens (q_start) over a paged cache of
// 16-key pages (kv_len, block_table), H8 over KV2, dim 64, contexts growing with scale.
problem serving(int scale) {
    problem p;
    const int64_t H = 8, KV = 2, D = 64, page = 16;
    const int32_t queries[] = {32, 1, 1, 16}, context[] = {300, 900, 120, 500};
    p.q_start = {0};
    int64_t pages = 0, longest = 0, stride = 0;
    for (int b = 0; b < 4; ++b) {
        p.q_start.push_back(p.q_start.back() + queries[b] * scale);
        p.kv_len.push_back(context[b] * scale);
        longest = std::max<int64_t>(longest, context[b] * scale);
    }
    stride = (longest + page - 1) / page;
    for (int b = 0; b < 4; ++b)  // sequence b's pages: consecutive ids after the previous ones
        for (int64_t e = 0; e < stride; ++e) p.block_table.push_back(int32_t(e < (p.kv_len[b] + page - 1) / page ? pages++ : 0));
    const int64_t total_q = p.q_start.back();
    attn_sdpa_desc_init(&p.d, 4, H, 32 * scale, longest, D);
    p.d.heads_kv = KV;
    p.d.q = p.d.out = attn_layout{0, D, H * D};
    p.d.k = p.d.v = attn_layout{KV * page * D, page * D, D};
    p.d.q_start = p.q_start.data();
    p.d.kv_len = p.kv_len.data();
    p.d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    p.d.block_table = p.block_table.data();
    p.d.block_table_stride = stride;
    p.d.page_size = page;
    p.d.num_pages = pages;
    p.q.resize(size_t(total_q * H * D)), p.out = p.q;
    p.k.resize(size_t(pages * KV * page * D)), p.v = p.k;
    p.fill();
    return p;
}

// The counters see what goes through each route (a new-expression, aligned operator new,
// malloc): otherwise the property below would hold whatever the library does.
volatile void *sink;
TEST(allocation_counting, SeesNewAlignedNewAndMalloc) {
    std::vector<float> *v = nullptr;
    void *m = nullptr, *a = nullptr;
    const usage u = measure("counting", [&] {
        v = new std::vector<float>(1000);
        m = std::malloc(300);
        a = ::operator new(256, std::align_val_t(64));
    });
    sink = m;
    EXPECT_EQ(u.allocations, 4u);  // the vector object, its 1000 floats, malloc, aligned new
    EXPECT_EQ(u.bytes, sizeof(std::vector<float>) + 4000 + 300 + 256);
    delete v;
    std::free(m);
    ::operator delete(a, std::align_val_t(64));
}

// Bytes a repeated call may allocate: none of it proportional to the problem. (The large
// shapes below hold 0.5 to 4 MB of K/V, and their plans hundreds of tasks; a repeated call
// allocates one 4-8 byte block today, the sort buffer of the validation's overlap check.)
constexpr uint64_t kConstantBytes = 256;

struct alloc_case {
    const char *name;
    problem (*make)(int);
    int threads;
};

// After a warm-up call of the large shape, a repeated call of the large and of the small
// shape each allocate less than kConstantBytes.
void expect_no_problem_sized_allocation(const alloc_case &c) {
    attn_context *ctx = simd_context(c.threads);
    ASSERT_NE(ctx, nullptr) << attn_last_error();
    problem large = c.make(2), small = c.make(1);
    ASSERT_EQ(large.run(ctx), ATTN_OK) << attn_last_error();  // warm-up
    attn_status st_large = ATTN_OK, st_small = ATTN_OK;
    const usage again = measure("repeat, large", [&] { st_large = large.run(ctx); });
    const usage smaller = measure("repeat, small", [&] { st_small = small.run(ctx); });
    EXPECT_EQ(st_large, ATTN_OK);
    EXPECT_EQ(st_small, ATTN_OK);
    EXPECT_LT(again.bytes, kConstantBytes) << again.allocations << " allocations";
    EXPECT_LT(smaller.bytes, kConstantBytes) << smaller.allocations << " allocations";
    attn_context_destroy(ctx);
}

std::string case_name(const testing::TestParamInfo<alloc_case> &i) { return i.param.name; }
void PrintTo(const alloc_case &c, std::ostream *os) { *os << c.name; }

class allocations : public testing::TestWithParam<alloc_case> {};
TEST_P(allocations, RepeatedCallAllocatesNoProblemSizedMemory) { expect_no_problem_sized_allocation(GetParam()); }
INSTANTIATE_TEST_SUITE_P(sdpa, allocations,
                         testing::Values(alloc_case{"prefill_1t", prefill, 1}, alloc_case{"prefill_2t", prefill, 2},
                                         alloc_case{"decode_1t", decode, 1}, alloc_case{"decode_2t", decode, 2},
                                         alloc_case{"serving_1t", serving, 1}, alloc_case{"serving_2t", serving, 2}),
                         case_name);

// The backward: a repeated attn_sdpa_backward of H4 causal L = 256 * scale, D64 (f32 tensors,
// the fused f32 kernel; or bf16 tensors, the kernel with bf16 products on the levels that have
// one: pairs or AMX tiles, with its transposed copies of Q and dO), its lse from the forward.
struct backward_problem {
    attn_sdpa_desc d;
    std::vector<uint8_t> q, k, v, out, dout, dq, dk, dv;
    std::vector<float> lse;

    backward_problem(int scale, attn_dtype t) {
        const int64_t L = 256 * scale, H = 4, D = 64;
        attn_sdpa_desc_init(&d, 1, H, L, L, D);
        d.causal = ATTN_CAUSAL_TOP_LEFT;
        d.q_type = d.kv_type = d.out_type = t;
        const size_t n = size_t(H * L * D), bytes = t == ATTN_DTYPE_F32 ? 4 : 2;
        for (std::vector<uint8_t> *x : {&q, &k, &v, &out, &dout, &dq, &dk, &dv}) x->resize(n * bytes);
        for (size_t i = 0; i < n; ++i) {
            const float f = float(int(i * 7919 % 33) - 16) / 16.0f;
            for (std::vector<uint8_t> *x : {&q, &k, &v, &dout}) {
                if (bytes == 4) {
                    std::memcpy(x->data() + 4 * i, &f, 4);
                } else {
                    uint32_t w;
                    std::memcpy(&w, &f, 4);
                    const uint16_t h = uint16_t(w >> 16);  // exact: f has few significant bits
                    std::memcpy(x->data() + 2 * i, &h, 2);
                }
            }
        }
        lse.resize(size_t(H * L));
    }
    attn_status forward(attn_context *ctx) {
        d.lse = lse.data();
        const attn_status st = attn_sdpa(ctx, &d, q.data(), k.data(), v.data(), out.data());
        d.lse = nullptr;
        return st;
    }
    attn_status run(attn_context *ctx) {
        return attn_sdpa_backward(ctx, &d, q.data(), k.data(), v.data(), out.data(), dout.data(),
                                  lse.data(), dq.data(), dk.data(), dv.data());
    }
};

struct backward_case {
    const char *name;
    attn_dtype type;
    int threads;
};

// After a warm-up call of the large shape, a repeated backward of the large and of the small
// shape each allocate less than kBackwardBytes (448 bytes today: the call's bookkeeping of key
// chunks and tasks), where the first call allocates 0.8 to 2.4 MB.
constexpr uint64_t kBackwardBytes = 4 << 10;

void expect_backward_reuses_memory(const backward_case &c) {
    attn_context *ctx = simd_context(c.threads);
    ASSERT_NE(ctx, nullptr) << attn_last_error();
    const std::string level = attn_context_isa(ctx);
    if (c.type == ATTN_DTYPE_BF16 && level != "avx512_bf16" && level != "amx") {
        attn_context_destroy(ctx);  // 16-bit tensors widen into f32 copies made for each call
        GTEST_SKIP() << "level " << level << " has no kernel with bf16 products";
    }
    backward_problem large(2, c.type), small(1, c.type);
    ASSERT_EQ(large.forward(ctx), ATTN_OK) << attn_last_error();
    ASSERT_EQ(small.forward(ctx), ATTN_OK) << attn_last_error();
    attn_status st_first = ATTN_OK, st_large = ATTN_OK, st_small = ATTN_OK;
    const usage first = measure("backward, first", [&] { st_first = large.run(ctx); });
    const usage again = measure("backward, repeat, large", [&] { st_large = large.run(ctx); });
    const usage smaller = measure("backward, repeat, small", [&] { st_small = small.run(ctx); });
    EXPECT_EQ(st_first, ATTN_OK);
    EXPECT_EQ(st_large, ATTN_OK);
    EXPECT_EQ(st_small, ATTN_OK);
    EXPECT_GT(first.bytes, uint64_t(1) << 19);  // the measurement sees the first call's buffers
    EXPECT_LT(again.bytes, kBackwardBytes) << again.allocations << " allocations";
    EXPECT_LT(smaller.bytes, kBackwardBytes) << smaller.allocations << " allocations";
    attn_context_destroy(ctx);
}

void PrintTo(const backward_case &c, std::ostream *os) { *os << c.name; }

class backward_allocations : public testing::TestWithParam<backward_case> {};
TEST_P(backward_allocations, RepeatedCallReusesItsMemory) { expect_backward_reuses_memory(GetParam()); }
INSTANTIATE_TEST_SUITE_P(sdpa_backward, backward_allocations,
                         testing::Values(backward_case{"f32_1t", ATTN_DTYPE_F32, 1},
                                         backward_case{"f32_2t", ATTN_DTYPE_F32, 2},
                                         backward_case{"bf16_1t", ATTN_DTYPE_BF16, 1},
                                         backward_case{"bf16_2t", ATTN_DTYPE_BF16, 2}),
                         [](const testing::TestParamInfo<backward_case> &i) {
                             return std::string(i.param.name);
                         });

}  // namespace
