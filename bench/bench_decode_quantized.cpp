// Decoding over quantized KV caches against a bf16 cache, the shape of today's grouped-query
// models: one query row per head, H32 over 8 KV heads, D128, B = 1, on the highest SIMD level,
// and over 32 KV heads (one query row per KV head: no reuse of a dequantized vector):
//   decode_quantized/simd/<isa>/threads:{1,2}/H32_KV<KV>_Lk<L>_D128_<cache>
//   (KV, L) in {(8, 4096), (8, 16384), (32, 4096), (32, 16384): 256 MiB of bf16, from memory,
//   (32, 256) and (8, 1024): 4 MiB of bf16, in cache, the kernel's own time at one and at four
//   query rows a KV head}; cache: bf16, I8_row (int8, one scale per row),
//   I8_g32 (int8, a scale per 32 elements: llama.cpp's q8_0), I4_g32 and U4_g32 (4-bit, a scale
//   per 32 elements; U4 with zero points), FP8_E4M3_row; and bf16q: bf16 queries and output
//   over the bf16 cache, on the highest f32 level (exact products in f32) and on avx512_bf16
//   (bf16 pairs, the decode_pairs entry, at 8 KV heads; one query head a KV head takes the f32
//   products there too), for their ratio in one run; the bf16 cache with f32 queries on
//   avx512_bf16 too (decode_pv_pairs at 8 KV heads: S exact in f32, P V on pairs).
// GB/s counts the bytes of the stored values and of their scales and zero points, read once per
// call: compare with machine/read_bw_decode of the same run, and each cache with bf16; of_read
// is the fraction of the rate of reading those same bytes, the reads alternated with the calls
// (bench_paired_read.hpp); time_per_kv_row, the wall time of a call per key of one KV head (its
// K and V rows): from memory it is the bytes' time unless the kernel's own time, the figure at
// Lk256, is longer.
// The same decoding over caches in 2 MiB pages (madvise(MADV_HUGEPAGE) on 2 MiB-aligned
// buffers, transparent huge pages), bf16, I8_row and I4_g32 at 16384 keys:
//   decode_quantized/simd/<isa>/threads:{1,2}/H32_KV<KV>_Lk16384_D128_<cache>_pages2M
// with huge_pages, the fraction of the cache's K and V bytes the kernel backs with them
// (AnonHugePages of /proc/self/smaps; 0 where the system gives none): with 4 KiB pages every
// 4 KiB of a row stream is a new translation and a boundary the hardware prefetchers stop at.
// Prefill over the same caches (bf16 queries, bf16 output, H8 L2048 D128, not causal) on the
// level automatic dispatch picks, each against the bf16 cache of the same run; I8 also with an
// f32 output (which keeps P in f32: the f32 tiles, unless ATTN_FPMATH_BF16):
//   prefill_quantized/simd/<isa>/threads:{1,2}/H8_L2048_D128_<cache>[_fpmath_bf16|_out_f32]
// A few query rows a head over f32, bf16 and I8 caches (speculative decoding's drafts, short
// chunks of prefill), causal, Lk 4096, D128, f32 queries on the highest SIMD level (bf16
// queries and output over the bf16 cache on the bf16 levels: cache bf16q), 8 heads over 8 KV
// heads, and 32 over 8 for I8:
//   few_rows/<impl>/<isa>/threads:1/H<H>_KV8_Lq<n>_Lk4096_D128_<cache>, n in {5, 8, 16}
// impl "simd" as planned (the decode entry, tiles of 4 rows reading K and V in place, where
// few rows share a KV head: kernels/attention_args.hpp), "packed_tiles" the same call with
// that switched off (ops/sdpa_switch.hpp: the packing entries those rows took before), for the
// ratio in one run; shapes the plan packs either way are not registered.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "bench_common.hpp"
#include "bench_paired_read.hpp"
#include "kernels/attention_args.hpp"
#include "ops/sdpa_switch.hpp"
#include "ref/convert.hpp"

namespace attn_bench {
namespace {

struct quantized_cache {
    const char *name;
    attn_dtype type;
    int64_t group;  // 0: one scale per row
    bool zeros;
};

// Buffers in 2 MiB pages where asked for (huge): 2 MiB-aligned, whole pages, advised
// MADV_HUGEPAGE before their first touch; else the standard allocator's.
template <class T>
struct page_allocator {
    using value_type = T;
    static constexpr size_t huge_page = size_t(2) << 20;
    bool huge = false;
    page_allocator() = default;
    explicit page_allocator(bool h) : huge(h) {}
    template <class U>
    page_allocator(const page_allocator<U> &o) : huge(o.huge) {}
    T *allocate(size_t n) {
        if (!huge) return std::allocator<T>().allocate(n);
        const size_t bytes = (n * sizeof(T) + huge_page - 1) / huge_page * huge_page;
        void *p = std::aligned_alloc(huge_page, bytes);
        if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
        madvise(p, bytes, MADV_HUGEPAGE);
#endif
        return static_cast<T *>(p);
    }
    void deallocate(T *p, size_t n) {
        if (huge) std::free(p);
        else std::allocator<T>().deallocate(p, n);
    }
    bool operator==(const page_allocator &o) const { return huge == o.huge; }
    bool operator!=(const page_allocator &o) const { return huge != o.huge; }
};
using page_bytes = std::vector<uint8_t, page_allocator<uint8_t>>;

// The bytes of the spans the kernel backs with huge pages (AnonHugePages of the mappings of
// /proc/self/smaps they overlap, counted for the overlap), over all their bytes; 0 where
// smaps is not readable.
double huge_page_fraction(const std::vector<byte_span> &spans) {
    std::ifstream smaps("/proc/self/smaps");
    double backed = 0, total = 0;
    for (const byte_span &s : spans) total += double(s.bytes);
    uintptr_t lo = 0, hi = 0;
    std::string line;
    while (std::getline(smaps, line)) {
        unsigned long long a, b;
        if (std::sscanf(line.c_str(), "%llx-%llx ", &a, &b) == 2 && line.find('-') < line.find(' ')) {
            lo = uintptr_t(a), hi = uintptr_t(b);
            continue;
        }
        unsigned long long kb;
        if (std::sscanf(line.c_str(), "AnonHugePages: %llu kB", &kb) != 1 || kb == 0) continue;
        for (const byte_span &s : spans) {  // the mapping's huge pages, at most its overlap with s
            const uintptr_t b0 = reinterpret_cast<uintptr_t>(s.p), b1 = b0 + uintptr_t(s.bytes);
            const uintptr_t o0 = b0 > lo ? b0 : lo, o1 = b1 < hi ? b1 : hi;
            if (o1 > o0) backed += std::min(double(o1 - o0), double(kb) * 1024.0);
        }
    }
    return total > 0 ? backed / total : 0.0;
}

// A cache of heads_kv x len_kv rows of dim for c: random codes (bf16: values of order 0.01),
// its scales (and zero points), and the desc fields that describe it; K and V in 2 MiB pages
// where huge_pages asks (page_allocator).
struct cache_data {
    page_bytes k, v;
    std::vector<float> scale, zero;
    cache_data(const quantized_cache &c, int64_t heads_kv, int64_t len_kv, int64_t dim,
               attn_sdpa_desc &d, bool huge_pages = false)
        : k(page_allocator<uint8_t>(huge_pages)), v(page_allocator<uint8_t>(huge_pages)) {
        const size_t kv_n = size_t(heads_kv * len_kv * dim);
        k.resize(kv_n * size_t(attn_dtype_bits(c.type)) / 8);
        v.resize(k.size());
        std::mt19937 gen(2);
        for (size_t i = 0; i < k.size(); ++i) {
            k[i] = uint8_t(gen());
            v[i] = uint8_t(gen());
            if (c.type == ATTN_DTYPE_FP8_E4M3) k[i] &= 0xbf, v[i] &= 0xbf;  // |x| < 2: no NaN codes
            if (c.type == ATTN_DTYPE_BF16 && i % 2 == 1) k[i] = 0x3c, v[i] = 0x3c;  // bf16 of order 0.01
        }
        if (c.type == ATTN_DTYPE_F32) {  // f32 values of order 0.01
            const std::vector<float> x = random_floats(kv_n, 2);
            for (size_t i = 0; i < kv_n; ++i) {
                const float a = 0.01f * x[i], b = 0.01f * x[kv_n - 1 - i];
                std::memcpy(&k[4 * i], &a, 4);
                std::memcpy(&v[4 * i], &b, 4);
            }
        }
        const bool quantized = c.type != ATTN_DTYPE_BF16 && c.type != ATTN_DTYPE_F32;
        const int64_t groups = quantized ? dim / (c.group ? c.group : dim) : 0;
        scale.assign(size_t(heads_kv * len_kv * groups), 0.01f);
        zero.assign(scale.size(), 8.0f);
        d.heads_kv = heads_kv;
        d.k.batch = d.v.batch = heads_kv * len_kv * dim;
        d.kv_type = c.type;
        if (groups) {
            d.k_scale = d.v_scale = scale.data();
            if (c.zeros) d.k_zero = d.v_zero = zero.data();
            d.k_scale_strides = d.v_scale_strides = attn_layout{heads_kv * len_kv * groups, len_kv * groups, groups};
            d.k_group = d.v_group = c.group;
        }
    }
    // the bytes a call reads, K and V with their scales and zero points, as spans (K's and V's
    // scales are one array here, read once for each)
    std::vector<byte_span> spans(const quantized_cache &c) const {
        std::vector<byte_span> out{{k.data(), int64_t(k.size())}, {v.data(), int64_t(v.size())}};
        const int64_t scale_bytes = int64_t(scale.size() * sizeof(float));
        for (int i = 0; i < 2; ++i) {
            out.push_back({scale.data(), scale_bytes});
            if (c.zeros) out.push_back({zero.data(), scale_bytes});
        }
        return out;
    }
};

void decode_quantized(benchmark::State &state, quantized_cache c, int64_t heads_kv, int64_t len_kv,
                      attn_isa isa, int threads, bool bf16_q, bool huge_pages) {
    const int64_t heads = 32, dim = 128;
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    if (ctx == nullptr) return state.SkipWithError("this CPU cannot run the level");
    const std::vector<float> q = random_floats(size_t(heads * dim), 1);
    const std::vector<uint16_t> qb = to_bf16(q);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, heads, 1, len_kv, dim);
    if (bf16_q) d.q_type = d.out_type = ATTN_DTYPE_BF16;
    const cache_data cache(c, heads_kv, len_kv, dim, d, huge_pages);
    std::vector<float> out(q.size());
    const void *qp = bf16_q ? static_cast<const void *>(qb.data()) : q.data();
    const auto call = [&] { return attn_sdpa(ctx, &d, qp, cache.k.data(), cache.v.data(), out.data()); };
    const double cpu_seconds = time_calls(state, call);
    const std::vector<byte_span> read = cache.spans(c);
    paired_read(state, isa, threads, read, call);
    const double kv_bytes = double(span_bytes(read));
    set_flops(state, 4.0 * double(heads * len_kv * dim));
    set_bytes(state, kv_bytes);
    set_bytes_per_cpu_second(state, kv_bytes * double(state.iterations()),
                             cpu_seconds, threads);
    // wall time a call per KV row (a key of one KV head: its K and V rows), in seconds
    state.counters["time_per_kv_row"] =
        benchmark::Counter(double(heads_kv * len_kv),
                           benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    if (huge_pages)
        state.counters["huge_pages"] = huge_page_fraction(
            {{cache.k.data(), int64_t(cache.k.size())}, {cache.v.data(), int64_t(cache.v.size())}});
}

void prefill_quantized(benchmark::State &state, quantized_cache c, attn_isa isa, int threads,
                       attn_fpmath fpmath, attn_dtype out_type) {
    const int64_t heads = 8, len = 2048, dim = 128;
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads, fpmath);
    if (ctx == nullptr) return state.SkipWithError("this CPU cannot run the level");
    const std::vector<uint16_t> q = to_bf16(random_floats(size_t(heads * len * dim), 1));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, heads, len, len, dim);
    d.q_type = ATTN_DTYPE_BF16;
    d.out_type = out_type;
    const cache_data cache(c, heads, len, dim, d);
    std::vector<float> out(size_t(heads * len * dim));  // room for either output type
    time_calls(state, [&] {
        return attn_sdpa(ctx, &d, q.data(), cache.k.data(), cache.v.data(), out.data());
    });
    set_flops(state, 4.0 * double(heads) * double(len) * double(len) * double(dim));
}

void few_rows(benchmark::State &state, quantized_cache c, int64_t heads, int64_t len_q, attn_isa isa,
              bool bf16_q, bool decode_entry) {
    const int64_t heads_kv = 8, len_kv = 4096, dim = 128;
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, 1);
    if (ctx == nullptr) return state.SkipWithError("this CPU cannot run the level");
    const std::vector<float> qf = random_floats(size_t(heads * len_q * dim), 1);
    const std::vector<uint16_t> qb = to_bf16(qf);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, heads, len_q, len_kv, dim);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (bf16_q) d.q_type = d.out_type = ATTN_DTYPE_BF16;
    const cache_data cache(c, heads_kv, len_kv, dim, d);
    std::vector<float> out(qf.size());
    const void *q = bf16_q ? static_cast<const void *>(qb.data()) : qf.data();
    attn::ops::set_few_rows_on_decode(decode_entry);
    time_calls(state, [&] { return attn_sdpa(ctx, &d, q, cache.k.data(), cache.v.data(), out.data()); });
    attn::ops::set_few_rows_on_decode(true);
    set_flops(state, 4.0 * double(heads * len_q) * double(len_kv * dim));
}

// A cache's name in the benchmarks' shapes: "q" after it for bf16 queries and output.
std::string cache_label(const quantized_cache &c, bool bf16_q) { return std::string(c.name) + (bf16_q ? "q" : ""); }

// decode_quantized/simd/<isa>/threads:<threads>/H32_KV<heads_kv>_Lk<len_kv>_D128_<label>[_pages2M]
// (cache_label; "_pages2M" for a cache in 2 MiB pages).
void register_decode(const quantized_cache &c, int64_t heads_kv, int64_t len_kv, attn_isa isa,
                     int threads, bool bf16_q, bool huge_pages) {
    const std::string shape = "H32_KV" + std::to_string(heads_kv) + "_Lk" + std::to_string(len_kv) +
                              "_D128_" + cache_label(c, bf16_q) + (huge_pages ? "_pages2M" : "");
    benchmark::RegisterBenchmark(bench_name("decode_quantized", "simd", isa_name(isa), threads, shape).c_str(),
                                 decode_quantized, c, heads_kv, len_kv, isa, threads, bf16_q, huge_pages)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

bool register_decode_quantized() {
    const std::vector<attn_isa> isas = simd_isas();
    if (isas.empty()) return false;
    const quantized_cache bf16{"bf16", ATTN_DTYPE_BF16, 0, false}, i8_row{"I8_row", ATTN_DTYPE_I8, 0, false},
        i4_g32{"I4_g32", ATTN_DTYPE_I4, 32, false};
    const quantized_cache caches[] = {bf16,
                                      i8_row,
                                      {"I8_g32", ATTN_DTYPE_I8, 32, false},
                                      i4_g32,
                                      {"U4_g32", ATTN_DTYPE_U4, 32, true},
                                      {"FP8_E4M3_row", ATTN_DTYPE_FP8_E4M3, 0, false}};
    const int64_t shapes[][2] = {{8, 4096}, {8, 16384}, {32, 4096}, {32, 16384}, {32, 256}, {8, 1024}};  // {heads_kv, len_kv}
    // the bf16 cache (f32 queries) also on the first bf16 level: P V on pairs there
    // (decode_pv_pairs) where several query heads share a KV head
    for (const auto &s : shapes)
        for (const quantized_cache &c : caches)
            for (attn_isa isa : c.type == ATTN_DTYPE_BF16 && !bf16_isas().empty()
                                    ? std::vector<attn_isa>{isas.back(), bf16_isas().front()}
                                    : std::vector<attn_isa>{isas.back()})
                for (int threads : {1, 2}) register_decode(c, s[0], s[1], isa, threads, false, false);
    // caches from memory in 2 MiB pages
    for (const int64_t heads_kv : {32, 8})
        for (const quantized_cache &c : {bf16, i8_row, i4_g32})
            for (int threads : {1, 2}) register_decode(c, heads_kv, 16384, isas.back(), threads, false, true);
    // bf16 queries and output over the bf16 cache (bf16 products allowed): the f32 decode entry
    // on the highest f32 level, and VDPBF16PS (decode_pairs) on the bf16 levels, in one run
    std::vector<attn_isa> q16_levels{isas.back()};
    if (!bf16_isas().empty()) q16_levels.push_back(bf16_isas().front());
    for (const auto &s : shapes)
        for (attn_isa isa : q16_levels)
            for (int threads : {1, 2}) register_decode(bf16, s[0], s[1], isa, threads, true, false);
    // prefill on the level AUTO picks: the bf16 cache on its pair (or tile) path, I8 strict
    // (bf16 pairs of its codes where the level has them), I8 with an f32 output, and I8 under
    // ATTN_FPMATH_BF16
    std::vector<attn_isa> levels = isas;
    for (attn_isa isa : bf16_isas()) levels.push_back(isa);
    const struct {
        quantized_cache c;
        attn_fpmath fpmath;
        attn_dtype out;
        const char *suffix;
    } prefills[] = {{bf16, ATTN_FPMATH_STRICT, ATTN_DTYPE_BF16, ""},
                    {i8_row, ATTN_FPMATH_STRICT, ATTN_DTYPE_BF16, ""},
                    {i8_row, ATTN_FPMATH_STRICT, ATTN_DTYPE_F32, "_out_f32"},
                    {i8_row, ATTN_FPMATH_BF16, ATTN_DTYPE_BF16, "_fpmath_bf16"}};
    for (const auto &p : prefills)
        for (int threads : {1, 2}) {
            const std::string shape = std::string("H8_L2048_D128_") + p.c.name + p.suffix;
            benchmark::RegisterBenchmark(
                bench_name("prefill_quantized", "simd", isa_name(levels.back()), threads, shape).c_str(),
                prefill_quantized, p.c, levels.back(), threads, p.fpmath, p.out)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
    const quantized_cache f32{"f32", ATTN_DTYPE_F32, 0, false};
    const struct {
        quantized_cache c;
        bool bf16_q;
        int64_t heads;
    } few[] = {{f32, false, 8}, {bf16, false, 8}, {i8_row, false, 8}, {bf16, true, 8}, {i8_row, false, 32}};
    for (const auto &f : few)
        for (attn_isa isa : f.bf16_q ? bf16_isas() : std::vector<attn_isa>{isas.back()})
            for (int64_t len_q : {5, 8, 16}) {
                // (bf16 queries over bf16: pairs both in place and packed, the bits as they are)
                const int64_t bits = int64_t(attn_dtype_bits(f.c.type));
                if (f.heads / 8 * len_q * bits > attn::kernels::decode_few_row_bits) continue;  // packed either way
                for (const bool decode_entry : {true, false}) {
                    const std::string shape = "H" + std::to_string(f.heads) + "_KV8_Lq" + std::to_string(len_q) +
                                              "_Lk4096_D128_" + cache_label(f.c, f.bf16_q);
                    benchmark::RegisterBenchmark(
                        bench_name("few_rows", decode_entry ? "simd" : "packed_tiles", isa_name(isa), 1, shape).c_str(),
                        few_rows, f.c, f.heads, len_q, isa, f.bf16_q, decode_entry)
                        ->UseRealTime()
                        ->Unit(benchmark::kMillisecond);
                }
            }
    return true;
}

const bool registered = register_decode_quantized();

}  // namespace
}  // namespace attn_bench
