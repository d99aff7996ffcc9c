// The plan of a forward attention call: how each sequence is cut into tiles and key chunks,
// which implementation computes it, and the list of tasks the driver (sdpa.cpp) runs. A function of
// the desc, the kernels' blocks and the number of worker slots, with no side effects, so that
// a tool can print it and tests can check it.
//
// Batch invariance: everything that changes the arithmetic of a row is decided per sequence,
// from that sequence's problem alone (its query count n_b, its visible keys, the heads, the
// options and the kernels): the query tiles (br rows from the sequence's first query), whether
// its keys are split and where (chunks of a power-of-two multiple of split_chunk_min_keys on
// its own key axis), whether K is packed, which entry of the list of attention implementations
// computes it. Only how tiles are grouped into tasks looks at the whole call and the thread
// count, and a task computes each of its tiles the same way whatever its neighbours.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/attn.h"
#include "kernels/attention_impl.hpp"

namespace attn::ops {

// Decoding one query with at least this many query heads a KV head (MLA's 16-128 heads over
// one latent head, GQA's large groups): the group's heads are the rows of the tiles of the
// entry that takes that many rows (bf16 pairs or AMX when bf16 products are allowed), so K and
// V are packed once a head tile and the products run on the tile kernels instead of the decode
// entry's dot products. Smaller groups stay with the decode entry (memory-bound: K and V
// read in place).
inline constexpr int64_t heads_as_rows_min_group = 16;

// What the plan needs of the kernels: the ISA's attention implementations (best first), its
// vector width, and the products this call's types and fpmath allow;
// heads_as_rows_from: the smallest group planned with heads as tile rows (0: none; other than
// heads_as_rows_min_group only for comparisons, ops/sdpa_switch.hpp); few_rows_on_decode:
// whether sequences of more rows than a decode tile holds may take the decode entry (false
// only for comparisons).
struct plan_kernels {
    const kernels::attention_impl_list *impls;
    int64_t vector_floats;
    kernels::call_products products;
    int64_t heads_as_rows_from = heads_as_rows_min_group;
    bool few_rows_on_decode = true;
};

// Split keys: a sequence whose query tiles give fewer than split_below_tiles tiles over its
// kv heads, with at least 2 minimal chunks' worth of visible keys, is cut at multiples of a
// chunk: split_chunk_min_keys (rounded to the entry's block) times the smallest power of two
// that makes at most ceil(split_below_tiles / tiles) chunks.
inline constexpr int64_t split_below_tiles = 64;
inline constexpr int64_t split_chunk_min_keys = 512;
// Largest copy of one sequence's K (floats, all heads) packed up front for split keys.
inline constexpr int64_t max_packed_heads_floats = int64_t(16) << 20;

struct sequence_plan {
    int64_t b;                // the sequence
    int64_t queries, keys;    // n_b, and its visible keys min(K_b, kv_len[b])
    // Decoding one query with grouped KV heads: a tile holds head_rows query heads of one
    // group (its rows), so K and V are read once for them; head_tiles such tiles a group (the
    // last may hold fewer). heads_as_rows: a group of heads_as_rows_min_group or more, on a
    // tile entry, head_rows = group / head_tiles rounded up (<= its br).
    int64_t head_rows, head_tiles, q_tiles;
    bool heads_as_rows;
    int64_t chunks, chunk_keys;  // chunks == 1: no split (chunk_keys covers every key)
    int64_t panels;              // K panels of the entry's nr keys covering the visible keys
    // The implementation that computes it: the first of the list that takes it; its tiles
    // (br, bc, nr) cut the sequence. Entries that pack nothing read K and V in place.
    const kernels::attention_impl *impl;
    bool prepacked;              // split: K packed once per head before the tiles run (not
                                 // with heads_as_rows: each tile packs its key block's K and
                                 // then V from the same rows, still in cache)
    int64_t part_floats0;        // split: offset of its chunk parts in the parts buffer
};

// One task: tiles of sequence `seq` (index into sequences), kv head hk, its (head tile,
// query tile) pairs [pair_begin, pair_end) (pair = head_tile * q_tiles + query_tile), against
// key chunk `chunk`. Tasks of non-split sequences pack the head's K and V once for all their
// pairs (unless their entry packs nothing).
struct sdpa_task {
    int64_t seq, hk, pair_begin, pair_end, chunk;
    double cost;  // predicted work, in multiply-adds (plus packing)
};

// A phase after the tiles: the merge of each split sequence's chunks, per (sequence, query
// head, block of merge_rows rows).
struct merge_task {
    int64_t seq, h, i0, rows;
    double cost;
};

struct sdpa_plan {
    std::vector<sequence_plan> sequences;
    std::vector<sdpa_task> pack_tasks;  // split + prepacked: (seq, hk, chunk), K only
    std::vector<sdpa_task> tasks;       // the tiles, heaviest first
    std::vector<merge_task> merges;
    std::vector<double> pair_costs;      // while planning: every (pair, chunk)'s cost, by sequence
    std::vector<size_t> pair_cost0;      // where each sequence's costs start
    int64_t part_floats = 0;             // the parts buffer: out rows then lse, every split seq
    int64_t max_head_k = 0, max_head_v = 0;  // per-slot packed K and padded V of a task
    int64_t v_ld = 0;                    // padded V row
    int64_t packed_k_floats = 0;         // all prepacked K
};

inline constexpr int64_t merge_rows = 16;

// The plan of attn_sdpa for desc d (validated) on `slots` worker slots.
// Into `plan`, whose vectors are cleared and refilled (their capacity kept: a driver planning
// call after call allocates nothing once they are large enough).
// The products a call with this fpmath may form (the list's entries that need others are
// skipped): bf16 pairs of the stored values, of a quantized cache's codes (sdpa_plan.cpp).
kernels::call_products call_products_of(attn_fpmath fpmath, const attn_sdpa_desc &d);

void plan_sdpa(const attn_sdpa_desc &d, const plan_kernels &k, int slots, sdpa_plan &plan);
inline sdpa_plan plan_sdpa(const attn_sdpa_desc &d, const plan_kernels &k, int slots) {
    sdpa_plan plan;
    plan_sdpa(d, k, slots, plan);
    return plan;
}

// The predicted parallel efficiency on p threads, phase by phase (pack, tiles, merge; each
// scheduled greedily in task order onto the earliest free thread): total work / (p x the sum
// of the phases' makespans).
double plan_efficiency(const sdpa_plan &plan, int p);

}  // namespace attn::ops
