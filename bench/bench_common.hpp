// Shared by the bench_*.cpp files: contexts per (impl, isa, threads), created once and kept;
// deterministic random buffers; rate counters; and the naming convention
//   <op>/<impl>/<isa>/threads:<n>/<shape>      e.g. gemm/simd/avx512/threads:2/2048x2048x2048
// with impl "ref", "simd" or a peer ("openblas", "onednn", isa "-"), so a script can parse
// the results (tools/bench_report.py). Counters: "GFLOP/s" and "GB/s", per second of wall
// time (benchmarks use UseRealTime(): the work runs on the library's threads).
#pragma once

#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "attn/attn.h"
#include "core/convert.hpp"

namespace attn_bench {

inline const char *isa_name(attn_isa isa) {
    switch (isa) {
    case ATTN_ISA_SSE4: return "sse4";
    case ATTN_ISA_AVX2: return "avx2";
    case ATTN_ISA_AVX512: return "avx512";
    case ATTN_ISA_AVX512_BF16: return "avx512_bf16";
    case ATTN_ISA_AMX: return "amx";
    case ATTN_ISA_SCALAR: return "scalar";
    default: return "auto";
    }
}

// A context for (impl, isa cap, threads, fpmath), or nullptr when this CPU cannot run it.
// Created on first use and kept for the life of the process, so no benchmark pays for arena
// creation.
inline attn_context *context(attn_impl impl, attn_isa isa, int threads,
                             attn_fpmath fpmath = ATTN_FPMATH_STRICT) {
    struct deleter {
        void operator()(attn_context *c) const { attn_context_destroy(c); }
    };
    static std::map<std::tuple<int, int, int, int>, std::unique_ptr<attn_context, deleter>> cache;
    auto &slot = cache[{impl, isa, threads, fpmath}];
    if (!slot) {
        attn_config cfg;
        attn_config_init(&cfg);
        cfg.impl = impl;
        cfg.max_isa = isa;
        cfg.num_threads = threads;
        cfg.fpmath = fpmath;
        attn_context *c = nullptr;
        if (attn_context_create(&cfg, &c) != ATTN_OK) return nullptr;
        slot.reset(c);
    }
    return slot.get();
}

// A SIMD context capped at isa with ATTN_FPMATH_BF16, or nullptr.
inline attn_context *context_bf16_math(attn_isa isa, int threads) {
    return context(ATTN_IMPL_SIMD, isa, threads, ATTN_FPMATH_BF16);
}

// The f32 SIMD ISAs this CPU runs, narrowest first (the bf16 levels run the AVX-512 kernels
// for f32 work, so their f32 figures would be AVX-512's again).
inline std::vector<attn_isa> simd_isas() {
    std::vector<attn_isa> out;
    for (attn_isa isa : {ATTN_ISA_SSE4, ATTN_ISA_AVX2, ATTN_ISA_AVX512})
        if (context(ATTN_IMPL_SIMD, isa, 1) != nullptr) out.push_back(isa);
    return out;
}

// The 16-bit levels this CPU runs (avx512_bf16, amx).
inline std::vector<attn_isa> bf16_isas() {
    std::vector<attn_isa> out;
    for (attn_isa isa : {ATTN_ISA_AVX512_BF16, ATTN_ISA_AMX})
        if (context(ATTN_IMPL_SIMD, isa, 1) != nullptr) out.push_back(isa);
    return out;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = dist(gen);
    return v;
}

inline std::string bench_name(const std::string &op, const std::string &impl,
                              const std::string &isa, int threads, const std::string &shape) {
    return op + "/" + impl + "/" + isa + "/threads:" + std::to_string(threads) + "/" + shape;
}

// Floating-point operations per iteration, reported as GFLOP/s of wall time.
inline void set_flops(benchmark::State &state, double flops_per_iteration) {
    state.counters["GFLOP/s"] =
        benchmark::Counter(flops_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Bytes moved (read + written) per iteration, reported as GB/s of wall time.
inline void set_bytes(benchmark::State &state, double bytes_per_iteration) {
    state.counters["GB/s"] =
        benchmark::Counter(bytes_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// CPU seconds used so far by the whole process (every thread, spinning included).
inline double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// "GB/s_cpu": bytes per second that `threads` threads were on a CPU, from the process CPU
// time of the whole run (bytes_total over all iterations). On a machine shared with other
// work the wall-time rate falls with the load; this one does not (idle spinning inflates the
// CPU time, so it errs low).
inline void set_bytes_per_cpu_second(benchmark::State &state, double bytes_total,
                                     double cpu_seconds, int threads) {
    if (cpu_seconds > 0.0) state.counters["GB/s_cpu"] = bytes_total * threads / cpu_seconds / 1e9;
}

// "GFLOP/s_cpu": the flop rate `threads` threads would reach on CPUs of their own, from the
// process CPU time of the whole run (flops_total over all iterations), as GB/s_cpu: the
// steadier figure on a shared machine (spinning workers inflate the CPU time: errs low).
inline void set_flops_per_cpu_second(benchmark::State &state, double flops_total,
                                     double cpu_seconds, int threads) {
    if (cpu_seconds > 0.0) state.counters["GFLOP/s_cpu"] = flops_total * threads / cpu_seconds / 1e9;
}

// x as bf16 bit patterns, rounded to nearest even.
inline std::vector<uint16_t> to_bf16(const std::vector<float> &x) {
    std::vector<uint16_t> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = attn::convert::f32_to_bf16(x[i]);
    return out;
}

// Skips the benchmark with a message when a status is not ATTN_OK.
inline bool check(benchmark::State &state, attn_status s) {
    if (s == ATTN_OK) return true;
    state.SkipWithError((std::string(attn_status_string(s)) + ": " + attn_last_error()).c_str());
    return false;
}

// The timed loop of `work` (false once it has skipped the benchmark with an error), after one
// untimed run of it; returns the process CPU seconds of the timed loop alone (for the
// per-CPU-second rates). The untimed run keeps one-time costs out of the figures: the first
// touches of the buffers the set-up has just written (on some virtual machines the first
// accesses after the process has freed a large block cost a few microseconds a page: 140 ms
// for the 128 MiB of an f32 KV cache, 35x the decoding call itself), a context's first
// scratch, a peer's thread pool.
template <class Work>
inline double time_work(benchmark::State &state, Work &&work) {
    if (!work()) return 0.0;
    const double cpu_start = process_cpu_seconds();
    for (auto _ : state) {
        if (!work()) break;
        benchmark::ClobberMemory();
    }
    return process_cpu_seconds() - cpu_start;
}

// time_work of one library call (call() returns its attn_status): a failed call skips the
// benchmark with the library's message.
template <class Call>
inline double time_calls(benchmark::State &state, Call &&call) {
    return time_work(state, [&] { return check(state, call()); });
}

}  // namespace attn_bench
