// A decoding call against merely reading the bytes it reads, alternated in one benchmark: the
// steadier yardstick for "what fraction of the read bandwidth does decoding reach" on a shared
// machine, where machine/read_bw_decode, measured seconds or minutes apart from the call, read
// 20.8 to 38.6 GB/s (avx512, 1 thread) in runs within an hour on one Zen 5 host; and for
// caches that fit in the last-level cache, reading them runs 2-3x faster than that 128 MiB
// array from memory (H32 over 8 KV heads, 4096 keys, bf16: 16 MiB read at ~75 GB/s there),
// which a fraction of machine/read_bw_decode hides.
//
// After a benchmark's timed loop, paired_read times `rounds` rounds of three: one call, one read
// of the same spans of bytes by the same number of threads (each thread a contiguous share of
// each span, started together: timed_read), the spans one after another, and the same read with
// the spans in step; which of the three goes first turns from one round to the next. It reports:
//   read_GB/s  the bytes over the median time of the reads one after another (the same bytes, in
//              the same cache state as the call finds them: each follows another pass over them);
//   of_read    the median over the rounds of that read's time / the call's time: the fraction of
//              the rate of reading its own bytes that the call reaches (1 = as fast as reading them);
//   read_GB/s_in_step, of_read_in_step
//              the same for the read in step: K and V (and their scales) together, a chunk of
//              read_step_bytes of the largest span and as much of each other in proportion, in
//              turn. Decoding reads K in one pass and V in the next (blocks of 512 keys,
//              kernels/attention_decode.hpp), one stream at a time, as the first read does; a
//              kernel that reads K and V key by key (ggml's) reads as the second. Which order
//              reads faster depends on the pages: on a Zen 4 core (KVM), caches of 32 KV heads
//              from memory in 4 KiB pages, 1 thread, in step took 0.87-0.93x the time for
//              f32, f16 and bf16 rows and 0.96-1.04x for 8-bit ones, and 1.12-1.24x from 2
//              MiB pages; at 2 threads 0.94-0.99x, 1.04-1.16x and 1.02-1.25x.
// The reads are not part of the benchmark's own time. The read is a vector XOR of every
// 64-byte line (machine_kernels::read_bytes) at the call's ISA, with hardware prefetch only.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "arch/machine.hpp"
#include "bench_common.hpp"

namespace attn_bench {

struct byte_span {
    const void *p;
    int64_t bytes;
};

// The bytes of all the spans.
inline int64_t span_bytes(const std::vector<byte_span> &spans) {
    int64_t bytes = 0;
    for (const byte_span &s : spans) bytes += s.bytes;
    return bytes;
}

namespace paired_read_detail {

// Thread t's share of `threads` of span s, cut at 64-byte multiples (empty: bytes 0).
struct share {
    const unsigned char *p;
    int64_t bytes;
};
inline share share_of(const byte_span &s, int t, int threads) {
    const int64_t lines = (s.bytes + 63) / 64, lo = lines * t / threads * 64,
                  hi = std::min(s.bytes, lines * (t + 1) / threads * 64);
    return {static_cast<const unsigned char *>(s.p) + lo, hi > lo ? hi - lo : 0};
}

// Thread t's shares of `threads` of the spans, the empty ones left out: what it reads, found
// before a timed read starts.
inline std::vector<share> shares_of(const std::vector<byte_span> &spans, int t, int threads) {
    std::vector<share> out;
    for (const byte_span &s : spans) {
        const share own = share_of(s, t, threads);
        if (own.bytes > 0) out.push_back(own);
    }
    return out;
}

// Reads the shares one after another.
inline uint32_t read_shares(const machine_kernels &k, const std::vector<share> &shares) {
    uint32_t x = 0;
    for (const share &s : shares) x ^= k.read_bytes(s.p, s.bytes);
    return x;
}

// Bytes of each span a read in step takes before it moves to the next span.
inline constexpr int64_t read_step_bytes = 4096;

// Reads the shares in step: a chunk of read_step_bytes of the largest share, and as much of
// each other share in proportion, each chunk cut at an address that is a multiple of 256 bytes
// (read_bytes takes whole blocks of 256 vector-wise and the bytes around them one at a time).
inline uint32_t read_shares_in_step(const machine_kernels &k, const std::vector<share> &shares) {
    int64_t most = 0;
    for (const share &s : shares) most = std::max(most, s.bytes);
    const int64_t steps = (most + read_step_bytes - 1) / read_step_bytes;
    // where step i of share s starts: its fraction i / steps of the share, up to a block edge
    const auto cut = [steps](const share &s, int64_t i) -> int64_t {
        if (i == 0) return 0;
        if (i >= steps) return s.bytes;
        const uintptr_t at = reinterpret_cast<uintptr_t>(s.p);
        const uintptr_t edge = (at + uintptr_t(s.bytes * i / steps) + 255) & ~uintptr_t(255);
        return std::min(s.bytes, int64_t(edge - at));
    };
    uint32_t x = 0;
    for (int64_t i = 0; i < steps; ++i)
        for (const share &s : shares) {
            const int64_t lo = cut(s, i), hi = cut(s, i + 1);
            if (hi > lo) x ^= k.read_bytes(s.p + lo, hi - lo);
        }
    return x;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seconds for `threads` threads (the caller reads share 0) to read their shares, from when all
// have started (created and waiting on a flag) to when the last is done: thread creation and
// joining are outside the time. (A TBB arena's parallel_for was not: right after a 2-thread
// call its second thread joined in none of 50 reads, so every read ran on one thread.)
// in_step: each thread's shares read in step (read_shares_in_step), else one after the other.
inline double timed_read(const machine_kernels &k, const std::vector<byte_span> &spans, int threads,
                         bool in_step, std::atomic<uint32_t> &sink) {
    const auto read = in_step ? read_shares_in_step : read_shares;
    std::vector<std::vector<share>> plan;  // thread t's shares at plan[t]
    for (int t = 0; t < threads; ++t) plan.push_back(shares_of(spans, t, threads));
    if (threads == 1) {
        const auto t0 = std::chrono::steady_clock::now();
        sink ^= read(k, plan[0]);
        return seconds_since(t0);
    }
    std::atomic<int> ready{0}, done{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> others;
    for (int t = 1; t < threads; ++t)
        others.emplace_back([&, t] {
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) {
            }
            sink ^= read(k, plan[t]);
            done.fetch_add(1, std::memory_order_release);
        });
    while (ready.load() < threads - 1) {
    }
    const auto t0 = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    sink ^= read(k, plan[0]);
    while (done.load(std::memory_order_acquire) < threads - 1) {
    }
    const double seconds = seconds_since(t0);
    for (std::thread &th : others) th.join();
    return seconds;
}

inline double median(std::vector<double> x) {
    std::sort(x.begin(), x.end());
    const size_t n = x.size();
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

}  // namespace paired_read_detail

// call() returns the attn_status of one call (time_calls' kind). Nothing is reported where
// the ISA has no machine kernels (scalar) or a call fails (the timed loop has said why).
template <class Call>
void paired_read(benchmark::State &state, attn_isa isa, int threads,
                 const std::vector<byte_span> &spans, Call &&call) {
    using namespace paired_read_detail;
    const machine_kernels *k = machine_kernels_for(isa);
    if (k == nullptr || state.error_occurred()) return;
    std::atomic<uint32_t> sink{0};
    // about 0.1 s of rounds, at least 7 and at most 101, an odd count
    auto t0 = std::chrono::steady_clock::now();
    if (call() != ATTN_OK) return;
    const double first = seconds_since(t0);
    const int rounds = int(std::clamp(0.1 / std::max(first, 1e-6), 7.0, 101.0)) | 1;
    std::vector<double> read_s, ratio, step_s, step_ratio;
    for (int i = 0; i < rounds; ++i) {
        double call_s = 0.0, one_read = 0.0, in_step = 0.0;
        for (int side = 0; side < 3; ++side) {
            const int what = (side + i) % 3;  // round i starts with the i % 3-th of the three
            if (what == 0) {
                t0 = std::chrono::steady_clock::now();
                if (call() != ATTN_OK) return;
                call_s = seconds_since(t0);
            } else {
                (what == 1 ? one_read : in_step) = timed_read(*k, spans, threads, what == 2, sink);
            }
        }
        read_s.push_back(one_read);
        ratio.push_back(one_read / call_s);
        step_s.push_back(in_step);
        step_ratio.push_back(in_step / call_s);
    }
    state.counters["read_GB/s"] = double(span_bytes(spans)) / median(read_s) / 1e9;
    state.counters["of_read"] = median(ratio);
    state.counters["read_GB/s_in_step"] = double(span_bytes(spans)) / median(step_s) / 1e9;
    state.counters["of_read_in_step"] = median(step_ratio);
}

}  // namespace attn_bench
