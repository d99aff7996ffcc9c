// The tile kernels' table entries, for the amx level (real tiles) and the amx_emulated level
// (the same kernels on the tile model). Compiled with the amx flags (src/CMakeLists.txt).
// The kernel templates are instantiated on xsimd::avx512f in this level's own namespace
// (isa_namespace.hpp), so no symbol compiled with the AMX flags is shared with another level.
#define ATTN_ISA_NAMESPACE isa_amx
#include "kernels/instantiate.hpp"  // first: the intrinsics' pragmas (kernels/intrinsics.hpp)
#include "kernels/amx/attention_amx.hpp"
#include "kernels/amx/attention_backward_amx.hpp"
#include "kernels/amx/gemm_amx.hpp"

#include <stdexcept>

namespace attn::kernels {

const kernel_table *kernel_table_amx();

namespace {

template <class Tiles>
void set_tile_kernels(kernel_table &t) {
    using arch = xsimd::avx512f;
    t.gemm_mr_tiles = int(amx::gemm_mr);
    t.gemm_nr_tiles = int(amx::gemm_nr);
    // 1024 elements of depth: at 2048^3 on one thread (per CPU second, one run each on a
    // loaded machine) 664 GFLOP/s against 522 at 768, 498 at 512 and 442 at 2048.
    t.gemm_kc_tiles = 1024;
    t.gemm_packed_pairs_tiles = &amx::gemm_packed_pairs;
    t.gemm_pack_a_tiles = &amx::gemm_pack_a_tiles<arch>;
    t.gemm_pack_b_tiles = &amx::gemm_pack_b_tiles<arch>;
    t.gemm_block_kernel_tiles = &amx::gemm_block_kernel_tiles<arch, Tiles>;
    // the bf16-pair attention tiles on AMX, in the bf16_pairs entry's place: K and V keep the
    // pair path's packing (its layouts are the tiles' operands), blocks and scratch
    attention_impl *pairs = t.attention_impls.find("bf16_pairs");
    if (pairs == nullptr) pairs = t.attention_impls.find("amx_tiles");  // amx_emulated's copy
    if (pairs == nullptr) throw std::logic_error("amx tables: no bf16_pairs entry to run on tiles");
    pairs->name = "amx_tiles";
    pairs->forward_tile = &amx::attention_forward_tile_amx<arch, Tiles>;
    pairs->weights_tile = &amx::attention_weights_tile_amx<arch, Tiles>;
    // and a quantized cache's codes on tiles, in bf16_code_pairs' place
    attention_impl *codes = t.attention_impls.find("bf16_code_pairs");
    if (codes == nullptr) codes = t.attention_impls.find("amx_code_tiles");
    if (codes == nullptr) throw std::logic_error("amx tables: no bf16_code_pairs entry to run on tiles");
    codes->name = "amx_code_tiles";
    codes->forward_tile = &amx::attention_forward_tile_amx<arch, Tiles, true>;
    codes->weights_tile = &amx::attention_weights_tile_amx<arch, Tiles, true>;
    // the fused backward with its products on tiles, for calls whose products may be bf16
    t.attention_backward_scratch_floats_bf16 = &amx::attention_backward_scratch_floats_amx;
    t.attention_backward_tile_bf16 = &amx::attention_backward_tile_amx<arch, Tiles>;
    t.attention_backward_pack_t_bf16 = &amx::attention_backward_pack_t_amx;
}

}  // namespace

void set_tile_kernels_hw(kernel_table &t) { set_tile_kernels<amx::amx_hw_tiles>(t); }

const kernel_table *kernel_table_amx_emulated() {
    static const kernel_table table = [] {
        kernel_table t = *kernel_table_amx();
        t.isa_name = "amx_emulated";
        set_tile_kernels<amx::amx_model_tiles>(t);
        return t;
    }();
    return &table;
}

}  // namespace attn::kernels
