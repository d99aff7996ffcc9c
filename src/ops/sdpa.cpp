// The fused attention driver (attn_sdpa_f32 on the SIMD path).
//
// The query rows are cut into fixed tiles of br rows, and with split keys (decoding: too few
// query tiles to keep the threads busy) the keys into fixed chunks, both decided from the
// shape only. Every output row is therefore computed by the same sequence of floating-point
// operations for any number of threads; only which thread runs a tile varies.
//   without split: a task takes one (batch, kv head) and a range of its (query head, query
//     tile) pairs; it packs that head's K into panels and pads V rows once, in its own slot
//     of scratch, then runs the fused tile kernel on each pair (and writes the weights);
//   with split: a task is one (batch, head, query tile, key chunk), K packed once per head
//     beforehand (up to 64 MiB; beyond, tile by tile inside the kernel; read in place by a
//     few query rows); the chunks' (out, lse) are then merged in chunk order, the math of
//     attn_merge_f32, and the weights, when asked for, come from the merged lse.
// Decoding a single query with grouped-query attention, the query heads of a group (up to
// attention_direct_rows) are the rows of one tile, so each K and V row is read once for them.
// Every buffer is allocated before the first output is written.
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/attention_args.hpp"
#include "kernels/elements.hpp"
#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "core/scores.hpp"
#include "core/kv_rows.hpp"
#include "core/dropout.hpp"
#include "ref/ref.hpp"

namespace attn::ops {
namespace {

// Split the keys when fewer query tiles than this exist (decode), into chunks of at least
// min_chunk_keys keys: enough tasks for the threads, decided from the shape alone.
constexpr int64_t split_below_tasks = 64;
constexpr int64_t min_chunk_keys = 512;
// Largest copy of K (floats, all heads) packed up front for split keys: 64 MiB.
constexpr int64_t max_packed_heads_floats = int64_t(16) << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// 64-byte aligned scratch of at least `floats`. Up to 64 MB it is kept by the calling thread
// from one call to the next: allocating megabytes afresh on every call makes the OS zero
// every page again, a cost comparable to the attention itself at short lengths. Larger
// buffers belong to the call (`owned`) and are freed with it.
struct scratch_buffer {
    std::unique_ptr<aligned_floats> owned;
    float *data = nullptr;
    explicit scratch_buffer(size_t floats) {
        constexpr size_t keep_floats = size_t(16) << 20;
        thread_local std::unique_ptr<aligned_floats> kept;
        thread_local size_t kept_floats = 0;
        if (floats > keep_floats) {
            owned = std::make_unique<aligned_floats>(floats);
            data = owned->get();
            return;
        }
        if (floats > kept_floats) {
            kept.reset();
            kept_floats = 0;
            kept = std::make_unique<aligned_floats>(floats);
            kept_floats = floats;
        }
        data = kept->get();
    }
};

struct sdpa_plan {
    int64_t br, bc, nr;
    int64_t q_tiles, group, rows_total;
    // Decoding one query with grouped KV heads: a tile holds head_rows query heads of one
    // group (its rows), so K and V are read once for them; head_tiles such tiles a group.
    int64_t head_rows, head_tiles;
    int64_t chunks, chunk_keys;  // chunks == 1: no split
    int64_t panels;              // K panels per head
    int64_t v_ld;                // padded V row: whole vectors, an odd number of cache lines

    sdpa_plan(const kernels::kernel_table &kt, const attn_sdpa_desc &d)
        : br(kt.attention_br), bc(kt.attention_bc), nr(kt.attention_nr) {
        q_tiles = ceil_div(d.len_q, br);
        group = d.heads_q / d.heads_kv;
        head_rows = d.len_q == 1 && group > 1 ? std::min(group, kernels::attention_direct_rows) : 1;
        head_tiles = ceil_div(group, head_rows);
        rows_total = d.batch * d.heads_q * d.len_q;
        panels = ceil_div(d.len_kv, nr);
        // Rows an even number of 64-byte lines apart share half the L1 sets, and a
        // bc x 64-float block of V no longer fits; one extra line spreads them over all sets.
        v_ld = ceil_div(d.dim_v, kt.vector_floats) * kt.vector_floats;
        if ((v_ld / 16) % 2 == 0) v_ld = ceil_div(v_ld, 16) * 16 + 16;
        const int64_t tiles = d.batch * d.heads_kv * head_tiles * q_tiles;
        chunks = 1;
        chunk_keys = ceil_div(d.len_kv, bc) * bc;
        if (tiles < split_below_tasks && d.len_kv >= 2 * min_chunk_keys) {
            int64_t want = ceil_div(split_below_tasks, tiles);
            if (want > d.len_kv / min_chunk_keys) want = d.len_kv / min_chunk_keys;
            chunk_keys = ceil_div(ceil_div(d.len_kv, want), bc) * bc;
            chunks = ceil_div(d.len_kv, chunk_keys);
        }
    }
};

// Whether the scores come from bf16 pairs: the ISA has them, the products allow them (q and
// k stored in bf16, whose products are exact in f32; or ATTN_FPMATH_BF16), and there are
// more query rows than the decode kernel takes (decoding reads K and V once, in place, with
// exact products whatever the fpmath: it is bound by memory, not by the products). Every
// tile of a call, and its weights, then use the same scores.
bool bf16_scores(const kernels::kernel_table &kt, const exec &ex, const attn_sdpa_desc &d) {
    if (!kt.attention_forward_tile_bf16 || d.len_q <= kernels::attention_direct_rows) return false;
    return ex.fpmath == ATTN_FPMATH_BF16 ||
           (d.q_type == ATTN_DTYPE_BF16 && d.kv_type == ATTN_DTYPE_BF16);
}

// A few query rows reading K in place (decoding) take the bandwidth-bound kernel; the others
// the fused tile kernel, with f32 or bf16-pair scores (pair scores for every tile of the call,
// its last few rows included).
void run_tile(const kernels::kernel_table &kt, bool pairs, const kernels::attention_tile &t) {
    if (pairs)
        kt.attention_forward_tile_bf16(t);
    else if (t.rows <= kernels::attention_direct_rows && !t.k_packed)
        kt.attention_decode_tile(t);
    else
        kt.attention_forward_tile(t);
}

// The head's K from key `first` on packed for the tile kernel: f32 panels, or bf16-pair panels
// (in the same buffer, which is large enough for either); rows through the addressing function.
void pack_head_k(const kernels::kernel_table &kt, bool pairs, const kernels::kv_rows &k,
                 int64_t first, int64_t keys_end, int64_t dim_qk, int64_t panels, float *packed) {
    if (pairs)
        kt.attention_pack_k_bf16(k, first, keys_end, dim_qk, panels,
                                 reinterpret_cast<uint16_t *>(packed));
    else
        kt.attention_pack_k(k, first, keys_end, dim_qk, panels, packed);
}

void set_packed_k(kernels::attention_tile &t, bool pairs, const float *packed) {
    if (pairs)
        t.k_pairs = reinterpret_cast<const uint16_t *>(packed);
    else
        t.k_packed = packed;
}

void weights_tile(const kernels::kernel_table &kt, bool pairs, const kernels::attention_tile &t,
                  float *weights, int64_t ld, bool after_forward) {
    if (pairs)
        kt.attention_weights_tile_bf16(t, weights, ld, after_forward);
    else
        kt.attention_weights_tile(t, weights, ld, after_forward);
}

}  // namespace

void sdpa(const exec &ex, const attn_sdpa_desc &d, const void *q, const void *k, const void *v,
          void *out, const row_stats *stats) {
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (!kt) {
        ref::sdpa_typed(d, q, k, v, out);
        return;
    }
    using kernels::element_at;
    const sdpa_plan plan(*kt, d);
    const bool split = plan.chunks > 1;
    const bool pair_scores = bf16_scores(*kt, ex, d);
    // A key's share of a packed K panel, in floats: dim_qk f32, or dim_qk / 2 bf16 pairs.
    const int64_t packed_row_floats = pair_scores ? (d.dim_qk + 1) / 2 : d.dim_qk;
    const bool dropout = d.dropout_p > 0.0f;

    // ---- scratch, all before any output is written ----
    const int slots = worker_slots(ex);
    const int64_t slot_floats = (kt->attention_scratch_floats(d.dim_qk, d.dim_v) + 15) / 16 * 16;
    std::vector<uint32_t> row_keys(dropout ? static_cast<size_t>(plan.br * slots) : 0);
    std::vector<float> slot_lse(static_cast<size_t>(plan.br * slots));
    // Without split, each slot also holds one head's packed K and padded V (a few query rows
    // read K and V in place instead).
    const bool pack_per_slot = !split && d.len_q > kernels::attention_direct_rows;
    const int64_t head_k = pack_per_slot ? plan.panels * plan.nr * d.dim_qk : 0;
    const int64_t head_v = pack_per_slot ? d.len_kv * plan.v_ld : 0;
    const scratch_buffer scratch(size_t((slot_floats + head_k + head_v) * slots));
    float *tile_scratch = scratch.data;
    float *packed = tile_scratch + slot_floats * slots;
    // Split keys with whole query tiles: every head's K packed once, shared by all its tiles
    // (rather than each tile packing its chunk again), when that copy of K is not too big.
    const int64_t packed_head_floats = plan.panels * plan.nr * d.dim_qk;
    std::unique_ptr<aligned_floats> packed_heads;
    if (split && plan.head_rows == 1 && d.len_q > kernels::attention_direct_rows &&
        d.batch * d.heads_kv * packed_head_floats <= max_packed_heads_floats)
        packed_heads = std::make_unique<aligned_floats>(
            size_t(d.batch * d.heads_kv * packed_head_floats));
    // Final lse of every row, when the caller gives none but a later phase needs it.
    std::vector<float> lse_rows(!d.lse && (split || d.weights || stats) ? plan.rows_total : 0);
    float *lse_all = d.lse ? d.lse : (lse_rows.empty() ? nullptr : lse_rows.data());
    // Split keys: chunk c's normalised rows [rows_total x dim_v] and lse [rows_total].
    // With sinks, one more part: the sinks as a key set of their own, with no value (rows of
    // zeros, lse = the head's sink), merged last, so that each row counts its sink once.
    const int64_t parts = split ? plan.chunks + (d.sinks ? 1 : 0) : 0;
    std::vector<float> part_out(size_t(parts * plan.rows_total * d.dim_v), 0.0f);
    std::vector<float> part_lse(size_t(parts * plan.rows_total));
    std::vector<const float *> part_out_at(static_cast<size_t>(parts));
    std::vector<const float *> part_lse_at(static_cast<size_t>(parts));
    for (int64_t c = 0; c < parts; ++c) {
        part_out_at[c] = part_out.data() + c * plan.rows_total * d.dim_v;
        part_lse_at[c] = part_lse.data() + c * plan.rows_total;
    }
    if (split && d.sinks)
        for (int64_t row = 0; row < plan.rows_total; ++row)
            part_lse[size_t(plan.chunks * plan.rows_total + row)] =
                d.sinks[(row / d.len_q) % d.heads_q];
    auto slot = [&]() { return worker_slot(ex); };

    // The tile of query rows [i0, i0 + rows) of (b, h), keys [key_begin, key_end).
    auto make_tile = [&](int64_t b, int64_t h, int64_t i0, int64_t s) {
        const int64_t hk = h / plan.group;
        kernels::attention_tile t{};
        t.rows = d.len_q - i0 < plan.br ? d.len_q - i0 : plan.br;
        t.q = element_at(q, d.q_type, b * d.q.batch + h * d.q.head + i0 * d.q.seq);
        t.q_type = d.q_type;
        t.q_ld = d.q.seq;
        t.dim_qk = d.dim_qk;
        t.dim_v = d.dim_v;
        t.scale = d.scale;
        t.k = k_rows_for(d, k, b, hk);
        t.len_kv = keys_in_batch(d, b);  // rows past kv_len are never read (nor their pages)
        t.v = v_rows_for(d, v, b, hk);
        t.out_type = d.out_type;
        // Key tiles left of the first row's window, and keys past the last row's limit
        // (window, causal, kv_len), are never visited: work skipped, not masked.
        t.visibility = visibility_for(d, b);
        const kernels::key_range first = t.visibility.row(i0);
        const kernels::key_range last = t.visibility.row(i0 + t.rows - 1);
        t.key_begin = first.lo / plan.bc * plan.bc;
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
        t.scratch = tile_scratch + s * slot_floats;
        if (dropout) {
            uint32_t *keys = row_keys.data() + s * plan.br;
            for (int64_t r = 0; r < t.rows; ++r)
                keys[r] = dropout::row_key(d.dropout_seed, b, h, i0 + r);
            t.dropout_keys = keys;
            t.dropout_threshold = dropout::threshold(d.dropout_p);
            t.dropout_keep = dropout::keep_scale(d.dropout_p);
        }
        return t;
    };
    // The tile of query tile i0 of the head_rows query heads from head_tile ht of kv head hk:
    // with grouping, row r is query 0 of head h0 + r, and every row sees the same keys.
    const int64_t row_ld_out = plan.head_rows > 1 ? d.out.head : d.out.seq;
    auto make_unit_tile = [&](int64_t b, int64_t hk, int64_t ht, int64_t i0, int s) {
        const int64_t h0 = hk * plan.group + ht * plan.head_rows;
        kernels::attention_tile t = make_tile(b, h0, i0, s);
        if (plan.head_rows == 1) return t;
        t.rows = std::min(plan.head_rows, plan.group - ht * plan.head_rows);
        t.q_ld = d.q.head;
        t.mask_ld = d.mask_strides.head;
        t.rows_are_heads = true;  // every row is query 0: the same keys, its own head's terms
        if (dropout) {
            uint32_t *keys = row_keys.data() + s * plan.br;
            for (int64_t r = 0; r < t.rows; ++r)
                keys[r] = dropout::row_key(d.dropout_seed, b, h0 + r, 0);
        }
        return t;
    };

    if (!split) {
        // Tasks: (batch, kv head) x ranges of its (query head, query tile) pairs; enough
        // ranges for the threads, few enough that packing a head stays a small cost.
        const int64_t heads = d.batch * d.heads_kv, pairs = plan.head_tiles * plan.q_tiles;
        int64_t ranges = ceil_div(4 * int64_t(slots), heads);
        if (ranges > pairs) ranges = pairs;
        const int64_t per_range = ceil_div(pairs, ranges);
        ranges = ceil_div(pairs, per_range);
        parallel_tasks(ex, heads * ranges, [&](int64_t task) {
            const int64_t head = task / ranges, first = (task % ranges) * per_range;
            const int64_t last = first + per_range < pairs ? first + per_range : pairs;
            const int64_t b = head / d.heads_kv, hk = head % d.heads_kv;
            const int s = slot();
            float *k_packed = packed + s * (head_k + head_v);
            float *v_padded = k_packed + head_k;
            // K panels and padded V rows of this head, once for all its pairs in the range
            const kernels::kv_rows k_head = k_rows_for(d, k, b, hk);
            const kernels::kv_rows v_head = v_rows_for(d, v, b, hk);
            if (pack_per_slot) {  // the batch's keys only: past kv_len no row (nor page) is read
                const int64_t keys_b = keys_in_batch(d, b);
                pack_head_k(*kt, pair_scores, k_head, 0, keys_b, d.dim_qk, plan.panels, k_packed);
                if (pair_scores)
                    kt->attention_pack_v_bf16(v_head, 0, keys_b, d.dim_v, plan.v_ld,
                                              reinterpret_cast<uint16_t *>(v_padded));
                else
                    kt->attention_pad_v(v_head, 0, keys_b, d.dim_v, v_padded, plan.v_ld);
            }
            for (int64_t pair = first; pair < last; ++pair) {
                const int64_t ht = pair / plan.q_tiles, h = hk * plan.group + ht * plan.head_rows;
                const int64_t i0 = (pair % plan.q_tiles) * plan.br;
                const int64_t row0 = (b * d.heads_q + h) * d.len_q + i0;  // dense [b,h,i]
                kernels::attention_tile t = make_unit_tile(b, hk, ht, i0, s);
                if (pack_per_slot) {
                    set_packed_k(t, pair_scores, k_packed);
                    if (pair_scores) {  // V as bf16 pair rows; t.v keeps the stored rows
                        t.v_pairs = reinterpret_cast<const uint16_t *>(v_padded);
                        t.v_pairs_ld = 2 * plan.v_ld;
                    } else {
                        t.v = kernels::kv_rows{};
                        t.v.base = v_padded;
                        t.v.type = ATTN_DTYPE_F32;
                        t.v.ld = plan.v_ld;
                        t.v_padded = true;
                    }
                }
                t.out = element_at(out, d.out_type, b * d.out.batch + h * d.out.head + i0 * d.out.seq);
                t.out_ld = row_ld_out;
                t.lse = lse_all ? lse_all + row0 : slot_lse.data() + s * plan.br;
                if (stats) {
                    t.row_max = stats->max + row0;
                    t.row_sum = stats->sum + row0;
                }
                if (pair + 1 < last && plan.head_rows == 1) {
                    const int64_t next_h = hk * plan.group + (pair + 1) / plan.q_tiles;
                    const int64_t next_i0 = ((pair + 1) % plan.q_tiles) * plan.br;
                    t.next_q = element_at(q, d.q_type,
                                          b * d.q.batch + next_h * d.q.head + next_i0 * d.q.seq);
                    t.next_q_rows = d.len_q - next_i0 < plan.br ? d.len_q - next_i0 : plan.br;
                }
                run_tile(*kt, pair_scores, t);
                if (d.weights)
                    weights_tile(*kt, pair_scores, t, d.weights + row0 * d.len_kv, d.len_kv, true);
            }
        });
        return;
    }

    // ---- split keys: K of every head packed, a task per (batch, kv head, key chunk) ----
    if (packed_heads) {
        parallel_tasks(ex, d.batch * d.heads_kv * plan.chunks, [&](int64_t task) {
            const int64_t head = task / plan.chunks, begin = (task % plan.chunks) * plan.chunk_keys;
            const int64_t b = head / d.heads_kv, hk = head % d.heads_kv;
            const int64_t keys = std::min(plan.chunk_keys, d.len_kv - begin);
            pack_head_k(*kt, pair_scores, k_rows_for(d, k, b, hk), begin, keys_in_batch(d, b), d.dim_qk,
                        ceil_div(keys, plan.nr),
                        packed_heads->get() + head * packed_head_floats +
                            begin / plan.nr * plan.nr * packed_row_floats);
        });
    }

    // ---- split keys: the fused kernel per (batch, head tile, query tile, key chunk) ----
    const int64_t units = d.batch * d.heads_kv * plan.head_tiles;
    const int64_t tasks = units * plan.q_tiles * plan.chunks;
    parallel_tasks(ex, tasks, [&](int64_t task) {
        const int64_t chunk = task % plan.chunks;
        const int64_t qt = (task / plan.chunks) % plan.q_tiles;
        const int64_t unit = task / (plan.chunks * plan.q_tiles);
        const int64_t b = unit / (d.heads_kv * plan.head_tiles), ht = unit % plan.head_tiles;
        const int64_t hk = (unit / plan.head_tiles) % d.heads_kv, i0 = qt * plan.br;
        kernels::attention_tile t = make_unit_tile(b, hk, ht, i0, slot());
        const int64_t h = hk * plan.group + ht * plan.head_rows;
        const int64_t row0 = (b * d.heads_q + h) * d.len_q + i0;  // rows dim_v apart
        const int64_t begin = chunk * plan.chunk_keys, end = begin + plan.chunk_keys;
        if (begin > t.key_begin) t.key_begin = begin;
        if (end < t.key_end) t.key_end = end;
        if (t.key_end < t.key_begin) t.key_end = t.key_begin;  // nothing here: zeros, lse -inf
        t.sinks = nullptr;  // the merge counts the sink, once
        t.out = const_cast<float *>(part_out_at[chunk]) + row0 * d.dim_v;
        t.out_type = ATTN_DTYPE_F32;  // the chunks' rows stay f32 until the merge
        t.out_ld = d.dim_v;
        t.lse = const_cast<float *>(part_lse_at[chunk]) + row0;
        if (packed_heads)
            set_packed_k(t, pair_scores, packed_heads->get() + (b * d.heads_kv + hk) * packed_head_floats);
        run_tile(*kt, pair_scores, t);
    });

    // ---- merge the key chunks in chunk order (a 16-bit out through an f32 block) ----
    const int64_t merge_rows = 16;
    const int64_t row_blocks = ceil_div(d.len_q, merge_rows);
    const bool f32_out = d.out_type == ATTN_DTYPE_F32;
    std::vector<float> merged(f32_out ? 0 : size_t(slots * merge_rows * d.dim_v));
    parallel_tasks(ex, d.batch * d.heads_q * row_blocks, [&](int64_t task) {
        const int64_t bh = task / row_blocks, i0 = (task % row_blocks) * merge_rows;
        const int64_t b = bh / d.heads_q, h = bh % d.heads_q;
        const int64_t rows = d.len_q - i0 < merge_rows ? d.len_q - i0 : merge_rows;
        const int64_t out_at = b * d.out.batch + h * d.out.head + i0 * d.out.seq;
        float *block = f32_out ? static_cast<float *>(out) + out_at
                               : merged.data() + slot() * merge_rows * d.dim_v;
        kt->attention_merge_rows(parts, bh * d.len_q + i0, rows, d.dim_v,
                                 part_out_at.data(), d.dim_v, part_lse_at.data(), block,
                                 f32_out ? d.out.seq : d.dim_v,
                                 lse_all ? lse_all + bh * d.len_q + i0 : nullptr);
        if (!f32_out)
            for (int64_t r = 0; r < rows; ++r)
                kt->narrow_row(block + r * d.dim_v, d.dim_v,
                               element_at(out, d.out_type, out_at + r * d.out.seq), d.out_type);
    });

    // ---- statistics of merged rows: m = lse, l = 1 ----
    if (stats)
        for (int64_t r = 0; r < plan.rows_total; ++r) {
            stats->max[r] = lse_all[r];
            stats->sum[r] = 1.0f;
        }

    // ---- weights from the merged lse ----
    if (!d.weights) return;
    parallel_tasks(ex, d.batch * d.heads_q * plan.q_tiles, [&](int64_t task) {
        const int64_t bh = task / plan.q_tiles, i0 = (task % plan.q_tiles) * plan.br;
        kernels::attention_tile t = make_tile(bh / d.heads_q, bh % d.heads_q, i0, slot());
        const int64_t row0 = bh * d.len_q + i0;
        t.lse = lse_all + row0;
        weights_tile(*kt, pair_scores, t, d.weights + row0 * d.len_kv, d.len_kv, false);
    });
}

}  // namespace attn::ops
