// The backward with element types (attn_sdpa_backward). Where the level has a fused kernel
// with bf16 products (the AMX tiles) and every product may be bf16, that kernel reads the
// tensors as stored (sdpa_backward_pairs). Otherwise: widen, compute, round once. Every 16-bit
// tensor is widened (exactly) into a dense f32 copy, the f32 backward runs on the copies (the
// fused kernel on the SIMD path, the reference on the reference path: sdpa_backward), and each
// 16-bit gradient is rounded once into its tensor. f32 tensors are used in place, so three F32
// types are sdpa_backward itself, bit for bit. Every copy is allocated before an output is
// written. Each element is converted alone: the threads change no bit.
#include <vector>

#include "ops/ops.hpp"
#include "ops/parallel.hpp"

namespace attn::ops {
namespace {

// A [batch, heads, len, dim] tensor's shape, with its strides in elements. Packed by
// q_start / kv_start, it is one batch row of starts[batch] packed rows: a dense copy of it is
// then a packed layout too (row r of head h at h * len * dim + r * dim), read through the same
// starts by the f32 backward.
struct bhsd_shape {
    int64_t batch, heads, len, dim;
    attn_layout layout;
    int64_t rows() const { return batch * heads * len; }
    attn_layout dense() const { return {heads * len * dim, len * dim, dim}; }
    int64_t offset(int64_t row) const {
        const int64_t i = row % len, bh = row / len;
        return (bh / heads) * layout.batch + (bh % heads) * layout.head + i * layout.seq;
    }
};

bhsd_shape shape_of(const int32_t *starts, int64_t batch, int64_t heads, int64_t len,
                    int64_t dim, const attn_layout &l) {
    if (!starts) return {batch, heads, len, dim, l};
    return {1, heads, int64_t(starts[batch]), dim, attn_layout{0, l.head, l.seq}};
}

// Row by row: widen (to_f32) a tensor of `type` into dense f32, or round (!to_f32) dense f32
// into it.
void convert_rows(const exec &ex, const bhsd_shape &s, const void *tensor, attn_dtype type,
                  float *dense, bool to_f32) {
    exec one = ex;  // each row converted on its task's thread
    one.arena = nullptr;
    one.num_threads = 1;
    parallel_for(ex, s.rows(), 64, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const void *at = element_at(tensor, type, s.offset(row));
            float *copy = dense + row * s.dim;
            if (to_f32) convert(one, s.dim, at, type, copy, ATTN_DTYPE_F32);
            else convert(one, s.dim, copy, ATTN_DTYPE_F32, const_cast<void *>(at), type);
        }
    });
}

// One tensor and its gradient as the f32 backward sees them: in place (f32) or dense copies.
struct f32_view {
    std::vector<float> value, grad;
    const float *in;
    float *out;
    attn_layout layout;
    f32_view(const bhsd_shape &s, attn_dtype type, const void *x, void *dx) {
        if (type == ATTN_DTYPE_F32) {
            in = static_cast<const float *>(x);
            out = static_cast<float *>(dx);
            layout = s.layout;
            return;
        }
        value.resize(size_t(s.rows() * s.dim));
        if (dx) grad.resize(value.size());
        in = value.data();
        out = grad.data();
        layout = s.dense();
    }
};

}  // namespace

void sdpa_backward_typed(const exec &ex, const attn_sdpa_desc &d, const void *q, const void *k,
                         const void *v, const void *out, const void *dout, const float *lse,
                         void *dq, void *dk, void *dv) {
    if (sdpa_backward_on_pairs(ex, d)) {
        sdpa_backward_pairs(ex, d, q, k, v, out, dout, lse, dq, dk, dv);
        return;
    }
    const bhsd_shape qs = shape_of(d.q_start, d.batch, d.heads_q, d.len_q, d.dim_qk, d.q);
    const bhsd_shape ks = shape_of(d.kv_start, d.batch, d.heads_kv, d.len_kv, d.dim_qk, d.k);
    const bhsd_shape vs = shape_of(d.kv_start, d.batch, d.heads_kv, d.len_kv, d.dim_v, d.v);
    const bhsd_shape os = shape_of(d.q_start, d.batch, d.heads_q, d.len_q, d.dim_v, d.out);
    // ---- the f32 views, every copy allocated before anything is written ----
    f32_view q32(qs, d.q_type, q, dq), k32(ks, d.kv_type, k, dk), v32(vs, d.kv_type, v, dv);
    f32_view o32(os, d.out_type, out, nullptr), do32(os, d.out_type, dout, nullptr);
    if (d.q_type != ATTN_DTYPE_F32) convert_rows(ex, qs, q, d.q_type, q32.value.data(), true);
    if (d.kv_type != ATTN_DTYPE_F32) {
        convert_rows(ex, ks, k, d.kv_type, k32.value.data(), true);
        convert_rows(ex, vs, v, d.kv_type, v32.value.data(), true);
    }
    if (d.out_type != ATTN_DTYPE_F32) {
        convert_rows(ex, os, out, d.out_type, o32.value.data(), true);
        convert_rows(ex, os, dout, d.out_type, do32.value.data(), true);
    }
    attn_sdpa_desc f = d;
    f.q_type = f.kv_type = f.out_type = ATTN_DTYPE_F32;
    f.q = q32.layout;
    f.k = k32.layout;
    f.v = v32.layout;
    f.out = o32.layout;  // dout shares out's layout, and its copy is dense as out's
    sdpa_backward(ex, f, q32.in, k32.in, v32.in, o32.in, do32.in, lse, q32.out, k32.out,
                  v32.out);
    // ---- each 16-bit gradient rounded once ----
    if (d.q_type != ATTN_DTYPE_F32) convert_rows(ex, qs, dq, d.q_type, q32.out, false);
    if (d.kv_type != ATTN_DTYPE_F32) {
        convert_rows(ex, ks, dk, d.kv_type, k32.out, false);
        convert_rows(ex, vs, dv, d.kv_type, v32.out, false);
    }
}

}  // namespace attn::ops
