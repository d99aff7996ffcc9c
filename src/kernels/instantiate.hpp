// Included once by each src/kernels/arch/<isa>.cpp, compiled with that ISA's flags:
// instantiates every kernel template for Arch and fills that ISA's kernel_table.
#pragma once

#include "kernels/intrinsics.hpp"  // first: see there
#include "kernels/isa_namespace.hpp"
#include <xsimd/xsimd.hpp>

#include "kernels/attention.hpp"
#include "kernels/attention_backward.hpp"
#include "kernels/attention_decode.hpp"
#include "kernels/attention_entries.hpp"
#include "kernels/convert.hpp"
#include "kernels/elements.hpp"
#include "kernels/kernels.hpp"
#include "kernels/quantize.hpp"  // --- quantize ---
// --- gemm and softmax ---
#include "kernels/gemm.hpp"
#include "kernels/softmax.hpp"
#include "kernels/vec_math.hpp"

ATTN_KERNELS_BEGIN

template <class Arch>
kernel_table make_kernel_table(const char *isa_name) {
    kernel_table t{};
    t.isa_name = isa_name;
    t.vector_floats = static_cast<int>(xsimd::batch<float, Arch>::size);
    // --- gemm and softmax ---
    constexpr gemm_blocking gb = gemm_blocking_for<Arch>();
    t.gemm_mr = gb.mr;
    t.gemm_nr = gb.nr;
    t.gemm_kc = gb.kc;
    t.gemm_mc = gb.mc;
    t.gemm_nc = gb.nc;
    t.gemm_pack_a = &gemm_pack_a<Arch>;
    t.gemm_pack_b = &gemm_pack_b<Arch>;
    t.gemm_pack_a_typed = &gemm_pack_a_typed<Arch>;
    t.gemm_pack_b_typed = &gemm_pack_b_typed<Arch>;
    t.gemm_micro_kernel = &gemm_micro_kernel<Arch>;
    t.exp_array = &exp_array<Arch>;
    t.exp2_array = &exp2_array<Arch>;
    t.exp_for_bf16_array = &exp_for_bf16_array<Arch>;
    t.tanh_array = &tanh_array<Arch>;
    t.softmax_rows = &softmax_rows<Arch>;
    // --- convert ---
    t.convert_array = &convert_array<Arch>;
    // --- attention ---
    t.attention_impls.append(attention_decode_entry<Arch>());
    t.attention_impls.append(attention_f32_tiles_entry<Arch>());
    t.attention_br = attention_blocking<Arch>::br;
    t.attention_bc = attention_blocking<Arch>::bc;
    t.attention_scratch_floats = &attention_scratch_floats<Arch>;
    t.attention_forward_tile = &attention_forward_tile<Arch>;
    t.attention_backward_bk = static_cast<int>(backward_bk);
    t.attention_backward_br = static_cast<int>(backward_br);
    t.attention_backward_scratch_floats = &attention_backward_scratch_floats<Arch>;
    t.attention_backward_tile = &attention_backward_tile<Arch>;
    t.attention_merge_rows = &attention_merge_rows<Arch>;
    t.narrow_row = &narrow_row<Arch>;
    // --- quantize ---
    t.quantize_rows = &quantize_rows<Arch>;
    return t;
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE

// Defines kernel_table_<name>() returning the table for Arch.
#define ATTN_DEFINE_KERNEL_TABLE(Arch, name)                                      \
    namespace attn::kernels {                                                     \
    const kernel_table *kernel_table_##name() {                                   \
        static const kernel_table table = make_kernel_table<Arch>(#name);         \
        return &table;                                                            \
    }                                                                             \
    }
