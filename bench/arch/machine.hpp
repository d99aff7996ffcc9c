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
};

// nullptr for an ISA without kernels here (scalar, auto).
const machine_kernels *machine_kernels_for(attn_isa isa);

}  // namespace attn_bench
