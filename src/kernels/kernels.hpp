// The kernel table: every xsimd kernel the drivers in src/ops call, for one ISA.
// Kernels are templates on the xsimd Arch (see gemm.hpp, softmax.hpp, attention.hpp);
// each src/kernels/arch/<isa>.cpp instantiates them with that ISA's compile flags and
// exposes them through this table. A new ISA is one file in arch/ and one line in
// kernel_table_for(). Kernels know nothing of TBB or of the C API's error handling:
// they compute on raw pointers and are called on valid arguments only.
#pragma once

#include <cstdint>

#include "attn/attn.h"

namespace attn::kernels {

struct kernel_table {
    const char *isa_name;  // "avx512", "avx2", "sse4"
    int vector_floats;     // lanes of one xsimd::batch<float, Arch>
    // Each op adds its entry points (function pointers) and per-ISA block sizes below
    // its own marker.
    // --- gemm and softmax ---
    // --- attention ---
};

// The table for an ISA, or nullptr for ATTN_ISA_SCALAR / ATTN_ISA_AUTO.
const kernel_table *kernel_table_for(attn_isa isa);

// The best ISA this CPU and OS support, among those compiled in.
attn_isa best_supported_isa();

}  // namespace attn::kernels
