// The fused attention driver (attn_sdpa on the SIMD path).
//
// The plan (sdpa_plan.hpp) cuts each sequence's query rows into fixed tiles of br rows from
// its first query, and, with split keys (decoding: too few query tiles to keep threads busy),
// its keys into chunks at fixed multiples of a chunk size, all decided from that sequence's
// problem alone. Every output row is therefore computed by the same sequence of
// floating-point operations for any number of threads and whatever else is in the batch;
// only which thread runs a tile varies.
//   without split: a task takes one (sequence, kv head) and a range of its (query head, query
//     tile) pairs; it packs that head's K and V once (as its entry lays them out), in its own slot
//     of scratch, then runs the fused tile kernel on each pair (and writes the weights);
//   with split: a task is one (sequence, head, query tile, key chunk), K packed once per head
//     beforehand (up to 64 MiB; beyond, tile by tile inside the kernel; read in place by a
//     few query rows); the chunks' (out, lse) are then merged in chunk order, the math of
//     attn_merge_f32, and the weights, when asked for, come from the merged lse.
// Decoding a single query with grouped-query attention, the query heads of a group are the
// rows of one tile, so each K and V row is read once for them: up to attention_direct_rows
// heads a tile on the decode entry, or, for groups of heads_as_rows_min_group and more (MLA,
// large GQA groups), the whole group (or as much of it as a tile's br holds) on the tile
// entries, whose products run on bf16 pairs or AMX tiles.
// Which kernel computes a sequence, and how its K and V are packed, belong to the entry of the
// ISA's attention implementation list (kernels/attention_impl.hpp) the plan chose for it: the
// driver packs and runs through that entry, with no layout of its own. Rows are addressed
// through seq_rows (dense or packed by q_start / kv_start). Every buffer is allocated before
// the first output is written.
#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/attention_args.hpp"
#include "kernels/elements.hpp"
#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "ops/workspace.hpp"
#include "core/scores.hpp"
#include "core/formats.hpp"
#include "core/kv_rows.hpp"
#include "core/dropout.hpp"
#include "ops/sdpa_plan.hpp"
#include "ops/sdpa_switch.hpp"
#include "core/seq_rows.hpp"
#include "ref/ref.hpp"

namespace attn::ops {
namespace {

// What a forward call keeps in its context's workspace for the next (workspace.hpp): the plan,
// the bookkeeping and the buffers, reused at their size. Reusing the scratch matters beyond
// the allocation: megabytes allocated afresh on every call make the OS zero every page again,
// a cost comparable to the attention itself at short lengths.
struct forward_state {
    sdpa_plan plan;
    std::vector<kernels::key_visibility> visibility;
    std::vector<uint32_t> row_keys;
    std::vector<float> slot_lse, merged, lse_rows;
    std::vector<int64_t> packed_at, part_ptr0, split_seqs;
    std::vector<const float *> part_outs, part_lses;
    growing_floats scratch, packed_heads, parts;
};

// One forward call: its plan, its scratch (all allocated by the constructor, before any
// output is written), and the work of each task.
class forward_call {
public:
    forward_call(const exec &ex, const kernels::kernel_table &kt, const attn_sdpa_desc &d,
                 const void *q, const void *k, const void *v, void *out, const row_stats *stats,
                 forward_state &state);
    void run();

private:
    kernels::attention_tile make_tile(int64_t seq, int64_t h, int64_t i0, int s) const;
    kernels::attention_tile make_unit_tile(int64_t seq, int64_t hk, int64_t ht, int64_t i0,
                                           int s) const;
    void run_pairs(const sdpa_task &task, int s) const;
    void run_chunk(const sdpa_task &task, int s) const;
    void pack_chunk(const sdpa_task &task) const;
    void merge_block(const merge_task &m, int s) const;
    void finish() const;
    float *part_out(const sequence_plan &s, int64_t c) const {
        return parts_ + s.part_floats0 + c * d_.heads_q * s.queries * d_.dim_v;
    }
    float *part_lse(const sequence_plan &s, int64_t c) const {
        const int64_t parts = s.chunks + (d_.sinks ? 1 : 0), part_rows = d_.heads_q * s.queries;
        return parts_ + s.part_floats0 + parts * part_rows * d_.dim_v + c * part_rows;
    }

    const exec &ex_;
    const kernels::kernel_table &kt_;
    const attn_sdpa_desc &d_;
    const seq_rows rows_;
    const void *q_, *k_, *v_;
    void *out_;
    const row_stats *stats_;
    // the state kept in the workspace, under the names the call uses
    sdpa_plan &plan_;
    std::vector<kernels::key_visibility> &visibility_;  // per planned sequence
    int64_t group_ = 0, slot_floats_ = 0, max_br_ = 0;
    bool dropout_ = false;
    bool kv_beyond_llc_ = false;  // the call's K and V exceed the last-level cache
    std::vector<uint32_t> &row_keys_;
    std::vector<float> &slot_lse_, &merged_;
    float *scratch_ = nullptr;
    float *packed_ = nullptr;  // per slot: a head's packed K, then its padded V
    float *packed_heads_ = nullptr;
    std::vector<int64_t> &packed_at_;  // per sequence: its heads' packed K in packed_heads_
    float *parts_ = nullptr;  // every part row is written by its tile
    // The parts of each split sequence as the merge takes them: from part_ptr0_[seq] on.
    std::vector<const float *> &part_outs_, &part_lses_;
    std::vector<int64_t> &part_ptr0_;
    std::vector<int64_t> &split_seqs_;  // the sequences with split keys
    std::vector<float> &lse_rows_;  // every row's lse in row() order, when d.lse is not that
    float *lse_all_ = nullptr;
};

forward_call::forward_call(const exec &ex, const kernels::kernel_table &kt,
                           const attn_sdpa_desc &d, const void *q, const void *k, const void *v,
                           void *out, const row_stats *stats, forward_state &st)
    : ex_(ex), kt_(kt), d_(d), rows_(d), q_(q), k_(k), v_(v), out_(out), stats_(stats),
      plan_(st.plan), visibility_(st.visibility), row_keys_(st.row_keys),
      slot_lse_(st.slot_lse), merged_(st.merged), packed_at_(st.packed_at),
      part_outs_(st.part_outs), part_lses_(st.part_lses), part_ptr0_(st.part_ptr0),
      split_seqs_(st.split_seqs), lse_rows_(st.lse_rows) {
    for (auto *v : {&packed_at_, &part_ptr0_, &split_seqs_}) v->clear();
    visibility_.clear();
    part_outs_.clear();
    part_lses_.clear();
    const plan_kernels impls{&kt.attention_impls, kt.vector_floats, call_products_of(ex.fpmath, d),
                             heads_as_rows_from(), few_rows_on_decode()};
    const int slots = worker_slots(ex);
    plan_sdpa(d, impls, slots, plan_);
    group_ = d.heads_q / d.heads_kv;
    dropout_ = d.dropout_p > 0.0f;
    if (const kernels::decode_prefetch_policy &pf = kernels::decode_prefetch(); pf.llc_bytes > 0) {
        // K and V rows every sequence's keys may read (a latent V inside K counted twice),
        // taken to stream from memory from 3/4 of the L3 on: the L3 holds more than K and V,
        // and a cache of its whole size (f32, D128, 32 KV heads Lk1024 or 8 Lk4096: 32 MiB)
        // read as streamed (prefetches into the L2) took 0.55-0.67x the time, Zen 4
        double kv_bytes = 0.0;
        for (const sequence_plan &s : plan_.sequences)
            kv_bytes += double(d.heads_kv) * double(s.keys) *
                        double(core::element_offset_bytes(d.kv_type, d.dim_qk + d.dim_v));
        kv_beyond_llc_ = kv_bytes >= 0.75 * double(pf.llc_bytes);
    }
    bool split = false;
    for (const sequence_plan &s : plan_.sequences) {
        visibility_.push_back(rows_.visibility(s.b));
        split |= s.chunks > 1;
    }
    slot_floats_ = (kt.attention_impls.max_scratch_floats(d.dim_qk, d.dim_v) + 15) / 16 * 16;
    max_br_ = kt.attention_impls.max_br();
    row_keys_.resize(dropout_ ? size_t(max_br_ * slots) : 0);
    slot_lse_.resize(size_t(max_br_ * slots));
    scratch_ = st.scratch.get(size_t((slot_floats_ + plan_.max_head_k + plan_.max_head_v) * slots));
    packed_ = scratch_ + slot_floats_ * slots;
    if (plan_.packed_k_floats > 0) packed_heads_ = st.packed_heads.get(size_t(plan_.packed_k_floats));
    int64_t at = 0;
    for (const sequence_plan &s : plan_.sequences) {
        packed_at_.push_back(at);
        if (s.prepacked) at += d.heads_kv * s.panels * s.impl->nr * d.dim_qk;
    }
    // Split keys: each split sequence's chunk rows and lse; with sinks, one more part: the
    // sinks as a key set of their own, with no value (rows of zeros, lse = the head's sink),
    // merged last, so that each row counts its sink once.
    if (plan_.part_floats > 0) parts_ = st.parts.get(size_t(plan_.part_floats));
    for (const sequence_plan &s : plan_.sequences) {
        part_ptr0_.push_back(int64_t(part_outs_.size()));
        if (s.chunks > 1) split_seqs_.push_back(int64_t(part_ptr0_.size()) - 1);
        for (int64_t c = 0; s.chunks > 1 && c < s.chunks + (d.sinks ? 1 : 0); ++c) {
            part_outs_.push_back(part_out(s, c));
            part_lses_.push_back(part_lse(s, c));
        }
    }
    if (d.sinks)
        for (const sequence_plan &s : plan_.sequences)
            if (s.chunks > 1)
                for (int64_t h = 0; h < d.heads_q; ++h)
                    for (int64_t i = 0; i < s.queries; ++i) {
                        part_lse(s, s.chunks)[h * s.queries + i] = d.sinks[h];
                        std::fill_n(part_out(s, s.chunks) + (h * s.queries + i) * d.dim_v,
                                    d.dim_v, 0.0f);
                    }
    // Final lse of every row in row() order, when the caller's is not in that order or is
    // not given but a later phase needs it.
    if (d.lse && !d.q_start) {
        lse_all_ = d.lse;
    } else if (d.lse || split || d.weights || stats) {
        lse_rows_.resize(size_t(rows_.rows_total()));
        lse_all_ = lse_rows_.data();
    }
    if (split && d.out_type != ATTN_DTYPE_F32) merged_.resize(size_t(slots * merge_rows * d.dim_v));
}

// The tile of query rows [i0, i0 + rows) of (sequence, h), keys [key_begin, key_end).
kernels::attention_tile forward_call::make_tile(int64_t seq, int64_t h, int64_t i0, int s) const {
    const sequence_plan &sp = plan_.sequences[size_t(seq)];
    const int64_t b = sp.b, hk = h / group_, br = sp.impl->br, bc = sp.impl->bc;
    kernels::attention_tile t{};
    t.rows = sp.queries - i0 < br ? sp.queries - i0 : br;
    t.q = kernels::element_at(q_, d_.q_type, rows_.q_at(b, h, i0));
    t.q_type = d_.q_type;
    t.q_ld = d_.q.seq;
    t.dim_qk = d_.dim_qk;
    t.dim_v = d_.dim_v;
    t.scale = d_.scale;
    t.k = rows_.k_rows(k_, b, hk);
    t.len_kv = sp.keys;  // rows past kv_len are never read (nor their pages)
    t.kv_beyond_llc = kv_beyond_llc_;
    t.v = rows_.v_rows(v_, b, hk);
    t.out_type = d_.out_type;
    kernels::place_tile_rows(t, d_, visibility_[size_t(seq)], b, h, i0, bc);
    t.scratch = scratch_ + s * slot_floats_;
    if (dropout_) {
        uint32_t *keys = row_keys_.data() + s * max_br_;
        for (int64_t r = 0; r < t.rows; ++r) keys[r] = dropout::row_key(d_.dropout_seed, b, h, i0 + r);
        t.dropout_keys = keys;
        t.dropout_threshold = dropout::threshold(d_.dropout_p);
        t.dropout_keep = dropout::keep_scale(d_.dropout_p);
    }
    return t;
}

// The tile of query tile i0 of the head_rows query heads from head tile ht of kv head hk:
// with grouping, row r is query 0 of head h0 + r, and every row sees the same keys.
kernels::attention_tile forward_call::make_unit_tile(int64_t seq, int64_t hk, int64_t ht,
                                                     int64_t i0, int s) const {
    const sequence_plan &sp = plan_.sequences[size_t(seq)];
    const int64_t h0 = hk * group_ + ht * sp.head_rows;
    kernels::attention_tile t = make_tile(seq, h0, i0, s);
    if (sp.head_rows == 1) return t;
    t.rows = std::min(sp.head_rows, group_ - ht * sp.head_rows);
    t.q_ld = d_.q.head;
    t.mask_ld = d_.mask_strides.head;
    t.rows_are_heads = true;  // every row is query 0: the same keys, its own head's terms
    if (dropout_) {
        uint32_t *keys = row_keys_.data() + s * max_br_;
        for (int64_t r = 0; r < t.rows; ++r)
            keys[r] = dropout::row_key(d_.dropout_seed, sp.b, h0 + r, 0);
    }
    return t;
}

// A task of a sequence without split keys: K panels and padded V rows of its head, once for
// all its pairs (unless its few rows read them in place), then the tile kernel on each pair.
void forward_call::run_pairs(const sdpa_task &task, int s) const {
    const sequence_plan &sp = plan_.sequences[size_t(task.seq)];
    const int64_t b = sp.b, hk = task.hk;
    float *k_packed = packed_ + s * (plan_.max_head_k + plan_.max_head_v);
    float *v_padded = k_packed + plan_.max_head_k;
    const kernels::attention_impl &impl = *sp.impl;
    if (impl.packs()) {  // the sequence's keys only: past kv_len no row (nor page) is read
        impl.pack_k(rows_.k_rows(k_, b, hk), 0, sp.keys, d_.dim_qk, sp.panels, k_packed);
        impl.pack_v(rows_.v_rows(v_, b, hk), 0, sp.keys, d_.dim_v, v_padded, plan_.v_ld);
    }
    const int64_t br = impl.br;
    for (int64_t pair = task.pair_begin; pair < task.pair_end; ++pair) {
        const int64_t ht = pair / sp.q_tiles, h = hk * group_ + ht * sp.head_rows;
        const int64_t i0 = (pair % sp.q_tiles) * br;
        const int64_t row0 = rows_.row(b, h, i0);
        kernels::attention_tile t = make_unit_tile(task.seq, hk, ht, i0, s);
        if (impl.packs()) {
            impl.use_packed_k(t, k_packed);
            impl.use_packed_v(t, v_padded, plan_.v_ld, sp.keys);
        }
        t.out = kernels::element_at(out_, d_.out_type, rows_.out_at(b, h, i0));
        t.out_ld = sp.head_rows > 1 ? d_.out.head : d_.out.seq;
        t.lse = lse_all_ ? lse_all_ + row0 : slot_lse_.data() + s * max_br_;
        if (stats_) {
            t.row_max = stats_->max + row0;
            t.row_sum = stats_->sum + row0;
        }
        impl.forward_tile(t);
        if (d_.weights)  // dense only: row() is the dense [b, h, i] index
            impl.weights_tile(t, d_.weights + row0 * d_.len_kv, d_.len_kv, true);
    }
}

// A task of a split sequence: one tile against one key chunk, into the chunk's part rows.
void forward_call::run_chunk(const sdpa_task &task, int s) const {
    const sequence_plan &sp = plan_.sequences[size_t(task.seq)];
    const int64_t ht = task.pair_begin / sp.q_tiles;
    const int64_t i0 = (task.pair_begin % sp.q_tiles) * sp.impl->br;
    kernels::attention_tile t = make_unit_tile(task.seq, task.hk, ht, i0, s);
    const int64_t h = task.hk * group_ + ht * sp.head_rows;
    const int64_t r0 = h * sp.queries + i0;  // the sequence's part rows, dim_v apart
    const int64_t begin = task.chunk * sp.chunk_keys, end = begin + sp.chunk_keys;
    if (begin > t.key_begin) t.key_begin = begin;
    if (end < t.key_end) t.key_end = end;
    if (t.key_end < t.key_begin) t.key_end = t.key_begin;  // nothing here: zeros, lse -inf
    t.sinks = nullptr;  // the merge counts the sink, once
    t.out = part_out(sp, task.chunk) + r0 * d_.dim_v;
    t.out_type = ATTN_DTYPE_F32;  // the chunks' rows stay f32 until the merge
    t.out_ld = d_.dim_v;
    t.lse = part_lse(sp, task.chunk) + r0;
    if (sp.prepacked)
        sp.impl->use_packed_k(t, packed_heads_ + packed_at_[size_t(task.seq)] +
                                     task.hk * sp.panels * sp.impl->nr * d_.dim_qk);
    sp.impl->forward_tile(t);
}

// Packs key chunk `chunk` of one head of a prepacked split sequence.
void forward_call::pack_chunk(const sdpa_task &task) const {
    const sequence_plan &sp = plan_.sequences[size_t(task.seq)];
    const kernels::attention_impl &impl = *sp.impl;
    const int64_t nr = impl.nr, begin = task.chunk * sp.chunk_keys;
    const int64_t keys = std::min(sp.chunk_keys, sp.keys - begin);
    impl.pack_k(rows_.k_rows(k_, sp.b, task.hk), begin, sp.keys, d_.dim_qk, ceil_div(keys, nr),
                packed_heads_ + packed_at_[size_t(task.seq)] +
                    task.hk * sp.panels * nr * d_.dim_qk +
                    begin / nr * nr * impl.k_floats_per_key(d_.dim_qk));
}

// Merges the key chunks of rows [i0, i0 + rows) of (sequence, h) in chunk order (a 16-bit out
// through an f32 block).
void forward_call::merge_block(const merge_task &m, int s) const {
    const sequence_plan &sp = plan_.sequences[size_t(m.seq)];
    const int64_t parts = sp.chunks + (d_.sinks ? 1 : 0);
    const float *const *out_at = part_outs_.data() + part_ptr0_[size_t(m.seq)];
    const float *const *lse_at = part_lses_.data() + part_ptr0_[size_t(m.seq)];
    const bool f32_out = d_.out_type == ATTN_DTYPE_F32;
    const int64_t at = rows_.out_at(sp.b, m.h, m.i0);
    float *block = f32_out ? static_cast<float *>(out_) + at
                           : merged_.data() + s * merge_rows * d_.dim_v;
    kt_.attention_merge_rows(parts, m.h * sp.queries + m.i0, m.rows, d_.dim_v, out_at, d_.dim_v,
                             lse_at, block, f32_out ? d_.out.seq : d_.dim_v,
                             lse_all_ ? lse_all_ + rows_.row(sp.b, m.h, m.i0) : nullptr);
    if (!f32_out)
        for (int64_t r = 0; r < m.rows; ++r)
            kt_.narrow_row(block + r * d_.dim_v, d_.dim_v,
                           kernels::element_at(out_, d_.out_type, at + r * d_.out.seq),
                           d_.out_type);
}

// After the tiles and the merge: statistics of merged rows, the caller's lse in its packed
// layout, the weights of split sequences from their merged lse.
void forward_call::finish() const {
    for (const sequence_plan &sp : plan_.sequences) {
        if (stats_ && sp.chunks > 1)  // merged rows: m = lse, l = 1
            for (int64_t h = 0; h < d_.heads_q; ++h)
                for (int64_t i = 0; i < sp.queries; ++i) {
                    const int64_t r = rows_.row(sp.b, h, i);
                    stats_->max[r] = lse_all_[r];
                    stats_->sum[r] = 1.0f;
                }
        if (d_.lse && d_.q_start)  // [total_q, heads_q]
            for (int64_t h = 0; h < d_.heads_q; ++h)
                for (int64_t i = 0; i < sp.queries; ++i)
                    d_.lse[rows_.lse_at(sp.b, h, i)] = lse_all_[rows_.row(sp.b, h, i)];
    }
    if (!d_.weights) return;  // dense only (no q_start, no kv_start)
    // dense: every sequence has len_q rows, so all take the same entry
    const std::vector<int64_t> &split = split_seqs_;
    if (split.empty()) return;
    const kernels::attention_impl &impl = *plan_.sequences[size_t(split[0])].impl;
    const int64_t q_tiles = ceil_div(d_.len_q, impl.br);
    parallel_tasks(ex_, int64_t(split.size()) * d_.heads_q * q_tiles, [&](int64_t task) {
        const int64_t seq = split[size_t(task / (d_.heads_q * q_tiles))];
        const int64_t h = (task / q_tiles) % d_.heads_q, i0 = (task % q_tiles) * impl.br;
        kernels::attention_tile t = make_tile(seq, h, i0, worker_slot(ex_));
        const int64_t row0 = rows_.row(plan_.sequences[size_t(seq)].b, h, i0);
        t.lse = lse_all_ + row0;
        impl.weights_tile(t, d_.weights + row0 * d_.len_kv, d_.len_kv, false);
    });
}

void forward_call::run() {
    parallel_tasks(ex_, int64_t(plan_.pack_tasks.size()),
                   [&](int64_t i) { pack_chunk(plan_.pack_tasks[size_t(i)]); });
    parallel_tasks(ex_, int64_t(plan_.tasks.size()), [&](int64_t i) {
        const sdpa_task &task = plan_.tasks[size_t(i)];
        if (plan_.sequences[size_t(task.seq)].chunks > 1)
            run_chunk(task, worker_slot(ex_));
        else
            run_pairs(task, worker_slot(ex_));
    });
    parallel_tasks(ex_, int64_t(plan_.merges.size()),
                   [&](int64_t i) { merge_block(plan_.merges[size_t(i)], worker_slot(ex_)); });
    finish();
}

std::atomic<int64_t> &heads_as_rows_group() {
    static std::atomic<int64_t> from{heads_as_rows_min_group};
    return from;
}

std::atomic<bool> &few_rows_switch() {
    static std::atomic<bool> on{true};
    return on;
}

}  // namespace

void set_heads_as_rows_from(int64_t min_group) { heads_as_rows_group().store(min_group); }
int64_t heads_as_rows_from() { return heads_as_rows_group().load(); }
void set_few_rows_on_decode(bool on) { few_rows_switch().store(on); }
bool few_rows_on_decode() { return few_rows_switch().load(); }

void sdpa(const exec &ex, const attn_sdpa_desc &d, const void *q, const void *k, const void *v,
          void *out, const row_stats *stats) {
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (!kt) {
        ref::sdpa_typed(d, q, k, v, out);
        return;
    }
    const workspace_pool::lease ws = take_workspace(ex);
    forward_call call(ex, *kt, d, q, k, v, out, stats, (*ws).state<forward_state>());
    call.run();
}

}  // namespace attn::ops
