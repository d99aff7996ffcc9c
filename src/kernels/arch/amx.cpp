// The amx level: AMX-BF16 tiles with AVX512-BF16. Compiled with the avx512_bf16 flags plus
// -mamx-tile -mamx-bf16 (src/CMakeLists.txt). Every entry is the avx512_bf16 level's (f32 work
// runs the AVX-512 kernels there too) but the tile kernels' (src/kernels/amx/tables.cpp).
#include "kernels/kernels.hpp"

namespace attn::kernels {

const kernel_table *kernel_table_avx512_bf16();
void set_tile_kernels_hw(kernel_table &t);  // amx: tables.cpp, on the real tiles

const kernel_table *kernel_table_amx() {
    static const kernel_table table = [] {
        kernel_table t = *kernel_table_avx512_bf16();
        t.isa_name = "amx";
        set_tile_kernels_hw(t);  // amx: GEMM and the bf16-pair attention tiles on AMX
        return t;
    }();
    return &table;
}

}  // namespace attn::kernels
