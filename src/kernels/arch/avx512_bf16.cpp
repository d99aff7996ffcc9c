// The avx512_bf16 level: AVX-512 with VCVTNEPS2BF16 and VDPBF16PS. Compiled with the AVX-512
// flags plus -mavx512bf16 (src/CMakeLists.txt). Its f32 kernels are the AVX-512 ones (the
// same table entries); the entries that use the bf16 instructions are instantiated here on
// xsimd::avx512cd, an Arch no other level uses, so that none of their instantiations (the
// tile loop and what it calls) is shared with the avx512 level's translation unit.
#include "kernels/intrinsics.hpp"  // first: see there
#include "kernels/attention_bf16.hpp"
#include "kernels/kernels.hpp"

namespace attn::kernels {

const kernel_table *kernel_table_avx512();

const kernel_table *kernel_table_avx512_bf16() {
    using arch = xsimd::avx512cd;
    static const kernel_table table = [] {
        kernel_table t = *kernel_table_avx512();
        t.isa_name = "avx512_bf16";
        t.attention_pack_k_bf16 = &attention_pack_k_bf16<arch>;
        t.attention_pack_v_bf16 = &attention_pack_v_bf16<arch>;
        t.attention_forward_tile_bf16 = &attention_forward_tile_bf16<arch>;
        t.attention_weights_tile_bf16 = &attention_weights_tile_bf16<arch>;
        return t;
    }();
    return &table;
}

}  // namespace attn::kernels
