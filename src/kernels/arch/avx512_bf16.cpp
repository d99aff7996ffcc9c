// The avx512_bf16 level: AVX-512 with VCVTNEPS2BF16 and VDPBF16PS. Compiled with the AVX-512
// flags plus -mavx512bf16 (src/CMakeLists.txt). Its f32 kernels are the AVX-512 ones (the
// same table entries); the entries that use the bf16 instructions are filled here.
#include "kernels/kernels.hpp"

namespace attn::kernels {

const kernel_table *kernel_table_avx512();

const kernel_table *kernel_table_avx512_bf16() {
    static const kernel_table table = [] {
        kernel_table t = *kernel_table_avx512();
        t.isa_name = "avx512_bf16";
        return t;
    }();
    return &table;
}

}  // namespace attn::kernels
