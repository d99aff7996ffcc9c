// The drivers: one function per op, called by src/api after every argument has been
// validated. They choose the reference or the xsimd kernels for the ISA the context
// resolved, block the work and run it in the context's TBB arena.
//
// Preconditions (checked by src/api, never here): every pointer a shape needs is non-null,
// sizes are within range, strides are valid, outputs do not overlap inputs.
// Errors: std::bad_alloc on scratch allocation failure; nothing else is thrown on valid input.
#pragma once

#include <cstdint>

#include <tbb/task_arena.h>

#include "attn/attn.h"
#include "core/kv_rows.hpp"
#include "core/seq_rows.hpp"
#include "core/scores.hpp"
#include "kernels/kernels.hpp"

namespace attn::ops {

// The drivers read a desc's visibility, score terms and K/V rows through core/.
using core::element_at;
using core::is_causal;
using core::k_rows_for;
using core::keys_in_batch;
using core::kv_rows_for;
using core::no_causal;
using core::query_offset;
using core::score_terms_for;
using core::sink_for;
using core::v_rows_for;
using core::seq_rows;
using core::visibility_for;

// a / b rounded up (a >= 0, b > 0), for any such a (no a + b - 1 to overflow): tiles, chunks
// and blocks of the drivers, the pages of a paged sequence in validation.
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// What a context tells a driver. `isa` is resolved: never ATTN_ISA_AUTO.
// `reference` is true for ATTN_IMPL_REFERENCE and whenever isa == ATTN_ISA_SCALAR.
class workspace_pool;  // workspace.hpp

struct exec {
    bool reference = true;
    attn_isa isa = ATTN_ISA_SCALAR;
    tbb::task_arena *arena = nullptr;  // null: run on the calling thread only
    int num_threads = 1;
    attn_fpmath fpmath = ATTN_FPMATH_STRICT;
    workspace_pool *workspaces = nullptr;  // the context's (null: each call its own)
};

// The kernels a driver runs: the table for ex.isa, or null for the reference.
inline const kernels::kernel_table *simd_kernels(const exec &ex) {
    return ex.reference ? nullptr : kernels::kernel_table_for(ex.isa);
}

void gemm(const exec &ex, attn_trans trans_a, attn_trans trans_b, int64_t m, int64_t n,
          int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc);

// attn_gemm: A, B, C of any attn_dtype; products of the widened (under fpmath bf16: rounded
// to bf16) elements accumulate in f32, C rounded once to c_type. With three F32 types and
// fpmath strict, the same bits as gemm().
void gemm_typed(const exec &ex, attn_trans trans_a, attn_trans trans_b, int64_t m, int64_t n,
                int64_t k, float alpha, const void *a, attn_dtype a_type, int64_t lda,
                const void *b, attn_dtype b_type, int64_t ldb, float beta, void *c,
                attn_dtype c_type, int64_t ldc);

void softmax(const exec &ex, int64_t rows, int64_t cols, float scale, const float *x,
             int64_t ldx, float *y, int64_t ldy);

// Per query row (dense [batch, heads_q, len_q]) of a forward: the max m of the visible scores
// (-inf: none) and the sum l of e^(s - m). The backward forms P = e^(S - m) / l from them,
// exact to rounding where e^(S - lse) would carry lse's rounding (|S| large) into every P.
struct row_stats {
    float *max;
    float *sum;
};

// q, k, v, out are arrays of d.q_type, d.kv_type, d.kv_type, d.out_type. stats (internal
// callers): filled when given (on the split-key path with m = lse, l = 1).
void sdpa(const exec &ex, const attn_sdpa_desc &d, const void *q, const void *k, const void *v,
          void *out, const row_stats *stats = nullptr);

// The fused backward (sdpa_backward.cpp). Statistics: stats when given, else lse (m = lse,
// l = 1), else recomputed by a forward pass.
void sdpa_backward(const exec &ex, const attn_sdpa_desc &d, const float *q, const float *k,
                   const float *v, const float *out, const float *dout, const float *lse,
                   float *dq, float *dk, float *dv, const row_stats *stats = nullptr);

// Whether the backward with element types runs the fused kernel with its products in bf16
// (sdpa_backward.cpp): the level has one (the AMX tiles), every product may be bf16 (q, k, v,
// out stored in bf16, or ATTN_FPMATH_BF16), and the batches are dense. Then
// sdpa_backward_pairs reads the tensors as stored (no f32 copies) and writes each gradient
// rounded once to its type.
bool sdpa_backward_on_pairs(const exec &ex, const attn_sdpa_desc &d);
void sdpa_backward_pairs(const exec &ex, const attn_sdpa_desc &d, const void *q, const void *k,
                         const void *v, const void *out, const void *dout, const float *lse,
                         void *dq, void *dk, void *dv);

// The backward with element types (sdpa_backward_typed.cpp): q, dq of d.q_type; k, v, dk, dv
// of d.kv_type; out, dout of d.out_type. Three F32 types: sdpa_backward itself.
void sdpa_backward_typed(const exec &ex, const attn_sdpa_desc &d, const void *q, const void *k,
                         const void *v, const void *out, const void *dout, const float *lse,
                         void *dq, void *dk, void *dv);

// The composed backward (GEMM, exp, GEMM), for comparison (ops/backward_switch.hpp).
void sdpa_backward_composed(const exec &ex, const attn_sdpa_desc &d, const float *q,
                            const float *k, const float *v, const float *out, const float *dout,
                            const float *lse, float *dq, float *dk, float *dv);

void mha_forward(const exec &ex, const attn_mha_desc &d, const float *x_q, const float *x_kv,
                 float *y);

void mha_backward(const exec &ex, const attn_mha_desc &d, const float *x_q, const float *x_kv,
                  const float *dy, float *dx_q, float *dx_kv, const attn_mha_grads &g);

void convert(const exec &ex, int64_t n, const void *src, attn_dtype src_type, void *dst,
             attn_dtype dst_type);

void merge(const exec &ex, int64_t parts, int64_t rows, int64_t dim_v, const float *const *outs,
           const float *const *lses, float *out, float *lse);

// attn_quantize: the first value that cannot be quantized, in row order: a NaN or infinity
// (row, col: its row and column) or, when asymmetric and a row's values are all finite, a
// group whose max - min overflows (row, col: the group's first column, overflow true).
// row < 0: none.
struct quantize_fault {
    int64_t row = -1, col = -1;
    bool overflow = false;
};
quantize_fault quantize_find_fault(const exec &ex, int64_t rows, int64_t dim, const void *src,
                                   attn_dtype src_type, int64_t src_stride, int64_t group,
                                   bool asymmetric);

// attn_quantize on values quantize_find_fault accepted.
void quantize(const exec &ex, int64_t rows, int64_t dim, const void *src, attn_dtype src_type,
              int64_t src_stride, void *dst, attn_dtype dst_type, int64_t dst_stride,
              float *scale, float *zero, int64_t scale_stride, int64_t group);

}  // namespace attn::ops
