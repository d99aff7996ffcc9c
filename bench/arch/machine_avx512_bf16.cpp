// Machine benchmark kernels for avx512_bf16 (AVX-512 flags plus -mavx512bf16): the f32 ones of
// AVX-512, and the VDPBF16PS peak: 16 independent chains, each instruction 16 lanes x 2
// products and 2 adds (64 flops); and the pair tile loop's products with its exponential
// between them (bf16_products_exp).
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

// machine_kernels::bf16_products_exp for `Exps` vectors a round (0: the products alone).
template <int Exps, bool Products>
float products_exp(int64_t reps) {
    using fbatch = xsimd::batch<float, xsimd::avx512cd>;
    constexpr int steps = 16, rows = 6, vectors = 4, s_floats = 1024;
    static_assert(steps * rows * vectors == bf16_products_a_round);
    alignas(64) uint16_t panel[steps * vectors * 16 * 2];
    alignas(64) uint32_t q[rows * steps];
    alignas(64) float s[s_floats];
    alignas(64) uint16_t p[s_floats];
    for (int i = 0; i < steps * vectors * 16 * 2; ++i) panel[i] = uint16_t(0x3c00 + i % 61);
    for (int i = 0; i < rows * steps; ++i) q[i] = 0x3c003c00u + uint32_t(i % 7);
    for (int i = 0; i < s_floats; ++i) {
        s[i] = -0.03f * float(i % 300);
        p[i] = 0;
    }
    __m512 acc[rows][vectors];
#pragma GCC unroll 6
    for (int r = 0; r < rows; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < vectors; ++v) acc[r][v] = _mm512_setzero_ps();
    fbatch sum(0.0f);
    const fbatch m(0.5f);
    int e = 0;
    for (int64_t round = 0; round < reps; ++round) {
        // the panel and Q read from memory every round, as the tile loop reads them (not
        // hoisted into registers because they do not change)
        const uint16_t *panel_at = panel;
        const uint32_t *q_at = q;
        asm volatile("" : "+r"(panel_at), "+r"(q_at) : : "memory");
#pragma GCC unroll 16
        for (int d = 0; d < steps; ++d) {
            if constexpr (Products) {
                __m512bh kv[vectors];
#pragma GCC unroll 4
                for (int v = 0; v < vectors; ++v)
                    kv[v] = (__m512bh)_mm512_load_si512(panel_at + (d * vectors + v) * 32);
#pragma GCC unroll 6
                for (int r = 0; r < rows; ++r) {
                    const __m512bh qv = (__m512bh)_mm512_set1_epi32(int(q_at[r * steps + d]));
#pragma GCC unroll 4
                    for (int v = 0; v < vectors; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], qv, kv[v]);
                }
            }
            // after step d, the vectors that bring the round's count to (d + 1) * Exps / steps
            if ((d + 1) * Exps / steps > d * Exps / steps) {
                const fbatch x = attn::kernels::exp_for_bf16<xsimd::avx512cd>(fbatch::load_aligned(s + e) - m);
                sum += x;
                _mm256_store_si256(reinterpret_cast<__m256i *>(p + e), (__m256i)_mm512_cvtneps_pbh(x));
                e = (e + 16) % s_floats;
            }
        }
    }
    __m512 total = sum;
#pragma GCC unroll 6
    for (int r = 0; r < rows; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < vectors; ++v) total = _mm512_add_ps(total, acc[r][v]);
    return _mm512_reduce_add_ps(total) + float(p[e] + p[s_floats - 16]);
}

float bf16_products_exp(int64_t reps, int exps, bool products) {
    switch (exps) {
    case 0: return products_exp<0, true>(reps);
    case 3: return products ? products_exp<3, true>(reps) : products_exp<3, false>(reps);
    case 6: return products ? products_exp<6, true>(reps) : products_exp<6, false>(reps);
    default: return 0.0f;  // not a count the benchmark uses (bf16_products_a_round / dim, dim 64 or 128)
    }
}

}  // namespace

const machine_kernels *machine_kernels_avx512_bf16() {
    static const machine_kernels k = [] {
        machine_kernels m = make_machine_kernels<xsimd::avx512cd>();
        m.bf16_chains = &dpbf16_chains;
        m.bf16_flops_per_rep = 16.0 * 64.0;
        m.bf16_products_exp = &bf16_products_exp;
        return m;
    }();
    return &k;
}
}  // namespace attn_bench
