// This machine's limits, the yardsticks for every other benchmark:
//   machine/fma_peak/<isa>/threads:<n>   GFLOP/s of independent FMA chains at that ISA's width
//   machine/read_bw/<isa>/threads:<n>/1GiB_<where>
//                                        GB/s of summing a 1 GiB array
//   machine/read_bw_decode/<isa>/threads:<n>/128MiB_decode_KV_<where>
//                                        the same at 128 MiB, the K and V that the decode
//                                        benchmark reads (sdpa .../decode_H32_Lq1_Lk4096_D128):
//                                        the figure to compare decode's GB/s with
//   <where> is "beyond_L3" when the array is larger than this machine's last-level cache (read
//   at run time: sysconf(_SC_LEVEL3_CACHE_SIZE), else /sys/devices/system/cpu/cpu0/cache),
//   so the rate is mostly DRAM's, "within_L3" when it fits (part of it may then stay cached
//   from one pass to the next), "L3_unknown" when the machine does not say; each also reports
//   the L3 size it read as the counter L3_MiB.
// Both also report GB/s_cpu, per second the reading threads were on a CPU (bench_common.hpp):
// the wall-time GB/s falls with the machine's load.
//   machine/bf16_peak/avx512_bf16/threads:<n>/vdpbf16ps, machine/bf16_peak/amx/threads:<n>/tdpbf16ps
//                                        GFLOP/s of the 16-bit matrix units (bf16 products,
//                                        f32 sums), where the CPU has them
//   machine/bf16_softmax_ceiling/avx512_bf16/threads:1/D<dim>
//                                        what the bf16 pair tile loop keeps of the products'
//                                        speed with its exponential between them and nothing
//                                        else: the product block alone, with the exponential
//                                        vectors of a row's scores at head dimension dim (one a
//                                        dim VDPBF16PS), and those vectors alone, alternated in
//                                        each iteration. Counters: ceiling (the products' time
//                                        over their time with the vectors among them: the most
//                                        of the VDPBF16PS peak the loop can reach at that dim),
//                                        ceiling_apart (the same with the vectors in a pass of
//                                        their own, as the tile loop runs them), exp_in_dp (a
//                                        vector's cost among the products, in VDPBF16PS: what it
//                                        takes from them) and exp_alone_in_dp (its cost alone,
//                                        in the same unit)
//   machine/decode_row_loops/avx512/threads:1/<type>   (bf16, I8_row, I4_g32, FP8_E4M3_row)
//                                        the arithmetic of decoding one query row a KV head
//                                        (D128) over that cache type with nothing else: K's
//                                        products, the sums, P V, the codes widened as the
//                                        library widens them, 1024 keys in L2
//                                        (arch/machine_decode.hpp). Counters: ns_per_key (one
//                                        key of one KV head), bytes_per_key (its K and V
//                                        values and scales) and GB/s (the rate at which the
//                                        loops alone would read the cache): where that is below
//                                        read_bw_decode, decoding the type at that thread count
//                                        is bound by its arithmetic, and its best speed-up over
//                                        a bf16 cache read at the memory's rate is
//                                        bf16's bytes_per_key / read_bw_decode over this
//                                        ns_per_key
//   exp/attn/<isa>/threads:1/4096, exp/xsimd/<isa>/threads:1/4096
//                                        the library's exp against xsimd::exp, in L1
// n threads each run the same loop on their own data (std::thread each).
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "arch/machine.hpp"
#include "bench_common.hpp"
#include "kernels/kernels.hpp"

namespace attn_bench {

const machine_kernels *machine_kernels_sse4();
const machine_kernels *machine_kernels_avx2();
const machine_kernels *machine_kernels_avx512();
const machine_kernels *machine_kernels_avx512_bf16();
const machine_kernels *machine_kernels_amx();

const machine_kernels *machine_kernels_for(attn_isa isa) {
    switch (isa) {
    case ATTN_ISA_AMX: return machine_kernels_amx();
    case ATTN_ISA_AVX512_BF16: return machine_kernels_avx512_bf16();
    case ATTN_ISA_SSE4: return machine_kernels_sse4();
    case ATTN_ISA_AVX2: return machine_kernels_avx2();
    case ATTN_ISA_AVX512: return machine_kernels_avx512();
    default: return nullptr;
    }
}

namespace {

// Runs f(t) on `threads` threads (the caller is thread 0) and waits for all.
template <class F>
void run_on_threads(int threads, const F &f) {
    std::vector<std::thread> others;
    for (int t = 1; t < threads; ++t) others.emplace_back(f, t);
    f(0);
    for (auto &th : others) th.join();
}

void fma_peak(benchmark::State &state, const machine_kernels *k, int threads) {
    const int64_t reps = 1 << 20;
    for (auto _ : state) {
        run_on_threads(threads, [&](int) { benchmark::DoNotOptimize(k->fma_chains(reps)); });
    }
    set_flops(state, double(threads) * double(reps) * k->chains * 2.0 * k->lanes);
}

// The 16-bit matrix units' peak: `amx` picks the tile products, else VDPBF16PS chains.
void bf16_peak(benchmark::State &state, const machine_kernels *k, int threads, bool amx) {
    const int64_t reps = amx ? 1 << 16 : 1 << 20;
    float (*chains)(int64_t) = amx ? k->amx_chains : k->bf16_chains;
    const double cpu_start = process_cpu_seconds();
    for (auto _ : state) {
        run_on_threads(threads, [&](int) { benchmark::DoNotOptimize(chains(reps)); });
    }
    const double flops = double(threads) * double(reps) *
                         (amx ? k->amx_flops_per_rep : k->bf16_flops_per_rep);
    set_flops(state, flops);
    // per CPU second too: on a loaded machine the wall-time peak falls with the load
    set_flops_per_cpu_second(state, flops / threads * double(state.iterations()),
                             process_cpu_seconds() - cpu_start, threads);
}

// machine/bf16_softmax_ceiling (see the top of the file): three loops alternated in each
// iteration, each timed on its own.
void bf16_softmax_ceiling(benchmark::State &state, const machine_kernels *k, int dim) {
    const int64_t reps = 1 << 13;                          // rounds of bf16_products_a_round VDPBF16PS
    const int exps = bf16_products_a_round / dim;          // exponential vectors a round
    double products = 0.0, both = 0.0, alone = 0.0;
    using clock = std::chrono::steady_clock;
    for (auto _ : state) {
        const auto t0 = clock::now();
        benchmark::DoNotOptimize(k->bf16_products_exp(reps, 0, true));
        const auto t1 = clock::now();
        benchmark::DoNotOptimize(k->bf16_products_exp(reps, exps, true));
        const auto t2 = clock::now();
        benchmark::DoNotOptimize(k->bf16_products_exp(reps, exps, false));
        const auto t3 = clock::now();
        products += std::chrono::duration<double>(t1 - t0).count();
        both += std::chrono::duration<double>(t2 - t1).count();
        alone += std::chrono::duration<double>(t3 - t2).count();
    }
    const double per_dp = products / (double(state.iterations()) * double(reps) * bf16_products_a_round);
    const double vectors = double(state.iterations()) * double(reps) * exps;
    state.counters["ceiling"] = products / both;
    state.counters["ceiling_apart"] = products / (products + alone);
    state.counters["exp_in_dp"] = (both - products) / vectors / per_dp;
    state.counters["exp_alone_in_dp"] = alone / vectors / per_dp;
    state.counters["vdpbf16ps_GFLOP/s"] = 64.0 / per_dp / 1e9;
}

// machine/decode_row_loops (see the top of the file).
void decode_row_loops(benchmark::State &state, const machine_kernels *k, int kind) {
    const int64_t reps = 1 << 8;
    double seconds = 0.0;
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        benchmark::DoNotOptimize(k->decode_row_loops(kind, reps));
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    const double keys = double(reps) * decode_loop_keys * double(state.iterations());
    const double ns = seconds * 1e9 / keys, bytes = decode_loop_bytes(kind);
    state.counters["ns_per_key"] = ns;
    state.counters["bytes_per_key"] = bytes;
    state.counters["GB/s"] = bytes / ns;
}

// The last-level (L3) cache of one CPU in bytes, as the machine reports it; 0 if unknown.
double l3_bytes() {
    const long from_sysconf = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (from_sysconf > 0) return double(from_sysconf);
    for (int index = 0; index < 8; ++index) {
        const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
        std::ifstream level(dir + "/level"), size(dir + "/size");
        int l = 0;
        std::string text;
        if (!(level >> l) || l != 3 || !(size >> text) || text.empty()) continue;
        const char unit = text.back();
        const double n = std::atof(text.c_str());
        return unit == 'K' ? n * 1024.0 : unit == 'M' ? n * 1048576.0 : n;
    }
    return 0.0;
}

// Where an array of `bytes` sits against this machine's L3 (the benchmark name's last part).
std::string against_l3(size_t bytes) {
    const double l3 = l3_bytes();
    if (l3 <= 0.0) return "L3_unknown";
    return double(bytes) > l3 ? "beyond_L3" : "within_L3";
}

struct aligned_array {
    explicit aligned_array(size_t n)
        : data(static_cast<float *>(::operator new(n * sizeof(float), std::align_val_t(64)))), size(n) {
        for (size_t i = 0; i < n; ++i) data[i] = 1.0f;  // every page resident before timing
    }
    ~aligned_array() { ::operator delete(data, std::align_val_t(64)); }
    aligned_array(const aligned_array &) = delete;
    aligned_array &operator=(const aligned_array &) = delete;
    float *data;
    size_t size;
};

// Each thread sums its own contiguous share of one array of `bytes`, read once per iteration.
void read_bandwidth(benchmark::State &state, const machine_kernels *k, int threads,
                    size_t bytes) {
    const aligned_array array(bytes / sizeof(float));
    const int64_t share = int64_t(array.size) / threads;
    const double cpu_start = process_cpu_seconds();
    for (auto _ : state) {
        run_on_threads(threads, [&](int t) {
            benchmark::DoNotOptimize(k->sum_floats(array.data + t * share, share));
        });
    }
    const double bytes_per_iteration = double(share) * threads * sizeof(float);
    set_bytes(state, bytes_per_iteration);
    state.counters["L3_MiB"] = l3_bytes() / 1048576.0;
    set_bytes_per_cpu_second(state, bytes_per_iteration * double(state.iterations()),
                             process_cpu_seconds() - cpu_start, threads);
}

void exp_throughput(benchmark::State &state, const machine_kernels *k, bool library) {
    const int64_t count = 4096;
    std::vector<float> x(count), y(count);
    for (int64_t i = 0; i < count; ++i) x[size_t(i)] = -30.0f + 0.01f * float(i);
    for (auto _ : state) {
        (library ? k->exp_attn : k->exp_xsimd)(x.data(), y.data(), count);
        benchmark::ClobberMemory();
    }
    state.counters["Gexp/s"] =
        benchmark::Counter(double(count) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

bool register_machine() {
    for (attn_isa isa : simd_isas()) {
        const machine_kernels *k = machine_kernels_for(isa);
        for (bool library : {true, false})
            benchmark::RegisterBenchmark(
                bench_name("exp", library ? "attn" : "xsimd", isa_name(isa), 1, "4096").c_str(),
                exp_throughput, k, library);
        for (int threads : {1, 2}) {
            benchmark::RegisterBenchmark(
                bench_name("machine", "fma_peak", isa_name(isa), threads,
                           "chains" + std::to_string(k->chains)).c_str(),
                fma_peak, k, threads)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
            benchmark::RegisterBenchmark(
                bench_name("machine", "read_bw", isa_name(isa), threads,
                           "1GiB_" + against_l3(size_t(1) << 30)).c_str(),
                read_bandwidth, k, threads, size_t(1) << 30)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
            benchmark::RegisterBenchmark(bench_name("machine", "read_bw_decode", isa_name(isa),
                                                    threads,
                                                    "128MiB_decode_KV_" + against_l3(size_t(128) << 20))
                                             .c_str(),
                                         read_bandwidth, k, threads, size_t(128) << 20)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
    }
    for (attn_isa isa : simd_isas()) {
        const machine_kernels *k = machine_kernels_for(isa);
        if (!k->decode_row_loops) continue;
        const std::pair<int, const char *> kinds[] = {{decode_loop_bf16, "bf16"},
                                                      {decode_loop_i8, "I8_row"},
                                                      {decode_loop_i4, "I4_g32"},
                                                      {decode_loop_e4m3, "FP8_E4M3_row"}};
        for (const auto &kind : kinds)
            benchmark::RegisterBenchmark(bench_name("machine", "decode_row_loops", isa_name(isa), 1, kind.second).c_str(),
                                         decode_row_loops, k, kind.first)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
    }
    for (attn_isa isa : bf16_isas()) {
        const machine_kernels *k = machine_kernels_for(isa);
        const bool amx = isa == ATTN_ISA_AMX;
        for (int threads : {1, 2})
            benchmark::RegisterBenchmark(bench_name("machine", "bf16_peak", isa_name(isa), threads,
                                                    amx ? "tdpbf16ps" : "vdpbf16ps")
                                             .c_str(),
                                         bf16_peak, k, threads, amx)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        if (k->bf16_products_exp)
            for (int dim : {64, 128})
                benchmark::RegisterBenchmark(bench_name("machine", "bf16_softmax_ceiling", isa_name(isa), 1,
                                                        "D" + std::to_string(dim))
                                                 .c_str(),
                                             bf16_softmax_ceiling, k, dim)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
    }
    return true;
}

const bool registered = register_machine();

}  // namespace
}  // namespace attn_bench
