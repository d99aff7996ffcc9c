// Machine benchmark kernels for avx512, compiled with its flags only (see bench/CMakeLists.txt).
#include "arch/machine_decode.hpp"  // (and machine_kernels.hpp)

namespace attn_bench {
const machine_kernels *machine_kernels_avx512() {
    static const machine_kernels k = [] {
        machine_kernels m = make_machine_kernels<xsimd::avx512f>();
        m.decode_row_loops = &decode_row_loops;
        return m;
    }();
    return &k;
}
}  // namespace attn_bench
