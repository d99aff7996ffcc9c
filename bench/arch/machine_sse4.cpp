// Machine benchmark kernels for sse4, compiled with its flags only (see bench/CMakeLists.txt).
#include "arch/machine_kernels.hpp"

namespace attn_bench {
const machine_kernels *machine_kernels_sse4() {
    static const machine_kernels k = make_machine_kernels<xsimd::sse4_2>();
    return &k;
}
}  // namespace attn_bench
