// The backward's step 1 when neither lse nor the forward's statistics are given: m and l of
// every row recomputed by the forward kernel (sdpa_backward.cpp's header).
#include <algorithm>

#include "kernels/attention_args.hpp"
#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "core/kv_rows.hpp"
#include "core/scores.hpp"

namespace attn::ops {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

const void *element(const void *base, attn_dtype t, int64_t at) {
    return static_cast<const char *>(base) + at * int64_t(attn_dtype_size(t));
}

// The forward entry with bf16 products whose scores the bf16 backward's match (the tiles
// pack K and V themselves when not given them packed), or null.
const kernels::attention_impl *pair_entry(const kernels::kernel_table &kt) {
    const kernels::attention_impl_list &l = kt.attention_impls;
    for (int i = 0; i < l.count; ++i)
        if (l.entries[i].pair_products && l.entries[i].packs()) return &l.entries[i];
    return nullptr;
}

}  // namespace

// m and l of every row by the forward kernel, a query tile per task, its output and lse into
// per-worker scratch and discarded.
void recompute_forward_statistics(const exec &ex, const kernels::kernel_table &kt,
                                  const attn_sdpa_desc &d, bool pairs, const void *q,
                                  const void *k, const void *v, float *row_max, float *row_sum) {
    const int slots = worker_slots(ex);
    const kernels::attention_impl *tiles = pairs ? pair_entry(kt) : nullptr;
    const int64_t br = tiles ? tiles->br : kt.attention_br;
    const int64_t bc = tiles ? tiles->bc : kt.attention_bc;
    const int64_t group = d.heads_q / d.heads_kv;
    const int64_t tile_floats =
        ceil_div(tiles ? tiles->scratch_floats(d.dim_qk, d.dim_v)
                       : kt.attention_scratch_floats(d.dim_qk, d.dim_v), 16) * 16;
    aligned_floats scratch(size_t(tile_floats * slots));
    std::vector<float> out(size_t(slots * br * d.dim_v)), lse(size_t(slots * br));
    const int64_t q_tiles = ceil_div(d.len_q, br);
    parallel_tasks(ex, d.batch * d.heads_q * q_tiles, [&](int64_t task) {
        const int64_t bh = task / q_tiles, i0 = (task % q_tiles) * br;
        const int64_t b = bh / d.heads_q, h = bh % d.heads_q, hk = h / group;
        const int s = worker_slot(ex);
        kernels::attention_tile t{};
        t.rows = std::min(br, d.len_q - i0);
        t.q = element(q, d.q_type, b * d.q.batch + h * d.q.head + i0 * d.q.seq);
        t.q_type = d.q_type;
        t.out_type = ATTN_DTYPE_F32;
        t.q_ld = d.q.seq;
        t.dim_qk = d.dim_qk;
        t.dim_v = d.dim_v;
        t.scale = d.scale;
        t.k = k_rows_for(d, k, b, hk);
        t.len_kv = keys_in_batch(d, b);
        t.v = v_rows_for(d, v, b, hk);
        // the keys the forward visits for this tile, as ops::sdpa does
        t.visibility = visibility_for(d, b);
        const kernels::key_range first = t.visibility.row(i0);
        const kernels::key_range last = t.visibility.row(i0 + t.rows - 1);
        t.key_begin = first.lo / bc * bc;
        t.key_end = last.hi > t.key_begin ? last.hi : t.key_begin;
        t.first_row = i0;
        t.softcap = d.softcap;
        t.alibi_slopes = d.alibi_slopes ? d.alibi_slopes + h : nullptr;
        t.sinks = d.sinks ? d.sinks + h : nullptr;
        if (d.mask) {
            t.mask = d.mask + b * d.mask_strides.batch + h * d.mask_strides.head +
                     i0 * d.mask_strides.seq;
            t.mask_ld = d.mask_strides.seq;
        }
        t.scratch = scratch.get() + s * tile_floats;
        t.out = out.data() + s * br * d.dim_v;
        t.out_ld = d.dim_v;
        t.lse = lse.data() + s * br;
        t.row_max = row_max + bh * d.len_q + i0;
        t.row_sum = row_sum + bh * d.len_q + i0;
        // the scores the forward computed: with bf16 products when the backward's are
        if (tiles) tiles->forward_tile(t);
        else kt.attention_forward_tile(t);
    });
}


}  // namespace attn::ops
