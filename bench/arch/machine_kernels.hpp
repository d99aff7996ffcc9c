// This machine's limits, measured with xsimd on one ISA: the FMA peak (independent FMA
// chains, enough of them to cover the FMA latency on two ports) and the read bandwidth
// (the sum of a large array); and the library's exp against xsimd::exp. Included by arch/machine_<isa>.cpp, compiled with that ISA's
// flags; bench_machine.cpp calls them through machine_kernels_for().
#pragma once

// GCC 12's AVX-512 intrinsics trip -Wuninitialized (GCC bug 105593; see
// src/kernels/instantiate.hpp); the pragmas must precede the intrinsics headers.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "kernels/vec_math.hpp"
#include "machine.hpp"

namespace attn_bench {

// Independent FMA chains per ISA: enough to cover the FMA latency (4 cycles) on two ports,
// few enough to stay in registers (16 vector registers below AVX-512, 32 with it; the
// multiplier and the addend take two).
template <class Arch>
constexpr int fma_chain_count = std::is_base_of_v<xsimd::avx512f, Arch> ? 16 : 12;

// Runs `reps` rounds of fma_chain_count independent vector FMA chains; returns a value that
// depends on all of them so nothing is optimised away. Flops: reps * chains * 2 * lanes.
template <class Arch>
float fma_chains(int64_t reps) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int chains = fma_chain_count<Arch>;
    fbatch acc[chains];
    for (int c = 0; c < chains; ++c) acc[c] = fbatch(1.0f + 0.001f * float(c));
    const fbatch mul(0.999999f), add(1e-7f);
    for (int64_t r = 0; r < reps; ++r) {
#pragma GCC unroll 16
        for (int c = 0; c < chains; ++c) acc[c] = xsimd::fma(acc[c], mul, add);
    }
    fbatch total(0.0f);
    for (int c = 0; c < chains; ++c) total += acc[c];
    return xsimd::hadd(total);
}

// sum_i x[i] with four vector accumulators (count a multiple of 4 vectors).
template <class Arch>
float sum_floats(const float *x, int64_t count) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int64_t W = fbatch::size;
    fbatch s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
    for (int64_t i = 0; i + 4 * W <= count; i += 4 * W) {
        s0 += fbatch::load_aligned(x + i);
        s1 += fbatch::load_aligned(x + i + W);
        s2 += fbatch::load_aligned(x + i + 2 * W);
        s3 += fbatch::load_aligned(x + i + 3 * W);
    }
    return xsimd::hadd((s0 + s1) + (s2 + s3));
}

// The XOR of the 32-bit words of [p, p + bytes) with four vector accumulators (any bytes,
// any alignment: the bytes before the first 64-byte boundary and after the last one one at a
// time), folded to 32 bits: reads each byte once as the decode kernels read a cache's rows.
template <class Arch>
uint32_t read_bytes(const void *p, int64_t bytes) {
    using ubatch = xsimd::batch<uint32_t, Arch>;
    constexpr int64_t W = ubatch::size;
    const auto *b = static_cast<const unsigned char *>(p);
    uint32_t edge = 0;
    int64_t i = 0;
    for (; i < bytes && reinterpret_cast<uintptr_t>(b + i) % 64 != 0; ++i) edge ^= b[i];
    const auto *x = reinterpret_cast<const uint32_t *>(b + i);
    const int64_t words = (bytes - i) / 4, block = 4 * W;
    ubatch s0(0u), s1(0u), s2(0u), s3(0u);
    int64_t w = 0;
    for (; w + block <= words; w += block) {
        s0 ^= ubatch::load_aligned(x + w);
        s1 ^= ubatch::load_aligned(x + w + W);
        s2 ^= ubatch::load_aligned(x + w + 2 * W);
        s3 ^= ubatch::load_aligned(x + w + 3 * W);
    }
    alignas(64) uint32_t lanes[W];
    ((s0 ^ s1) ^ (s2 ^ s3)).store_aligned(lanes);
    for (int64_t l = 0; l < W; ++l) edge ^= lanes[l];
    for (i += w * 4; i < bytes; ++i) edge ^= b[i];
    return edge;
}

// y = exp(x), count a multiple of the lanes; Library true: attn's exp, false: xsimd::exp.
template <class Arch, bool Library>
void exp_floats(const float *x, float *y, int64_t count) {
    using fbatch = xsimd::batch<float, Arch>;
    for (int64_t i = 0; i < count; i += fbatch::size) {
        const fbatch v = fbatch::load_unaligned(x + i);
        (Library ? attn::kernels::exp<Arch>(v) : xsimd::exp(v)).store_unaligned(y + i);
    }
}

template <class Arch>
machine_kernels make_machine_kernels() {
    return {static_cast<int>(xsimd::batch<float, Arch>::size),
            fma_chain_count<Arch>,
            &fma_chains<Arch>,
            &sum_floats<Arch>,
            &read_bytes<Arch>,
            &exp_floats<Arch, true>,
            &exp_floats<Arch, false>,
            nullptr,
            0.0,
            nullptr,
            0.0,
            nullptr,
            nullptr};
}

}  // namespace attn_bench
