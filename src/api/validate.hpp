// Reusable argument checks for the C entry points. Every entry point validates everything
// before the drivers run, so a rejected call writes no output.
//
// Usage: a checker carries the entry point's name; each check records the first failure
// (status + message "<function>: <argument> = <value>, <rule>") and turns later checks into
// no-ops, so a sequence of checks reads like the list of rules:
//
//     checker c("attn_gemm_f32");
//     c.at_least(m, 0, "m");
//     c.leading_dim(lda, k, "lda", "k");
//     if (c.failed()) return c.status();
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "attn/attn.h"

namespace attn::api {

// A strided tensor as the overlap checks see it: up to 4 dims, sizes >= 0, strides >= 0 in
// elements of elem_bytes each (4 for f32 and int32, 2 for bf16 and f16), the last stride 1.
struct tensor_ref {
    const char *name = "";  // as messages name it: "q", "desc->weights", "outs[2]"
    const void *data = nullptr;
    int rank = 0;
    int64_t size[4] = {0, 0, 0, 0};
    int64_t stride[4] = {0, 0, 0, 0};
    int64_t elem_bytes = 4;
    // Filled by checker::span: the bytes [lo, hi) the tensor can touch; lo == hi if empty.
    uintptr_t lo = 0, hi = 0;
};

// [batch, heads, seq, dim] with the layout's strides and a contiguous dim.
tensor_ref bhsd_tensor(const char *name, const void *data, int64_t batch, int64_t heads,
                       int64_t seq, int64_t dim, const attn_layout &layout,
                       int64_t elem_bytes = 4);
// Dense row-major [rows, cols] with leading dimension ld.
tensor_ref matrix_tensor(const char *name, const void *data, int64_t rows, int64_t cols,
                         int64_t ld, int64_t elem_bytes = 4);
// Dense, n contiguous elements.
tensor_ref vector_tensor(const char *name, const void *data, int64_t n, int64_t elem_bytes = 4);

// The integer a C caller passed for an enum, read through its bytes: C allows any int, but
// in C++ loading a value outside the enum's range (0..1 for attn_trans) is undefined.
template <class Enum>
int enum_int(const Enum &e) {
    static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized");
    int v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

// The quantized element types by their enum value (the value of an unchecked enum is fine).
inline bool is_quantized_type(int t) { return t >= ATTN_DTYPE_I8 && t <= ATTN_DTYPE_FP8_E5M2; }
inline bool is_integer_quantized_type(int t) { return t >= ATTN_DTYPE_I8 && t <= ATTN_DTYPE_U4; }
inline bool is_4bit_type(int t) { return t == ATTN_DTYPE_I4 || t == ATTN_DTYPE_U4; }
// "ATTN_DTYPE_I8" for 3, ...; "?" outside the enum.
const char *dtype_name(int t);

class checker {
public:
    explicit checker(const char *function) : function_(function) {}

    bool failed() const { return status_ != ATTN_OK; }
    attn_status status() const { return status_; }
    const char *function() const { return function_; }

    // Records a failure with message "<function>: <formatted text>" (first failure only).
    void fail(attn_status status, const char *format, ...) __attribute__((format(printf, 3, 4)));

    // value >= min.
    void at_least(int64_t value, int64_t min, const char *what);
    // value % divisor == 0 (divisor >= 1, already checked); `what` and `divisor_what` name them.
    void multiple_of(int64_t value, int64_t divisor, const char *what, const char *divisor_what);
    // p != NULL; `when` says why the data is needed ("m * k > 0"), or NULL if always.
    void not_null(const void *p, const char *what, const char *when = nullptr);
    // One of the enum's values lo..hi; `allowed` lists them for the message.
    void enum_value(int value, int lo, int hi, const char *what, const char *allowed);
    // One of attn_dtype's plain values (F32, BF16, F16); `what` names the field
    // ("desc->q_type", "a_type"). A quantized type is rejected with its own message.
    void dtype(const attn_dtype &t, const char *what);
    // Any of attn_dtype's values, quantized included (desc->kv_type).
    void kv_dtype(const attn_dtype &t, const char *what);
    // One of the quantized types (attn_quantize's dst_type).
    void quantized_dtype(const attn_dtype &t, const char *what);
    // A finite float (not NaN, not +-inf).
    void finite(float value, const char *what);
    // A probability in [0, 1) (NaN fails).
    void probability(float value, const char *what);
    // ld >= max(1, row_length): the leading dimension of a row-major matrix.
    void leading_dim(int64_t ld, int64_t row_length, const char *what,
                     const char *row_length_expr);
    // Every stride of the layout >= 0; `what` is its name ("desc->q").
    void layout_strides(const attn_layout &layout, const char *what);
    // a * b * ... fits in int64; `what` writes the product ("desc->batch * desc->heads_q").
    // Returns the product (0 after a failure).
    int64_t product(const int64_t *factors, int count, const char *what);
    // Computes t.lo / t.hi; fails if the span overflows int64 elements, bytes, or the
    // address space. Strides must already be known >= 0.
    void span(tensor_ref &t);
    // Distinct elements of t land at distinct addresses: sorting the dims of size > 1 by
    // stride, each stride is >= the extent spanned by the smaller ones. Needed for outputs.
    // `layout` names the strides in the message ("desc->out").
    void injective(const tensor_ref &t, const char *layout);
    // The byte ranges of two tensors (spans computed) do not intersect.
    void disjoint(const tensor_ref &output, const tensor_ref &other);
    // Every output is disjoint from every input and from every other output.
    void outputs_disjoint(std::initializer_list<const tensor_ref *> outputs,
                          std::initializer_list<const tensor_ref *> inputs);
    // int32 values[i] in [lo, hi] for i < n; `what` is the array's name.
    void each_in_range(const int32_t *values, int64_t n, int64_t lo, int64_t hi,
                       const char *what, const char *hi_expr);

    // Cumulative starts of n sequences, values[0 .. n] (FlashAttention's cu_seqlens):
    // values[0] == 0, nondecreasing, each count values[i + 1] - values[i] <= max_count.
    void cumulative_starts(const int32_t *values, int64_t n, int64_t max_count, const char *what,
                           const char *max_expr);

private:
    const char *function_;
    attn_status status_ = ATTN_OK;
};

}  // namespace attn::api
