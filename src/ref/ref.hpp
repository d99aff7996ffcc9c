// The oracle: plain scalar loops anyone can check by eye, one file per op. Every fast path
// is tested against these. Same preconditions and meaning as the C API (include/attn/attn.h);
// arguments are already validated. Single-threaded; accumulations in float, in index order,
// except where a comment says otherwise.
#pragma once

#include <cstdint>

#include "attn/attn.h"

namespace attn::ref {

void gemm(attn_trans trans_a, attn_trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
          int64_t ldc);

// gemm with A, B, C arrays of their types: each element widened (and, with round_bf16,
// an f32 or f16 element rounded to bf16 first), products summed in f32 in index order,
// alpha * dot + beta * C rounded once into c_type.
void gemm_typed(attn_trans trans_a, attn_trans trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const void *a, attn_dtype a_type, int64_t lda, const void *b,
                attn_dtype b_type, int64_t ldb, float beta, void *c, attn_dtype c_type,
                int64_t ldc, bool round_bf16);

void softmax(int64_t rows, int64_t cols, float scale, const float *x, int64_t ldx, float *y,
             int64_t ldy);

void sdpa(const attn_sdpa_desc &d, const float *q, const float *k, const float *v, float *out);
// The same for every type combination (d.q_type, d.kv_type, d.out_type): inputs widened,
// computed in f32, the output rounded once.
void sdpa_typed(const attn_sdpa_desc &d, const void *q, const void *k, const void *v, void *out);

void sdpa_backward(const attn_sdpa_desc &d, const float *q, const float *k, const float *v,
                   const float *out, const float *dout, const float *lse, float *dq, float *dk,
                   float *dv);

// The attention inside multi-head attention: heads over projections laid out
// [batch, len, heads, head_dim] (BSHD), scale 1/sqrt(head_dim), the desc's causal, kv_len and
// dropout. Shared by the reference and the SIMD driver so both attend identically.
attn_sdpa_desc mha_attention_desc(const attn_mha_desc &d);

void mha_forward(const attn_mha_desc &d, const float *x_q, const float *x_kv, float *y);

void mha_backward(const attn_mha_desc &d, const float *x_q, const float *x_kv, const float *dy,
                  float *dx_q, float *dx_kv, const attn_mha_grads &g);

void merge(int64_t parts, int64_t rows, int64_t dim_v, const float *const *outs,
           const float *const *lses, float *out, float *lse);

// dst[i] = src[i] converted (attn_convert's rules, core/convert.hpp), i < n.
void convert(int64_t n, const void *src, attn_dtype src_type, void *dst, attn_dtype dst_type);
// attn_quantize (attn.h): rows x dim values of src_type (F32, BF16, F16) into dst_type (a
// quantized type), group by group, with the scales (and zero points when zero != NULL) at
// [r * scale_stride + g]. Every value finite, every group's max - min finite (checked before).
void quantize(int64_t rows, int64_t dim, const void *src, attn_dtype src_type,
              int64_t src_stride, void *dst, attn_dtype dst_type, int64_t dst_stride,
              float *scale, float *zero, int64_t scale_stride, int64_t group);
// Element i of an array of type t, widened to float (exact); x rounded into element i.
float load_element(const void *base, attn_dtype t, int64_t i);
void store_element(void *base, attn_dtype t, int64_t i, float x);

}  // namespace attn::ref
