// Machine benchmark kernels for avx2, compiled with its flags only (see bench/CMakeLists.txt).
#include "arch/machine_kernels.hpp"

namespace attn_bench {
const machine_kernels *machine_kernels_avx2() {
    static const machine_kernels k = make_machine_kernels<xsimd::fma3<xsimd::avx2>>();
    return &k;
}
}  // namespace attn_bench
