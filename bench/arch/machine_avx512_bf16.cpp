// Machine benchmark kernels for avx512_bf16 (AVX-512 flags plus -mavx512bf16): the f32 ones of
// AVX-512, and the VDPBF16PS peak: 16 independent chains, each instruction 16 lanes x 2
// products and 2 adds (64 flops).
#include "arch/machine_kernels.hpp"

namespace attn_bench {
namespace {

float dpbf16_chains(int64_t reps) {
    constexpr int chains = 16;
    __m512 acc[chains];
    for (int c = 0; c < chains; ++c) acc[c] = _mm512_set1_ps(0.001f * float(c));
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // (1.0, 1.0)
    const __m512bh b = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // (1e-7, 1e-7) in bf16
    for (int64_t r = 0; r < reps; ++r) {
#pragma GCC unroll 16
        for (int c = 0; c < chains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    }
    __m512 total = _mm512_setzero_ps();
    for (int c = 0; c < chains; ++c) total = _mm512_add_ps(total, acc[c]);
    return _mm512_reduce_add_ps(total);
}

}  // namespace

const machine_kernels *machine_kernels_avx512_bf16() {
    static const machine_kernels k = [] {
        machine_kernels m = make_machine_kernels<xsimd::avx512cd>();
        m.bf16_chains = &dpbf16_chains;
        m.bf16_flops_per_rep = 16.0 * 64.0;
        return m;
    }();
    return &k;
}
}  // namespace attn_bench
