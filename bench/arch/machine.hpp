// The machine benchmarks' kernels for one ISA (see machine_kernels.hpp).
#pragma once

#include <cstdint>

#include "attn/attn.h"

namespace attn_bench {

struct machine_kernels {
    int lanes;                                  // floats per vector
    int chains;                                 // independent FMA chains fma_chains runs
    float (*fma_chains)(int64_t reps);          // reps * chains * 2 * lanes flops
    float (*sum_floats)(const float *x, int64_t count);  // x 64-byte aligned
    // Every byte of [p, p + bytes) read once, in whole vectors where it can (any alignment);
    // returns a value depending on all of them (their XOR folded to 32 bits).
    uint32_t (*read_bytes)(const void *p, int64_t bytes);
    // y = exp(x) over count floats (a multiple of lanes): the library's exp and xsimd's.
    void (*exp_attn)(const float *x, float *y, int64_t count);
    void (*exp_xsimd)(const float *x, float *y, int64_t count);
    // The 16-bit matrix units, where the ISA has them (else null): reps rounds of
    // independent VDPBF16PS chains (reps * bf16_flops_per_rep flops), or of four independent
    // AMX tile products TDPBF16PS (reps * amx_flops_per_rep).
    float (*bf16_chains)(int64_t reps);
    double bf16_flops_per_rep;
    float (*amx_chains)(int64_t reps);
    double amx_flops_per_rep;
    // The pair tile loop's products with its exponential between them, in the avx512_bf16
    // level's kernels (else null): reps rounds of 16 steps of the product block (6 rows x 4 vectors: 4
    // panel vectors, 6 broadcast Q pairs and 24 VDPBF16PS a step, all in L1) and, spread among
    // them, `exps` vectors of P as the loop forms them (exp_for_bf16 of S - m, summed, rounded to
    // bf16, stored); with products false, the exponentials alone. A row's 16 scores take dim
    // VDPBF16PS (16 dim products for S = Q K^T and as many for P V) and one such vector, so a
    // round's bf16_products_a_round VDPBF16PS go with bf16_products_a_round / dim of them.
    float (*bf16_products_exp)(int64_t reps, int exps, bool products);
    // The arithmetic of decoding one query row over decode_loop_keys keys of decode_loop_dim of a cache
    // type (decode_loop_kind), in L2, reps rounds (arch/machine_decode.hpp), where the ISA has
    // the library's widenings of codes (AVX-512; else null).
    float (*decode_row_loops)(int kind, int64_t reps);
};

// Keys a round of decode_row_loops and their head dimension, and the cache types it reads
// (bf16; I8 and E4M3 with a scale a row; I4 with a scale a group of 32).
inline constexpr int decode_loop_keys = 1024, decode_loop_dim = 128;
enum decode_loop_kind { decode_loop_bf16, decode_loop_i8, decode_loop_i4, decode_loop_e4m3 };

// A key row's bytes of values and its f32 scales, of a decode_loop_kind; and the bytes decoding
// reads for one key of one KV head: its K and V rows' values and scales.
constexpr int decode_loop_row_bytes(int kind) {
    constexpr int d = decode_loop_dim;
    return kind == decode_loop_bf16 ? 2 * d : kind == decode_loop_i4 ? d / 2 : d;
}
constexpr int decode_loop_row_scales(int kind) {
    return kind == decode_loop_bf16 ? 0 : kind == decode_loop_i4 ? decode_loop_dim / 32 : 1;
}
constexpr int decode_loop_bytes(int kind) {
    return 2 * (decode_loop_row_bytes(kind) + 4 * decode_loop_row_scales(kind));
}

// VDPBF16PS in a round of bf16_products_exp: 16 steps of 24.
inline constexpr int bf16_products_a_round = 16 * 24;

// nullptr for an ISA without kernels here (scalar, auto).
const machine_kernels *machine_kernels_for(attn_isa isa);

}  // namespace attn_bench
