// Included once by each src/kernels/arch/<isa>.cpp, compiled with that ISA's flags:
// instantiates every kernel template for Arch and fills that ISA's kernel_table.
#pragma once

#include <xsimd/xsimd.hpp>

#include "kernels/kernels.hpp"

namespace attn::kernels {

template <class Arch>
kernel_table make_kernel_table(const char *isa_name) {
    kernel_table t{};
    t.isa_name = isa_name;
    t.vector_floats = static_cast<int>(xsimd::batch<float, Arch>::size);
    // --- gemm and softmax ---
    // --- attention ---
    return t;
}

}  // namespace attn::kernels

// Defines kernel_table_<name>() returning the table for Arch.
#define ATTN_DEFINE_KERNEL_TABLE(Arch, name)                                      \
    namespace attn::kernels {                                                     \
    const kernel_table *kernel_table_##name() {                                   \
        static const kernel_table table = make_kernel_table<Arch>(#name);         \
        return &table;                                                            \
    }                                                                             \
    }
