// The kernel table: every xsimd kernel the drivers in src/ops call, for one ISA.
// Kernels are templates on the xsimd Arch (see gemm.hpp, softmax.hpp, attention.hpp);
// each src/kernels/arch/<isa>.cpp instantiates them with that ISA's compile flags and
// exposes them through this table. A new ISA level is: its attn_isa value (attn.h) and name
// (api/context.cpp), its file in arch/ with its compile flags (src/CMakeLists.txt), and in
// dispatch.cpp its detection (best_supported_isa), its table's declaration and its case in
// kernel_table_for(). Kernels know nothing of TBB or of the C API's error handling:
// they compute on raw pointers and are called on valid arguments only.
#pragma once

#include <cstdint>

#include "attn/attn.h"
#include "core/kv_rows.hpp"
#include "core/scores.hpp"
#include "kernels/attention_impl.hpp"

namespace attn::kernels {

// The problem's vocabulary (core/): the keys a row sees, the terms of a score, where a key lives.
using core::alibi_distance;
using core::finish_score;
using core::key_range;
using core::key_visibility;
using core::kv_rows;
using core::score_slope;
using core::score_terms;

struct kernel_table {
    const char *isa_name;  // "avx512", "avx2", "sse4"
    int vector_floats;     // lanes of one xsimd::batch<float, Arch>
    // Each op adds its entry points (function pointers) and per-ISA block sizes below
    // its own marker.
    // --- gemm and softmax ---
    // GEMM (gemm.hpp): block sizes, packing and the micro-kernel; the loops are in ops.
    int gemm_mr, gemm_nr, gemm_kc, gemm_mc, gemm_nc;
    void (*gemm_pack_a)(attn_trans trans_a, int64_t mc, int64_t kc, const float *a, int64_t lda,
                        float *packed);
    void (*gemm_pack_b)(attn_trans trans_b, int64_t kc, int64_t nc, const float *b, int64_t ldb,
                        float *packed);
    // The same panels from arrays of any attn_dtype (a, b: the block's first element;
    // lda, ldb in elements), rounded to bf16 first when round_bf16 (ATTN_FPMATH_BF16).
    void (*gemm_pack_a_typed)(attn_trans trans_a, int64_t mc, int64_t kc, const void *a,
                              attn_dtype a_type, int64_t lda, bool round_bf16, float *packed);
    void (*gemm_pack_b_typed)(attn_trans trans_b, int64_t kc, int64_t nc, const void *b,
                              attn_dtype b_type, int64_t ldb, bool round_bf16, float *packed);
    void (*gemm_micro_kernel)(int64_t kc, float alpha, const float *a_packed,
                              const float *b_packed, float beta, float *c, int64_t ldc,
                              int64_t m_r, int64_t n_r);
    // GEMM from bf16 pairs (gemm_bf16.hpp), on the levels with VDPBF16PS (else null): the
    // same MR x NR tiles over "pair panels" ([kc/2][MR] and [kc/2][NR] 32-bit words of two
    // consecutive k), packed from any attn_dtype (f32 and f16 rounded to bf16 once); the
    // micro-kernel takes the depth in pairs. gemm_kc_bf16 (even) is the depth of one panel
    // in k elements.
    int gemm_kc_bf16;
    void (*gemm_pack_a_bf16)(attn_trans trans_a, int64_t mc, int64_t kc, const void *a,
                             attn_dtype a_type, int64_t lda, uint32_t *packed);
    void (*gemm_pack_b_bf16)(attn_trans trans_b, int64_t kc, int64_t nc, const void *b,
                             attn_dtype b_type, int64_t ldb, uint32_t *packed);
    void (*gemm_micro_kernel_bf16)(int64_t kp, float alpha, const uint32_t *a_packed,
                                   const uint32_t *b_packed, float beta, float *c, int64_t ldc,
                                   int64_t m_r, int64_t n_r);
    // amx: GEMM on AMX tiles (src/kernels/amx/gemm_amx.hpp), on the amx and amx_emulated
    // levels (else null), used in place of the pair panels when set: blocks of
    // gemm_mr_tiles x gemm_nr_tiles, depth blocks of at most gemm_kc_tiles elements packed
    // gemm_packed_pairs_tiles(kc) pairs deep; the block kernel runs a packed A block of mc
    // rows against one B sliver (one tile configuration per call).
    int gemm_mr_tiles, gemm_nr_tiles, gemm_kc_tiles;
    int64_t (*gemm_packed_pairs_tiles)(int64_t kc);
    void (*gemm_pack_a_tiles)(attn_trans trans_a, int64_t mc, int64_t kc, const void *a,
                              attn_dtype a_type, int64_t lda, uint32_t *packed);
    void (*gemm_pack_b_tiles)(attn_trans trans_b, int64_t kc, int64_t nc, const void *b,
                              attn_dtype b_type, int64_t ldb, uint32_t *packed);
    void (*gemm_block_kernel_tiles)(int64_t kw, float alpha, const uint32_t *a_packed,
                                    int64_t mc, const uint32_t *b_sliver, float beta, float *c,
                                    int64_t ldc, int64_t n_r);
    // y[i] = exp(x[i]) with the kernels' exp (vec_math.hpp); x == y allowed.
    void (*exp_array)(const float *x, float *y, int64_t count);
    // y[i] = 2^x[i] with the kernels' exp2 (the f32 softmax's); x == y allowed.
    void (*exp2_array)(const float *x, float *y, int64_t count);
    // y[i] = e^x[i] to 3e-6 relative: the pair paths' softmax, whose P is rounded to bf16.
    void (*exp_for_bf16_array)(const float *x, float *y, int64_t count);
    // y[i] = tanh(x[i]) with the kernels' tanh (the softcap); x == y allowed.
    void (*tanh_array)(const float *x, float *y, int64_t count);
    // Row softmax (softmax.hpp) of `rows` rows, reference semantics; x == y allowed.
    void (*softmax_rows)(int64_t rows, int64_t cols, float scale, const float *x, int64_t ldx,
                         float *y, int64_t ldy);
    // --- convert ---
    // dst[i] = src[i] converted (attn_convert's rules, bit for bit those of
    // src/core/convert.hpp), i < n; src == dst allowed with equal element sizes.
    void (*convert_array)(int64_t n, const void *src, attn_dtype src_type, void *dst,
                          attn_dtype dst_type);
    // --- attention ---
    // Fused attention: the forward implementations, best first (attention_impl.hpp; their
    // argument block is in attention_args.hpp).
    attention_impl_list attention_impls;
    // The f32 tile kernel itself (attention.hpp), its blocks and scratch: the backward
    // recomputes the forward's row statistics with it.
    int attention_br, attention_bc;  // query rows / keys per tile
    int64_t (*attention_scratch_floats)(int64_t dim_qk, int64_t dim_v);
    void (*attention_forward_tile)(const struct attention_tile &tile);
    // Fused backward (attention_backward.hpp): one key tile against one head's query rows.
    int attention_backward_bk, attention_backward_br;  // keys per tile, query rows per step
    int64_t (*attention_backward_scratch_floats)(int64_t dim_qk, int64_t dim_v);
    void (*attention_backward_tile)(const struct attention_backward_tile &tile);
    // The same with the five products in bf16, for calls whose products may all be bf16 (q, k,
    // v, out stored in bf16, or ATTN_FPMATH_BF16), on its own scratch size: on bf16 pairs on the
    // avx512_bf16 level (attention_backward_bf16.hpp), on AMX tiles on the amx and
    // amx_emulated levels (amx/attention_backward_amx.hpp); null on the others.
    int64_t (*attention_backward_scratch_floats_bf16)(int64_t dim_qk, int64_t dim_v);
    void (*attention_backward_tile_bf16)(const struct attention_backward_tile &tile);
    // The AMX kernel's transposed operands (null on other levels), once per head, in blocks of
    // 32 rows: dst[((r / 32) * dims + d) * 32 + r % 32] = bf16 of element d of row r (rows ld
    // elements apart, of type t) for d < dims (dim rounded up to 32; zero past dim) and
    // r < rows32 (a multiple of 32; zero from row n on and for rows with row_max[r] = -inf).
    void (*attention_backward_pack_t_bf16)(const void *rows, attn_dtype t, int64_t ld, int64_t n,
                                           int64_t dim, const float *row_max, uint16_t *dst,
                                           int64_t rows32);
    // dst[0 .. n) of type t = src rounded once (attn_convert's rules).
    void (*narrow_row)(const float *src, int64_t n, void *dst, attn_dtype t);
    void (*attention_merge_rows)(int64_t parts, int64_t first, int64_t rows, int64_t dim_v,
                                 const float *const *outs, int64_t outs_ld,
                                 const float *const *lses, float *out, int64_t out_ld,
                                 float *lse);
    // --- quantize ---
    // attn_quantize over `rows` rows (quantize.hpp); scratch and codes hold
    // quantize_scratch_floats / quantize_scratch_codes(dim, vector_floats) elements.
    void (*quantize_rows)(int64_t rows, int64_t dim, const void *src, attn_dtype src_type,
                          int64_t src_stride, void *dst, attn_dtype dst_type, int64_t dst_stride,
                          float *scale, float *zero, int64_t scale_stride, int64_t group,
                          float *scratch, int32_t *codes);
    // --- end quantize ---
};

// --- quantize ---
// The scratch kernel_table::quantize_rows needs for rows of dim elements: floats (the row, its
// scales and zero points, padded to whole vectors) and int32 codes.
inline int64_t quantize_scratch_floats(int64_t dim, int64_t vector_floats) {
    return 3 * (dim + vector_floats);
}
inline int64_t quantize_scratch_codes(int64_t dim, int64_t vector_floats) {
    return dim + vector_floats;
}

// The table for an ISA, or nullptr for ATTN_ISA_SCALAR / ATTN_ISA_AUTO.
const kernel_table *kernel_table_for(attn_isa isa);

// The best ISA this CPU and OS support, among those compiled in.
attn_isa best_supported_isa();

// Whether this CPU and OS run the level: every level up to best_supported_isa(), and
// ATTN_ISA_AMX_EMULATED (never chosen by best_supported_isa) wherever avx512_bf16 runs.
bool isa_supported(attn_isa isa);

// How decoding prefetches K and V rows on this CPU (decode_rows.hpp): bytes of a dense row
// stream ahead; and, where a call's K and V rows fill 3/4 of the last-level cache or more
// (llc_bytes; 0: unknown, or no such rule here) and so stream from memory, rows of
// memory_rows_from bytes up to (not including) memory_rows_below are left to the hardware's
// own prefetcher, and rows of memory_l2_from bytes or more that are prefetched are fetched
// into the L2 only (PREFETCHT2), not the L1 (0: every prefetch into the L1).
// A property of the memory system, not of the ISA level, and no part of the results.
struct decode_prefetch_policy {
    int64_t bytes;
    int64_t memory_rows_from, memory_rows_below;
    int64_t memory_l2_from;
    int64_t llc_bytes;
};
const decode_prefetch_policy &decode_prefetch();
// Tests: decode_prefetch() gives *policy (kept by the caller) until set again; nullptr: the CPU's.
void set_decode_prefetch(const decode_prefetch_policy *policy);

}  // namespace attn::kernels
