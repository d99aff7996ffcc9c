// The plan of a forward attention call (sdpa_plan.hpp).
#include "ops/sdpa_plan.hpp"

#include <algorithm>
#include <queue>

#include "kernels/attention_args.hpp"
#include "core/formats.hpp"
#include "core/seq_rows.hpp"
#include "ops/ops.hpp"

namespace attn::ops {
namespace {

// Tasks of non-split pairs are cut to about 1 / (tasks_per_slot x slots) of the call's work:
// enough for the threads to even out, few enough that packing a head per task stays small.
constexpr int tasks_per_slot = 8;

// The tiles, chunks and kernels of sequence b: its own problem only (see the header).
sequence_plan plan_sequence(const core::seq_rows &rows, int64_t b, const plan_kernels &k) {
    const attn_sdpa_desc &d = rows.desc();
    sequence_plan s{};
    s.b = b;
    s.queries = rows.queries(b);
    s.keys = rows.visible_keys(b);
    const int64_t group = d.heads_q / d.heads_kv;
    s.heads_as_rows = s.queries == 1 && k.heads_as_rows_from > 0 &&
                      group > kernels::attention_direct_rows && group >= k.heads_as_rows_from;
    const bool packing = s.heads_as_rows ||
                         (!k.few_rows_on_decode && s.queries > kernels::attention_direct_rows);
    s.impl = packing ? &k.impls->choose_packing(s.heads_as_rows ? group : s.queries, k.products)
                     : &k.impls->choose(s.queries, k.products, group, d.kv_type);
    const int64_t br = s.impl->br, bc = s.impl->bc;
    s.q_tiles = ceil_div(s.queries, br);
    if (s.heads_as_rows) {  // the group in as few tiles as br allows, of even size
        s.head_tiles = ceil_div(group, br);
        s.head_rows = ceil_div(group, s.head_tiles);
    } else {
        s.head_rows = s.queries == 1 && group > 1 ? std::min(group, kernels::attention_direct_rows) : 1;
    }
    s.head_tiles = ceil_div(group, s.head_rows);
    s.panels = ceil_div(s.keys, s.impl->nr);
    // Split keys: into about as many chunks as give the sequence split_below_tiles tiles, at
    // multiples of a chunk of the entry's block times a power of two (the smallest that makes
    // no more chunks than that): finer chunks than the threads need cost each a tile's setup
    // and a part to merge (H32 decoding over 4096 keys: 8 chunks of 512 instead of 2 of
    // 2048 was 1.17x slower on one thread).
    const int64_t chunk = ceil_div(split_chunk_min_keys, bc) * bc;
    const int64_t tiles = d.heads_kv * s.head_tiles * s.q_tiles;
    s.chunks = 1;
    s.chunk_keys = std::max<int64_t>(ceil_div(s.keys, bc) * bc, bc);
    if (tiles < split_below_tiles && s.keys >= 2 * chunk) {
        const int64_t want = ceil_div(split_below_tiles, tiles);
        int64_t size = chunk;
        while (ceil_div(s.keys, size) > want) size *= 2;
        if (ceil_div(s.keys, size) > 1) {
            s.chunk_keys = size;
            s.chunks = ceil_div(s.keys, size);
        }
    }
    // Split with whole query tiles: the head's K packed once, shared by all its tiles, when
    // that copy is not too big (else each tile packs its own keys). Heads as rows: one or two
    // tiles a chunk share little, and packing K and V of a key block together reads the rows
    // (for MLA the same latent rows) from memory once.
    s.prepacked = s.chunks > 1 && s.impl->packs() && !s.heads_as_rows &&
                  d.heads_kv * s.panels * s.impl->nr * d.dim_qk <= max_packed_heads_floats;
    return s;
}

// Predicted work of rows query rows against keys keys: the products of S and P V, plus the
// reading of each K and V row (about two rows' worth of products).
double tile_cost(int64_t rows, int64_t keys, const attn_sdpa_desc &d) {
    return double(rows + 2) * double(keys) * double(d.dim_qk + d.dim_v);
}

// Visible keys [lo, hi) of the rows of pair `pair` of sequence s, within chunk c.
void pair_keys(const sequence_plan &s, const kernels::key_visibility &vis, int64_t group,
               int64_t pair, int64_t c, int64_t &lo, int64_t &hi, int64_t &rows) {
    const int64_t br = s.impl->br, bc = s.impl->bc;
    const int64_t ht = pair / s.q_tiles, i0 = (pair % s.q_tiles) * br;
    rows = s.head_rows > 1 ? std::min(s.head_rows, group - ht * s.head_rows)
                           : std::min(br, s.queries - i0);
    const int64_t last = s.head_rows > 1 ? i0 : i0 + rows - 1;
    lo = vis.row(i0).lo / bc * bc;
    hi = std::max(vis.row(last).hi, lo);
    lo = std::max(lo, c * s.chunk_keys);
    hi = std::min(hi, (c + 1) * s.chunk_keys);
    if (hi < lo) hi = lo;
}

void add_tasks(sdpa_plan &plan, const core::seq_rows &rows, int slots) {
    const attn_sdpa_desc &d = rows.desc();
    // Every (pair, chunk) of every sequence as a cost first: the target size of a task of
    // non-split pairs is a share of the whole call (tasks_per_slot a slot), so long sequences are cut
    // into several ranges and short ones stay whole.
    double total = 0.0;
    plan.pair_costs.clear();
    plan.pair_cost0.clear();
    for (size_t si = 0; si < plan.sequences.size(); ++si) {
        const sequence_plan &s = plan.sequences[si];
        const kernels::key_visibility vis = rows.visibility(s.b);
        const int64_t pairs = s.head_tiles * s.q_tiles;
        plan.pair_cost0.push_back(plan.pair_costs.size());
        for (int64_t p = 0; p < pairs; ++p)
            for (int64_t c = 0; c < s.chunks; ++c) {
                int64_t lo, hi, r;
                pair_keys(s, vis, d.heads_q / d.heads_kv, p, c, lo, hi, r);
                plan.pair_costs.push_back(tile_cost(r, hi - lo, d));
                total += plan.pair_costs.back() * double(d.heads_kv);
            }
    }
    auto pair_cost = [&](size_t si, int64_t i) { return plan.pair_costs[plan.pair_cost0[si] + size_t(i)]; };
    const double target = total / double(tasks_per_slot * std::max(slots, 1));
    for (size_t si = 0; si < plan.sequences.size(); ++si) {
        const sequence_plan &s = plan.sequences[si];
        const int64_t pairs = s.head_tiles * s.q_tiles;
        const double pack = !s.impl->packs() || s.chunks > 1
                                ? 0.0
                                : double(s.keys) * double(d.dim_qk + d.dim_v);
        for (int64_t hk = 0; hk < d.heads_kv; ++hk) {
            if (s.chunks > 1) {  // one task per (pair, chunk)
                for (int64_t p = 0; p < pairs; ++p)
                    for (int64_t c = 0; c < s.chunks; ++c)
                        plan.tasks.push_back(sdpa_task{int64_t(si), hk, p, p + 1, c,
                                                       pair_cost(si, p * s.chunks + c)});
                continue;
            }
            int64_t first = 0;
            double cost = pack;
            for (int64_t p = 0; p < pairs; ++p) {
                cost += pair_cost(si, p);
                if (cost >= target || p + 1 == pairs) {
                    plan.tasks.push_back(sdpa_task{int64_t(si), hk, first, p + 1, 0, cost});
                    first = p + 1;
                    cost = pack;
                }
            }
        }
    }
    // heaviest first; equal costs in the order they were made, which is the order of (seq, hk,
    // pair_begin, chunk) (std::sort with that tie-break: stable_sort would allocate a buffer)
    std::sort(plan.tasks.begin(), plan.tasks.end(), [](const sdpa_task &a, const sdpa_task &b) {
        if (a.cost != b.cost) return a.cost > b.cost;
        if (a.seq != b.seq) return a.seq < b.seq;
        if (a.hk != b.hk) return a.hk < b.hk;
        if (a.pair_begin != b.pair_begin) return a.pair_begin < b.pair_begin;
        return a.chunk < b.chunk;
    });
}

}  // namespace

// The products this call's types and fpmath allow (attn.h's numerics). bf16 pairs of the
// stored values: q and K stored in bf16, whose products are exact in f32, or
// ATTN_FPMATH_BF16. bf16 pairs of a quantized cache's codes (every code of every quantized
// type is a bf16 value): with one scale a row and no zero points, so that a score is the
// row's scale times the exact products of q with the codes summed in f32, and P times V's
// row scale is what is rounded to bf16 — for bf16 queries with a bf16 output (whose units in
// the last place cover P's rounding, as the tolerance rule asks), or under ATTN_FPMATH_BF16.
kernels::call_products call_products_of(attn_fpmath fpmath, const attn_sdpa_desc &d) {
    const bool fpmath_bf16 = fpmath == ATTN_FPMATH_BF16;
    const bool row_scales = (d.k_group == 0 || d.k_group == d.dim_qk) &&
                            (d.v_group == 0 || d.v_group == d.dim_v) && !d.k_zero && !d.v_zero;
    const bool codes = core::is_quantized(d.kv_type) && row_scales &&
                       (fpmath_bf16 || (d.q_type == ATTN_DTYPE_BF16 && d.out_type == ATTN_DTYPE_BF16));
    return {fpmath_bf16 || (d.q_type == ATTN_DTYPE_BF16 && d.kv_type == ATTN_DTYPE_BF16), codes};
}

void plan_sdpa(const attn_sdpa_desc &d, const plan_kernels &k, int slots, sdpa_plan &plan) {
    const core::seq_rows rows(d);
    plan.sequences.clear();
    plan.pack_tasks.clear();
    plan.tasks.clear();
    plan.merges.clear();
    plan.part_floats = 0;
    plan.max_head_k = plan.max_head_v = 0;
    plan.packed_k_floats = 0;
    // Rows an even number of 64-byte lines apart share half the L1 sets, and a bc x 64-float
    // block of V no longer fits; one extra line spreads them over all sets.
    plan.v_ld = ceil_div(d.dim_v, k.vector_floats) * k.vector_floats;
    if ((plan.v_ld / 16) % 2 == 0) plan.v_ld = ceil_div(plan.v_ld, 16) * 16 + 16;
    for (int64_t b = 0; b < d.batch; ++b) {
        if (rows.queries(b) == 0) continue;  // no queries: skipped
        sequence_plan s = plan_sequence(rows, b, k);
        if (s.chunks > 1) {
            const int64_t parts = s.chunks + (d.sinks ? 1 : 0);
            const int64_t part_rows = d.heads_q * s.queries;
            s.part_floats0 = plan.part_floats;
            plan.part_floats += parts * part_rows * (d.dim_v + 1);
            for (int64_t h = 0; h < d.heads_q; ++h)
                for (int64_t i0 = 0; i0 < s.queries; i0 += merge_rows) {
                    const int64_t n = std::min(merge_rows, s.queries - i0);
                    plan.merges.push_back(merge_task{int64_t(plan.sequences.size()), h, i0, n,
                                                     double(n * parts * (d.dim_v + 1))});
                }
            if (s.prepacked) {
                const int64_t si = int64_t(plan.sequences.size());
                for (int64_t hk = 0; hk < d.heads_kv; ++hk)
                    for (int64_t c = 0; c < s.chunks; ++c)
                        plan.pack_tasks.push_back(sdpa_task{
                            si, hk, 0, 0, c,
                            double(std::min(s.chunk_keys, s.keys - c * s.chunk_keys) * d.dim_qk)});
                plan.packed_k_floats += d.heads_kv * s.panels * s.impl->nr * d.dim_qk;
            }
        } else if (s.impl->packs()) {
            plan.max_head_k = std::max(plan.max_head_k, s.panels * s.impl->nr * d.dim_qk);
            plan.max_head_v = std::max(plan.max_head_v, s.keys * plan.v_ld);
        }
        plan.sequences.push_back(s);
    }
    add_tasks(plan, rows, slots);
}

namespace {

// Greedy list scheduling of costs in order onto p threads: the makespan.
template <class Task>
double makespan(const std::vector<Task> &tasks, int p) {
    std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
    for (int t = 0; t < p; ++t) free_at.push(0.0);
    double end = 0.0;
    for (const Task &task : tasks) {
        const double start = free_at.top();
        free_at.pop();
        free_at.push(start + task.cost);
        end = std::max(end, start + task.cost);
    }
    return end;
}

template <class Task>
double work(const std::vector<Task> &tasks) {
    double w = 0.0;
    for (const Task &t : tasks) w += t.cost;
    return w;
}

}  // namespace

double plan_efficiency(const sdpa_plan &plan, int p) {
    const double total = work(plan.pack_tasks) + work(plan.tasks) + work(plan.merges);
    const double span = makespan(plan.pack_tasks, p) + makespan(plan.tasks, p) +
                        makespan(plan.merges, p);
    return span > 0.0 ? total / (double(p) * span) : 1.0;
}

}  // namespace attn::ops
