// The amx level: AMX-BF16 tiles with AVX512-BF16. Compiled with the avx512_bf16 flags plus
// -mamx-tile -mamx-bf16 (src/CMakeLists.txt). Until the tile kernels are here, every entry is
// the avx512_bf16 level's (f32 work runs the AVX-512 kernels there too).
#include "kernels/kernels.hpp"

namespace attn::kernels {

const kernel_table *kernel_table_avx512_bf16();

const kernel_table *kernel_table_amx() {
    static const kernel_table table = [] {
        kernel_table t = *kernel_table_avx512_bf16();
        t.isa_name = "amx";
        return t;
    }();
    return &table;
}

}  // namespace attn::kernels
