// Runtime ISA dispatch: which kernel table this CPU can run. Compiled without ISA flags.
#include "kernels/kernels.hpp"

namespace attn::kernels {

const kernel_table *kernel_table_sse4();
const kernel_table *kernel_table_avx2();
const kernel_table *kernel_table_avx512();

attn_isa best_supported_isa() {
    // __builtin_cpu_supports consults CPUID and, for AVX and AVX-512, whether the OS saves
    // the wider registers (XGETBV), so an ISA it reports can be executed.
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("fma"))
        return ATTN_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ATTN_ISA_AVX2;
    if (__builtin_cpu_supports("sse4.2")) return ATTN_ISA_SSE4;
    return ATTN_ISA_SCALAR;
}

const kernel_table *kernel_table_for(attn_isa isa) {
    switch (isa) {
    case ATTN_ISA_AVX512: return kernel_table_avx512();
    case ATTN_ISA_AVX2: return kernel_table_avx2();
    case ATTN_ISA_SSE4: return kernel_table_sse4();
    default: return nullptr;
    }
}

}  // namespace attn::kernels
