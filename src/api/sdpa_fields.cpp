// The 0.3 fields of attn_sdpa_desc: the rules of quantized K/V caches, and ATTN_UNSUPPORTED for
// what the attention calls do not compute (the backward over a quantized cache).
#include "api/sdpa_fields.hpp"

#include <initializer_list>
#include <utility>

namespace attn::api {
namespace {

// One side of the cache (K or V): its fields and its names for the messages.
struct cache_side {
    const float *scale, *zero;
    const attn_layout &scale_strides;
    int64_t group, dim;
    const char *scale_name, *zero_name, *strides_name, *group_name, *dim_name;
};

// Scale and zero pointers against kv_type; scale strides >= 0 when they are read.
void check_side_pointers(checker &chk, const attn_sdpa_desc &d, const cache_side &s) {
    const int t = enum_int(d.kv_type);
    if (!is_quantized_type(t)) {
        for (auto [p, name] : {std::pair{s.scale, s.scale_name}, std::pair{s.zero, s.zero_name}})
            if (!chk.failed() && p)
                chk.fail(ATTN_INVALID_ARGUMENT,
                         "%s = %p, must be NULL unless desc->kv_type is quantized (desc->kv_type "
                         "= %s (%d))",
                         name, (const void *)p, dtype_name(t), t);
        return;
    }
    if (is_integer_quantized_type(t) && !chk.failed() && !s.scale)
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "%s = NULL, must be non-null: the integer type desc->kv_type = %s (%d) needs "
                 "scales",
                 s.scale_name, dtype_name(t), t);
    if (!is_integer_quantized_type(t) && !chk.failed() && s.zero)
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "%s = %p, must be NULL: zero points are for the integer types only, not "
                 "desc->kv_type = %s (%d)",
                 s.zero_name, (const void *)s.zero, dtype_name(t), t);
    if (s.scale) chk.layout_strides(s.scale_strides, s.strides_name);
}

// group >= 0 and dividing dim (0 = dim); with a 4-bit kv_type, dim and the group even.
void check_side_group(checker &chk, const attn_sdpa_desc &d, const cache_side &s) {
    chk.at_least(s.group, 0, s.group_name);
    if (chk.failed()) return;
    if (s.group > 0 && s.dim % s.group != 0) {
        chk.fail(ATTN_INVALID_ARGUMENT, "%s = %lld, must divide %s = %lld (0 = one group per row)",
                 s.group_name, (long long)s.group, s.dim_name, (long long)s.dim);
        return;
    }
    const int t = enum_int(d.kv_type);
    if (!is_4bit_type(t)) return;
    if (s.dim % 2 != 0)
        chk.fail(ATTN_INVALID_ARGUMENT, "%s = %lld, must be even with the 4-bit desc->kv_type = %s",
                 s.dim_name, (long long)s.dim, dtype_name(t));
    else if (s.group % 2 != 0)
        chk.fail(ATTN_INVALID_ARGUMENT,
                 "%s = %lld, must be even with the 4-bit desc->kv_type = %s (per channel: 2, one "
                 "scale per pair of channels)",
                 s.group_name, (long long)s.group, dtype_name(t));
}

// With a 4-bit kv_type every stride of k and v whose dimension has more than one index is
// even, so that every row starts on a whole byte (packed by kv_start: .seq always, as the
// packed rows are not bounded by len_kv).
void check_4bit_strides(checker &chk, const attn_sdpa_desc &d) {
    const int t = enum_int(d.kv_type);
    if (!is_4bit_type(t)) return;
    const int64_t outer = d.block_table ? d.num_pages : d.batch;  // pages of a pool, or batches
    const int64_t rows = d.block_table ? d.page_size : d.kv_start ? 2 : d.len_kv;
    for (auto [layout, name] : {std::pair{&d.k, "desc->k"}, std::pair{&d.v, "desc->v"}}) {
        const int64_t stride[3] = {layout->batch, layout->head, layout->seq};
        const int64_t extent[3] = {d.kv_start ? 1 : outer, d.heads_kv, rows};
        static const char *const field[3] = {"batch", "head", "seq"};
        for (int i = 0; i < 3 && !chk.failed(); ++i)
            if (extent[i] > 1 && stride[i] % 2 != 0)
                chk.fail(ATTN_INVALID_ARGUMENT,
                         "%s.%s = %lld, must be even with the 4-bit desc->kv_type = %s (two "
                         "elements per byte)",
                         name, field[i], (long long)stride[i], dtype_name(t));
    }
}

}  // namespace

void check_quantized_fields(checker &chk, const attn_sdpa_desc &d) {
    chk.kv_dtype(d.kv_type, "desc->kv_type");
    if (chk.failed()) return;
    const cache_side sides[2] = {
        {d.k_scale, d.k_zero, d.k_scale_strides, d.k_group, d.dim_qk, "desc->k_scale",
         "desc->k_zero", "desc->k_scale_strides", "desc->k_group", "desc->dim_qk"},
        {d.v_scale, d.v_zero, d.v_scale_strides, d.v_group, d.dim_v, "desc->v_scale",
         "desc->v_zero", "desc->v_scale_strides", "desc->v_group", "desc->dim_v"}};
    for (const cache_side &s : sides) check_side_pointers(chk, d, s);
    for (const cache_side &s : sides) check_side_group(chk, d, s);
    check_4bit_strides(chk, d);
}

void reject_unbuilt_fields(checker &chk, const attn_sdpa_desc &d, bool backward) {
    if (chk.failed()) return;
    const int t = enum_int(d.kv_type);
    if (chk.failed() || !is_quantized_type(t)) return;
    if (backward)  // the forward reads quantized caches; the backward does not
        chk.fail(ATTN_UNSUPPORTED,
                 "desc->kv_type = %s (%d): the backward does not support quantized K/V caches",
                 dtype_name(t), t);
}

}  // namespace attn::api
