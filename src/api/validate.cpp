#include "api/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "api/error.hpp"

namespace attn::api {

namespace {
constexpr const char *kBhsdDimNames[4] = {"batch", "head", "seq", "dim"};
}  // namespace

tensor_ref bhsd_tensor(const char *name, const void *data, int64_t batch, int64_t heads,
                       int64_t seq, int64_t dim, const attn_layout &layout, int64_t elem_bytes) {
    tensor_ref t;
    t.elem_bytes = elem_bytes;
    t.name = name;
    t.data = data;
    t.rank = 4;
    const int64_t size[4] = {batch, heads, seq, dim};
    const int64_t stride[4] = {layout.batch, layout.head, layout.seq, 1};
    std::copy(size, size + 4, t.size);
    std::copy(stride, stride + 4, t.stride);
    return t;
}

tensor_ref matrix_tensor(const char *name, const void *data, int64_t rows, int64_t cols,
                         int64_t ld, int64_t elem_bytes) {
    tensor_ref t;
    t.elem_bytes = elem_bytes;
    t.name = name;
    t.data = data;
    t.rank = 2;
    t.size[0] = rows;
    t.size[1] = cols;
    t.stride[0] = ld;
    t.stride[1] = 1;
    return t;
}

tensor_ref vector_tensor(const char *name, const void *data, int64_t n, int64_t elem_bytes) {
    tensor_ref t;
    t.elem_bytes = elem_bytes;
    t.name = name;
    t.data = data;
    t.rank = 1;
    t.size[0] = n;
    t.stride[0] = 1;
    return t;
}

void checker::fail(attn_status status, const char *format, ...) {
    if (failed()) return;
    status_ = status;
    char text[448];
    va_list args;
    va_start(args, format);
    std::vsnprintf(text, sizeof text, format, args);
    va_end(args);
    set_last_error("%s: %s", function_, text);
}

void checker::at_least(int64_t value, int64_t min, const char *what) {
    if (failed() || value >= min) return;
    fail(ATTN_INVALID_ARGUMENT, "%s = %lld, must be >= %lld", what, (long long)value,
         (long long)min);
}

void checker::multiple_of(int64_t value, int64_t divisor, const char *what, const char *divisor_what) {
    if (failed() || value % divisor == 0) return;
    fail(ATTN_INVALID_ARGUMENT, "%s = %lld, must be a multiple of %s = %lld", what, (long long)value,
         divisor_what, (long long)divisor);
}

void checker::not_null(const void *p, const char *what, const char *when) {
    if (failed() || p) return;
    if (when)
        fail(ATTN_INVALID_ARGUMENT, "%s = NULL, must be non-null when %s", what, when);
    else
        fail(ATTN_INVALID_ARGUMENT, "%s = NULL, must be non-null", what);
}

void checker::enum_value(int value, int lo, int hi, const char *what, const char *allowed) {
    if (failed() || (value >= lo && value <= hi)) return;
    fail(ATTN_INVALID_ARGUMENT, "%s = %d, must be %s", what, value, allowed);
}

const char *dtype_name(int t) {
    static const char *const names[] = {
        "ATTN_DTYPE_F32", "ATTN_DTYPE_BF16", "ATTN_DTYPE_F16", "ATTN_DTYPE_I8",
        "ATTN_DTYPE_U8", "ATTN_DTYPE_I4", "ATTN_DTYPE_U4", "ATTN_DTYPE_FP8_E4M3",
        "ATTN_DTYPE_FP8_E5M2"};
    return t >= 0 && t <= ATTN_DTYPE_FP8_E5M2 ? names[t] : "?";
}

void checker::dtype(const attn_dtype &t, const char *what) {
    const int v = enum_int(t);
    if (!failed() && is_quantized_type(v))
        fail(ATTN_INVALID_ARGUMENT,
             "%s = %s (%d), a quantized type, allowed only as desc->kv_type (a K/V cache) and as "
             "attn_quantize's dst_type; must be ATTN_DTYPE_F32 (0), ATTN_DTYPE_BF16 (1) or "
             "ATTN_DTYPE_F16 (2)",
             what, dtype_name(v), v);
    enum_value(v, ATTN_DTYPE_F32, ATTN_DTYPE_F16, what,
               "ATTN_DTYPE_F32 (0), ATTN_DTYPE_BF16 (1) or ATTN_DTYPE_F16 (2)");
}

void checker::kv_dtype(const attn_dtype &t, const char *what) {
    enum_value(enum_int(t), ATTN_DTYPE_F32, ATTN_DTYPE_FP8_E5M2, what,
               "an attn_dtype: ATTN_DTYPE_F32 (0) .. ATTN_DTYPE_FP8_E5M2 (8)");
}

void checker::quantized_dtype(const attn_dtype &t, const char *what) {
    enum_value(enum_int(t), ATTN_DTYPE_I8, ATTN_DTYPE_FP8_E5M2, what,
               "a quantized type: ATTN_DTYPE_I8 (3), ATTN_DTYPE_U8 (4), ATTN_DTYPE_I4 (5), "
               "ATTN_DTYPE_U4 (6), ATTN_DTYPE_FP8_E4M3 (7) or ATTN_DTYPE_FP8_E5M2 (8)");
}

void checker::finite(float value, const char *what) {
    if (failed() || std::isfinite(value)) return;
    fail(ATTN_INVALID_ARGUMENT, "%s = %g, must be finite", what, double(value));
}

void checker::probability(float value, const char *what) {
    if (failed() || (value >= 0.0f && value < 1.0f)) return;  // false for NaN
    fail(ATTN_INVALID_ARGUMENT, "%s = %g, must be in [0, 1)", what, double(value));
}

void checker::leading_dim(int64_t ld, int64_t row_length, const char *what,
                          const char *row_length_expr) {
    const int64_t min = std::max<int64_t>(1, row_length);
    if (failed() || ld >= min) return;
    fail(ATTN_INVALID_ARGUMENT, "%s = %lld, must be >= max(1, %s) = %lld", what, (long long)ld,
         row_length_expr, (long long)min);
}

void checker::layout_strides(const attn_layout &layout, const char *what) {
    const int64_t stride[3] = {layout.batch, layout.head, layout.seq};
    for (int i = 0; i < 3 && !failed(); ++i) {
        if (stride[i] < 0)
            fail(ATTN_INVALID_ARGUMENT, "%s.%s = %lld, must be >= 0", what, kBhsdDimNames[i],
                 (long long)stride[i]);
    }
}

int64_t checker::product(const int64_t *factors, int count, const char *what) {
    if (failed()) return 0;
    int64_t p = 1;
    for (int i = 0; i < count; ++i) {
        if (__builtin_mul_overflow(p, factors[i], &p)) {
            char values[160] = "";
            size_t used = 0;
            for (int j = 0; j < count && used < sizeof values; ++j)
                used += std::snprintf(values + used, sizeof values - used, "%s%lld",
                                      j ? " * " : "", (long long)factors[j]);
            fail(ATTN_INVALID_ARGUMENT, "%s = %s, overflows int64", what, values);
            return 0;
        }
    }
    return p;
}

void checker::span(tensor_ref &t) {
    if (failed()) return;
    const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
    t.lo = t.hi = base;
    if (!t.data || t.rank == 0) return;  // an absent optional tensor touches nothing
    for (int i = 0; i < t.rank; ++i)
        if (t.size[i] <= 0) return;  // no elements: touches nothing

    // highest element offset = sum_i (size_i - 1) * stride_i; bytes = (offset + 1) * elem_bytes
    int64_t last = 0, bytes = 0;
    bool overflow = false;
    for (int i = 0; i < t.rank; ++i) {
        int64_t term;
        overflow |= __builtin_mul_overflow(t.size[i] - 1, t.stride[i], &term);
        overflow |= __builtin_add_overflow(last, term, &last);
    }
    overflow |= __builtin_add_overflow(last, int64_t(1), &bytes);
    overflow |= __builtin_mul_overflow(bytes, t.elem_bytes, &bytes);
    uintptr_t end = 0;
    overflow |= __builtin_add_overflow(base, uintptr_t(bytes), &end);
    if (overflow) {
        char shape[192] = "";
        size_t used = 0;
        for (int i = 0; i < t.rank && used < sizeof shape; ++i)
            used += std::snprintf(shape + used, sizeof shape - used, "%ssize %lld stride %lld",
                                  i ? ", " : "", (long long)t.size[i], (long long)t.stride[i]);
        fail(ATTN_INVALID_ARGUMENT, "%s = [%s], its extent overflows int64 or the address space",
             t.name, shape);
        return;
    }
    t.hi = end;
}

void checker::injective(const tensor_ref &t, const char *layout) {
    if (failed()) return;
    // No element, nothing to overlap (and span() did not bound the extent of such a tensor).
    for (int i = 0; i < t.rank; ++i)
        if (t.size[i] <= 0) return;
    // Dims in order of increasing stride; the contiguous last dim goes first among equal
    // strides, so a failure always names a stride the caller chose.
    int order[4];
    int n = 0;
    for (int i = t.rank - 1; i >= 0; --i)
        if (t.size[i] > 1) order[n++] = i;
    std::stable_sort(order, order + n, [&](int a, int b) { return t.stride[a] < t.stride[b]; });
    int64_t extent = 1;  // elements spanned by the dims placed so far
    for (int o = 0; o < n; ++o) {
        const int i = order[o];
        if (t.stride[i] < extent) {
            const char *dim = t.rank == 4 ? kBhsdDimNames[i] : "stride";
            fail(ATTN_INVALID_ARGUMENT,
                 "%s.%s = %lld, must be >= %lld (the extent of the dims with smaller strides) "
                 "so that distinct elements of %s do not overlap",
                 layout, dim, (long long)t.stride[i], (long long)extent, t.name);
            return;
        }
        extent += (t.size[i] - 1) * t.stride[i];  // cannot overflow: span() bounded it
    }
}

void checker::disjoint(const tensor_ref &output, const tensor_ref &other) {
    if (failed()) return;
    if (output.lo == output.hi || other.lo == other.hi) return;  // an empty range
    if (output.lo < other.hi && other.lo < output.hi) {
        fail(ATTN_INVALID_ARGUMENT,
             "%s = %p (bytes [%#llx, %#llx)) overlaps %s = %p (bytes [%#llx, %#llx))",
             output.name, output.data, (unsigned long long)output.lo,
             (unsigned long long)output.hi, other.name, other.data,
             (unsigned long long)other.lo, (unsigned long long)other.hi);
    }
}

void checker::outputs_disjoint(std::initializer_list<const tensor_ref *> outputs,
                               std::initializer_list<const tensor_ref *> inputs) {
    for (auto o = outputs.begin(); o != outputs.end(); ++o) {
        for (const tensor_ref *input : inputs) disjoint(**o, *input);
        for (auto later = o + 1; later != outputs.end(); ++later) disjoint(**o, **later);
    }
}

void checker::each_in_range(const int32_t *values, int64_t n, int64_t lo, int64_t hi,
                            const char *what, const char *hi_expr) {
    if (failed() || !values) return;
    for (int64_t i = 0; i < n; ++i) {
        if (values[i] < lo || values[i] > hi) {
            fail(ATTN_INVALID_ARGUMENT, "%s[%lld] = %d, must be in [%lld, %s = %lld]", what,
                 (long long)i, values[i], (long long)lo, hi_expr, (long long)hi);
            return;
        }
    }
}

void checker::cumulative_starts(const int32_t *values, int64_t n, int64_t max_count,
                                const char *what, const char *max_expr) {
    if (failed() || !values) return;
    if (values[0] != 0) {
        fail(ATTN_INVALID_ARGUMENT, "%s[0] = %d, must be 0", what, values[0]);
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const int64_t count = int64_t(values[i + 1]) - values[i];
        if (count < 0) {
            fail(ATTN_INVALID_ARGUMENT, "%s[%lld] = %d, must be >= %s[%lld] = %d (nondecreasing)",
                 what, (long long)(i + 1), values[i + 1], what, (long long)i, values[i]);
            return;
        }
        if (count > max_count) {
            fail(ATTN_INVALID_ARGUMENT,
                 "%s[%lld] - %s[%lld] = %lld (sequence %lld), must be <= %s = %lld", what,
                 (long long)(i + 1), what, (long long)i, (long long)count, (long long)i, max_expr,
                 (long long)max_count);
            return;
        }
    }
}

}  // namespace attn::api
