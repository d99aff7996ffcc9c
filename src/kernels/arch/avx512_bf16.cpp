// The avx512_bf16 level: AVX-512 with VCVTNEPS2BF16 and VDPBF16PS. Compiled with the AVX-512
// flags plus -mavx512cd -mavx512bf16 (src/CMakeLists.txt). Its f32 kernels are the AVX-512
// ones (the same table entries); the entries that use the bf16 instructions are filled here,
// instantiated on avx512f in this level's own namespace (isa_namespace.hpp), so no symbol is
// shared with src/kernels/arch/avx512.cpp's instantiations.
#define ATTN_ISA_NAMESPACE isa_avx512_bf16
#include "kernels/instantiate.hpp"  // first: the intrinsics' pragmas (kernels/intrinsics.hpp)
#include "kernels/attention_backward_bf16.hpp"
#include "kernels/attention_bf16_entries.hpp"
#include "kernels/attention_decode_pairs.hpp"
#include "kernels/gemm_bf16.hpp"

namespace attn::kernels {

const kernel_table *kernel_table_avx512();

const kernel_table *kernel_table_avx512_bf16() {
    using arch = xsimd::avx512f;
    static const kernel_table table = [] {
        kernel_table t = *kernel_table_avx512();
        t.isa_name = "avx512_bf16";
        // f32 -> bf16 by VCVTNEPS2BF16 (cvt::has_cvtneps2bf16); the other pairs as avx512.
        t.convert_array = &convert_array<arch>;
        // GEMM over bf16 pair panels (gemm_bf16.hpp), in the f32 kernels' MR x NR tiles: the
        // driver shares one loop nest between them. KC = 1024 elements is 512 pairs, the
        // bytes of the f32 panels' 512; measured against KC = 512 at 2048^3 on one thread
        // (Zen 5, per CPU second): 508 against 481-495 GFLOP/s, equal at 1024^3.
        t.gemm_kc_bf16 = 1024;
        t.gemm_pack_a_bf16 = &gemm_pack_a_bf16<arch>;
        t.gemm_pack_b_bf16 = &gemm_pack_b_bf16<arch>;
        t.gemm_micro_kernel_bf16 = &gemm_micro_kernel_bf16<arch>;
        // attention with bf16-pair products (attention_bf16_entries.hpp), tried before the f32
        // tiles: of the stored values, then of a quantized cache's codes (the calls the first
        // takes under ATTN_FPMATH_BF16 stay with it, on AMX tiles on the amx levels)
        t.attention_impls.insert_before("f32_tiles", attention_bf16_pairs_entry<arch>());
        t.attention_impls.insert_before("f32_tiles", attention_bf16_code_pairs_entry<arch>());
        // decoding over a bf16 cache on bf16 pairs (attention_decode_pairs.hpp), before the
        // decode entry, which keeps every other cache and one row a KV head: all the products
        // where they may be bf16, else P V alone (S exact in f32)
        t.attention_impls.insert_before("decode", attention_decode_pairs_entry<arch>());
        t.attention_impls.insert_before("decode", attention_decode_pv_pairs_entry<arch>());
        // the fused backward with its five products on bf16 pairs (attention_backward_bf16.hpp),
        // for calls whose products may all be bf16; its operands need no transposed copies
        t.attention_backward_scratch_floats_bf16 = &attention_backward_scratch_floats_bf16<arch>;
        t.attention_backward_tile_bf16 = &attention_backward_tile_bf16<arch>;
        return t;
    }();
    return &table;
}

}  // namespace attn::kernels
