// The fused backward of scaled dot-product attention on the SIMD path (FlashAttention-2's
// algorithm; the tile kernel is kernels/attention_backward.hpp), for every score feature and
// for packed sequences (q_start, kv_start): the scores and the keys each query row sees come
// from the one definition the forward follows (core/scores.hpp), and every row of a sequence
// is addressed through core/seq_rows.hpp (each sequence's n_b queries, K_b keys, alignment).
//   1. per query row (sdpa_backward_rows.cpp): the forward's statistics m, 1/l (given, from
//      lse, or recomputed by the forward kernel with its output discarded; with a sink, l
//      includes it), delta = rowsum(dO o O), the dropout key, and the sink's gradient
//      -e^(sink - m) / l delta;
//   2. tasks over (sequence, kv head, key chunk): each key tile of the chunk, on the
//      sequence's own keys, keeps its dK, dV in the scratch while the query rows that see any
//      of its keys (window, causal limit, kv_len) of every query head of the group stream past,
//      in head order (GQA sums in a fixed order), and writes them once; dS K is accumulated
//      into the chunk's dQ (chunk 0: dq itself; others: partials), key tile after key tile;
//   3. dq = scale (dq + partial_1 + ... ), in chunk order; rows without gradient are zeros;
//      dsinks[h] = the rows' sink gradients summed over (sequence, row) in order, in double.
// The chunks depend on the shape only (a packed sequence's on its own counts only), and every
// sum has a fixed order: the gradients are the same bits for every thread count, and a packed
// sequence's are those of the same sequence alone. S and dP exist only as br x bk tiles: memory
// beyond the inputs and outputs is O(rows) plus the partials, which are capped (for packed
// sequences, each sequence's; none when the heads alone give enough tasks). Every buffer is
// allocated before an output is written. The tensors are read as stored: f32, or, for the
// kernel with bf16 products (pairs or AMX tiles, dense batches), 16-bit, dQ then accumulated
// in f32 and each gradient rounded once.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/attention_args.hpp"
#include "kernels/kernels.hpp"
#include "ops/backward_switch.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "ops/sdpa_backward_rows.hpp"
#include "ops/workspace.hpp"
#include "core/scores.hpp"
#include "core/kv_rows.hpp"
#include "core/dropout.hpp"
#include "ref/ref.hpp"

namespace attn::ops {
namespace {

// Key chunks per head are added until (kv heads x chunks) reaches this many tasks (times the
// batch for a dense batch; a packed sequence on its own), while the dQ partials they need stay
// within max_partial_floats (32 MB).
constexpr int64_t target_tasks = 8;
constexpr int64_t max_partial_floats = int64_t(8) << 20;

// The tile kernel and its scratch: the f32 one, or the one with bf16 products (pairs).
struct backward_kernel {
    void (*tile)(const kernels::attention_backward_tile &);
    int64_t (*scratch_floats)(int64_t dim_qk, int64_t dim_v);
    bool pairs;
    decltype(kernels::kernel_table::attention_backward_pack_t_bf16) pack_t;  // pairs only
};

std::atomic<int> &composed_flag() {
    static std::atomic<int> flag{[] {
        const char *e = std::getenv("ATTN_BACKWARD_COMPOSED");
        return e && e[0] == '1' ? 1 : 0;
    }()};
    return flag;
}

// The query rows [begin, end) of a head that see any of the keys [key0, key_end): a row's
// visible keys move right with the row, so they are found by two binary searches.
struct row_span {
    int64_t begin, end;
};
row_span rows_seeing(const kernels::key_visibility &seen, int64_t len_q, int64_t key0,
                     int64_t key_end) {
    auto first_row = [&](auto past) {  // the first row for which past(row) holds, or len_q
        int64_t lo = 0, hi = len_q;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (past(seen.row(mid))) hi = mid;
            else lo = mid + 1;
        }
        return lo;
    };
    const int64_t begin = first_row([&](kernels::key_range r) { return r.hi > key0; });
    const int64_t end = first_row([&](kernels::key_range r) { return r.lo >= key_end; });
    return {begin, end > begin ? end : begin};
}

// How the key tiles of a sequence are cut into chunks, each chunk a task per kv head with
// its own dQ (chunk 0: dq itself; others: partials).
struct chunking {
    int64_t key_tiles, chunk_tiles, chunks;
};

// Chunks are added until heads x chunks reaches target_tasks, while the (chunks - 1) dQ
// partials of dq_floats each stay within max_partial_floats (the whole dense batch's, or one
// packed sequence's).
chunking chunks_for(int64_t heads, int64_t key_tiles, int64_t dq_floats) {
    if (key_tiles == 0) return {0, 1, 0};
    int64_t chunks = std::min(key_tiles, ceil_div(target_tasks, heads));
    if (chunks > 1 && (chunks - 1) * dq_floats > max_partial_floats)
        chunks = std::max<int64_t>(1, 1 + max_partial_floats / dq_floats);
    const int64_t chunk_tiles = ceil_div(key_tiles, chunks);
    return {key_tiles, chunk_tiles, ceil_div(key_tiles, chunk_tiles)};
}

// Each sequence's chunks. A dense batch is cut as one problem (every sequence alike, from the
// whole batch's heads and dq); packed sequences each from their own counts alone, so that a
// sequence's gradients are the same bits whatever else is in the batch.
std::vector<chunking> sequence_chunks(const seq_rows &seqs, int64_t bk) {
    const attn_sdpa_desc &d = seqs.desc();
    std::vector<chunking> out(size_t(d.batch));
    const bool packed = d.q_start || d.kv_start;
    const chunking dense = chunks_for(d.batch * d.heads_kv, ceil_div(d.len_kv, bk),
                                      seqs.rows_total() * d.dim_qk);
    for (int64_t b = 0; b < d.batch; ++b)
        out[size_t(b)] = !packed ? dense
                                 : chunks_for(d.heads_kv, ceil_div(seqs.keys(b), bk),
                                              seqs.queries(b) * d.heads_q * d.dim_qk);
    return out;
}

// Step 2's task: chunk `chunk` of the key tiles of kv head hk of sequence b.
struct key_task {
    int64_t b, hk, chunk;
};

// The tasks, the costliest sequences (queries x keys) first so that the long ones start
// early; the order changes which thread runs a task, never a bit.
std::vector<key_task> key_tasks(const seq_rows &seqs, const std::vector<chunking> &cuts) {
    const attn_sdpa_desc &d = seqs.desc();
    std::vector<int64_t> order(size_t(d.batch));
    for (int64_t b = 0; b < d.batch; ++b) order[size_t(b)] = b;
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        return seqs.queries(x) * seqs.keys(x) > seqs.queries(y) * seqs.keys(y);
    });
    std::vector<key_task> tasks;
    for (int64_t b : order)
        for (int64_t hk = 0; hk < d.heads_kv; ++hk)
            for (int64_t c = 0; c < cuts[size_t(b)].chunks; ++c) tasks.push_back({b, hk, c});
    return tasks;
}

// What step 2's tasks share.
struct key_chunks {
    const seq_rows &seqs;
    const kernels::kernel_table &kt;
    const backward_kernel &kernel;
    const backward_tensors &io;
    const row_terms *rows;
    const std::vector<chunking> &cuts;
    const dq_partials &parts;
};

// The tile fields every key tile of sequence b shares.
kernels::attention_backward_tile key_tile_of(const key_chunks &plan, int64_t b, float *scratch) {
    const attn_sdpa_desc &d = plan.seqs.desc();
    const bool dropout = d.dropout_p > 0.0f;
    kernels::attention_backward_tile t{};
    t.q_type = d.q_type;
    t.kv_type = d.kv_type;
    t.out_type = d.out_type;
    t.dim_qk = d.dim_qk;
    t.dim_v = d.dim_v;
    t.scale = d.scale;
    t.k_ld = d.k.seq;
    t.v_ld = d.v.seq;
    t.dk_ld = d.k.seq;
    t.dv_ld = d.v.seq;
    t.q_ld = d.q.seq;
    t.dout_ld = d.out.seq;
    t.visibility = plan.seqs.visibility(b);
    t.softcap = d.softcap;
    t.mask_ld = d.mask_strides.seq;
    t.dropout_threshold = dropout ? dropout::threshold(d.dropout_p) : 0;
    t.dropout_keep = dropout ? dropout::keep_scale(d.dropout_p) : 1.0f;
    t.scratch = scratch;
    return t;
}

// The fields of query head h of sequence b for chunk `chunk` of its keys.
void head_of(const key_chunks &plan, int64_t b, int64_t h, int64_t chunk,
             kernels::attention_backward_tile &t) {
    const seq_rows &seqs = plan.seqs;
    const attn_sdpa_desc &d = seqs.desc();
    const backward_tensors &io = plan.io;
    const int64_t row0 = seqs.row(b, h, 0), n_b = seqs.queries(b);  // (b, h)'s rows: consecutive
    const int64_t bh = b * d.heads_q + h;  // the transposed rows: dense batches only
    t.q = element_at(io.q, d.q_type, seqs.q_at(b, h, 0));
    t.q_t = io.q_t ? io.q_t + bh * io.q_t_head : nullptr;
    t.dout_t = io.dout_t ? io.dout_t + bh * io.dout_t_head : nullptr;
    t.dout = element_at(io.dout, d.out_type, seqs.out_at(b, h, 0));
    if (chunk == 0) {
        t.dq = io.dq_acc ? io.dq_acc + row0 * d.dim_qk : static_cast<float *>(io.dq) + seqs.q_at(b, h, 0);
        t.dq_ld = io.dq_acc ? d.dim_qk : d.q.seq;
    } else {
        t.dq = plan.parts.partials + plan.parts.first[size_t(b)] +
               ((chunk - 1) * d.heads_q + h) * n_b * d.dim_qk;
        t.dq_ld = d.dim_qk;
    }
    t.row_max = plan.rows->max.data() + row0;
    t.row_inv_sum = plan.rows->inv_sum.data() + row0;
    t.row_delta = plan.rows->delta.data() + row0;
    t.dropout_keys = plan.rows->dropout_keys.empty() ? nullptr : plan.rows->dropout_keys.data() + row0;
    t.mask = d.mask ? d.mask + b * d.mask_strides.batch + h * d.mask_strides.head : nullptr;
    t.alibi_slope = d.alibi_slopes ? d.alibi_slopes + h : nullptr;
}

void run_key_chunk(const key_chunks &plan, const key_task &task, float *scratch) {
    const seq_rows &seqs = plan.seqs;
    const attn_sdpa_desc &d = seqs.desc();
    const backward_tensors &io = plan.io;
    const int64_t bk = plan.kt.attention_backward_bk, group = d.heads_q / d.heads_kv;
    const int64_t b = task.b, hk = task.hk, chunk = task.chunk;
    const int64_t keys_b = seqs.keys(b), visible_b = seqs.visible_keys(b), n_b = seqs.queries(b);
    const chunking &cut = plan.cuts[size_t(b)];
    kernels::attention_backward_tile t = key_tile_of(plan, b, scratch);
    const int64_t tile_end = std::min(cut.key_tiles, (chunk + 1) * cut.chunk_tiles);
    for (int64_t kt_i = chunk * cut.chunk_tiles; kt_i < tile_end; ++kt_i) {
        const int64_t key0 = kt_i * bk;
        const int64_t tile_keys = std::min(bk, keys_b - key0);
        t.key0 = key0;
        t.keys = std::max<int64_t>(0, std::min(tile_keys, visible_b - key0));
        t.k = element_at(io.k, d.kv_type, seqs.k_at(b, hk, key0));
        t.v = element_at(io.v, d.kv_type, seqs.v_at(b, hk, key0));
        t.dk = element_at(io.dk, d.kv_type, seqs.k_at(b, hk, key0));
        t.dv = element_at(io.dv, d.kv_type, seqs.v_at(b, hk, key0));
        // keys past the sequence's kv_len get no gradient; nor do keys no query row sees
        const row_span seen = rows_seeing(t.visibility, n_b, key0, key0 + t.keys);
        if (seen.end == seen.begin) t.keys = 0;
        for (int64_t c = t.keys; c < tile_keys; ++c) {
            const size_t bytes = attn_dtype_size(d.kv_type);
            std::memset(element_at(t.dk, d.kv_type, c * d.k.seq), 0, bytes * size_t(d.dim_qk));
            std::memset(element_at(t.dv, d.kv_type, c * d.v.seq), 0, bytes * size_t(d.dim_v));
        }
        if (t.keys == 0) continue;
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
            t.first_head = h == hk * group;
            t.last_head = h == (hk + 1) * group - 1;
            head_of(plan, b, h, chunk, t);
            t.row_begin = seen.begin;
            t.row_end = seen.end;
            plan.kernel.tile(t);
        }
    }
}

}  // namespace

void set_backward_composed(bool composed) { composed_flag().store(composed ? 1 : 0); }
bool backward_composed() { return composed_flag().load() != 0; }

namespace {

// Q and dO of every head transposed (kernel.pack_t) into q_t, dout_t, sized here (dense
// batches: the kernel with bf16 products takes no packed sequences).
void transposed_rows(const exec &ex, const backward_kernel &kernel, const attn_sdpa_desc &d,
                     const row_terms &rows, backward_tensors &io, growing_floats &q_t,
                     growing_floats &dout_t, bool fill) {
    if (!kernel.pack_t) return;
    io.t_rows = ceil_div(d.len_q, 32) * 32;  // whole blocks of 32 rows
    io.q_t_head = ceil_div(d.dim_qk, 32) * 32 * io.t_rows;
    io.dout_t_head = ceil_div(d.dim_v, 32) * 32 * io.t_rows;
    const int64_t heads = d.batch * d.heads_q;
    // a float holds two (the sizes are even); every element is packed below
    uint16_t *q_rows = reinterpret_cast<uint16_t *>(q_t.get(size_t(heads * io.q_t_head / 2)));
    uint16_t *dout_rows =
        reinterpret_cast<uint16_t *>(dout_t.get(size_t(heads * io.dout_t_head / 2)));
    io.q_t = q_rows;
    io.dout_t = dout_rows;
    if (!fill) return;
    parallel_tasks(ex, heads, [&](int64_t bh) {
        const int64_t b = bh / d.heads_q, h = bh % d.heads_q;
        const float *row_max = rows.max.data() + bh * d.len_q;
        kernel.pack_t(element_at(io.q, d.q_type, b * d.q.batch + h * d.q.head), d.q_type, d.q.seq,
                      d.len_q, d.dim_qk, row_max, q_rows + bh * io.q_t_head, io.t_rows);
        kernel.pack_t(element_at(io.dout, d.out_type, b * d.out.batch + h * d.out.head), d.out_type,
                      d.out.seq, d.len_q, d.dim_v, row_max, dout_rows + bh * io.dout_t_head,
                      io.t_rows);
    });
}

// The dQ partials of every sequence's key chunks 1.. (zeros), sized per sequence.
dq_partials partials_for(const seq_rows &seqs, const std::vector<chunking> &cuts,
                         std::vector<float> &storage) {
    const attn_sdpa_desc &d = seqs.desc();
    dq_partials parts{nullptr, std::vector<int64_t>(size_t(d.batch) + 1, 0),
                      std::vector<int64_t>(size_t(d.batch), 0)};
    for (int64_t b = 0; b < d.batch; ++b) {
        const int64_t chunks = cuts[size_t(b)].chunks;
        parts.chunks[size_t(b)] = chunks;
        parts.first[size_t(b) + 1] = parts.first[size_t(b)] +
            std::max<int64_t>(chunks - 1, 0) * seqs.queries(b) * d.heads_q * d.dim_qk;
    }
    storage.assign(size_t(parts.first.back()), 0.0f);
    parts.partials = storage.data();
    return parts;
}

// What a call keeps in its context's workspace for the next one (workspace.hpp): after a
// first call, a repeated backward of the same or a smaller shape takes no memory in
// proportion to the problem, so a training loop does not fault in fresh pages every step.
struct backward_state {
    row_terms rows;
    std::vector<float> partials, fwd_sum;
    growing_floats scratch, dq_acc, q_t, dout_t;
};

// Steps 1 to 3 (this file's header) with the given tile kernel on the stored tensors.
void fused_steps(const exec &ex, const kernels::kernel_table &kt, const backward_kernel &kernel,
                 const attn_sdpa_desc &d, backward_tensors io, const float *lse,
                 const row_stats *stats) {
    const seq_rows seqs(d);  // each sequence's rows and counts (packed or dense)
    const std::vector<chunking> cuts = sequence_chunks(seqs, kt.attention_backward_bk);
    const std::vector<key_task> tasks = key_tasks(seqs, cuts);

    // ---- scratch, all before any output is written; kept by the context for the next call ----
    const workspace_pool::lease ws = take_workspace(ex);
    backward_state &st = (*ws).state<backward_state>();
    const int64_t slot_floats = ceil_div(kernel.scratch_floats(d.dim_qk, d.dim_v), 16) * 16;
    float *scratch = st.scratch.get(size_t(slot_floats * worker_slots(ex)));
    const size_t n_rows = static_cast<size_t>(seqs.rows_total());
    row_terms &rows = st.rows;  // every row's terms are written in step 1
    rows.max.resize(n_rows);
    rows.inv_sum.resize(n_rows);
    rows.delta.resize(n_rows);
    rows.dsink.resize(d.dsinks ? n_rows : 0);
    rows.dropout_keys.resize(d.dropout_p > 0.0f ? n_rows : 0);
    const dq_partials parts = partials_for(seqs, cuts, st.partials);
    // dQ accumulated in f32 (seq_rows::row order) apart from a 16-bit dq; zeroed in step 2
    io.dq_acc = d.q_type != ATTN_DTYPE_F32 ? st.dq_acc.get(n_rows * size_t(d.dim_qk)) : nullptr;
    const bool recompute = !stats && !lse;
    std::vector<float> &fwd_sum = st.fwd_sum;
    fwd_sum.resize(recompute ? n_rows : 0);
    transposed_rows(ex, kernel, d, rows, io, st.q_t, st.dout_t, false);

    // ---- 1. per-row statistics, delta, dropout keys, the sinks' gradients ----
    if (recompute)
        recompute_statistics(ex, kt, seqs, kernel.pairs, io.q, io.k, io.v, rows.max.data(),
                             fwd_sum.data());
    row_statistics(ex, seqs, io.out, io.dout, lse, stats, fwd_sum.data(), rows);
    transposed_rows(ex, kernel, d, rows, io, st.q_t, st.dout_t, true);

    // ---- 2. key tiles; the dQ accumulator (chunk 0) starts from zero ----
    parallel_rows(ex, seqs, [&](const row_place &at, int64_t row) {
        float *dst = io.dq_acc ? io.dq_acc + row * d.dim_qk
                               : static_cast<float *>(io.dq) + seqs.q_at(at.b, at.h, at.i);
        std::memset(dst, 0, sizeof(float) * size_t(d.dim_qk));
    });
    const key_chunks plan{seqs, kt, kernel, io, &rows, cuts, parts};
    parallel_tasks(ex, int64_t(tasks.size()), [&](int64_t task) {
        run_key_chunk(plan, tasks[size_t(task)], scratch + worker_slot(ex) * slot_floats);
    });

    // ---- 3. dq = scale * (sum of the chunks, in order); dsinks summed in (batch, row) order ----
    finish_gradients(ex, kt, seqs, rows, parts, io);
}

// The fused backward of f32 tensors: steps 1, 2 and 3 on the f32 kernel.
void fused_backward(const exec &ex, const kernels::kernel_table *kt, const attn_sdpa_desc &d,
                    const float *q, const float *k, const float *v, const float *out,
                    const float *dout, const float *lse, float *dq, float *dk, float *dv,
                    const row_stats *stats) {
    const backward_kernel f32{kt->attention_backward_tile, kt->attention_backward_scratch_floats,
                              false, nullptr};
    fused_steps(ex, *kt, f32, d, {q, k, v, out, dout, dq, dk, dv, nullptr, nullptr, nullptr, 0, 0, 0},
                lse, stats);
}

void composed_backward(const exec &ex, const kernels::kernel_table *, const attn_sdpa_desc &d,
                       const float *q, const float *k, const float *v, const float *out,
                       const float *dout, const float *lse, float *dq, float *dk, float *dv,
                       const row_stats *) {
    sdpa_backward_composed(ex, d, q, k, v, out, dout, lse, dq, dk, dv);
}

// The backward implementations, tried in order; the last takes every call.
struct backward_impl {
    bool (*takes)(const attn_sdpa_desc &d);
    void (*run)(const exec &ex, const kernels::kernel_table *kt, const attn_sdpa_desc &d,
                const float *q, const float *k, const float *v, const float *out,
                const float *dout, const float *lse, float *dq, float *dk, float *dv,
                const row_stats *stats);
};

const backward_impl backward_impls[] = {
    // fused: every call, dense or packed (q_start, kv_start); the switch of
    // backward_switch.hpp sends every call to the composed backward instead, for comparison.
    {[](const attn_sdpa_desc &) { return !backward_composed(); }, &fused_backward},
    // composed
    {[](const attn_sdpa_desc &) { return true; }, &composed_backward},
};

}  // namespace

void sdpa_backward(const exec &ex, const attn_sdpa_desc &d, const float *q, const float *k,
                   const float *v, const float *out, const float *dout, const float *lse,
                   float *dq, float *dk, float *dv, const row_stats *stats) {
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (!kt) {
        ref::sdpa_backward(d, q, k, v, out, dout, lse, dq, dk, dv);
        return;
    }
    for (const backward_impl &impl : backward_impls)
        if (impl.takes(d)) {
            impl.run(ex, kt, d, q, k, v, out, dout, lse, dq, dk, dv, stats);
            return;
        }
}

// The fused kernel with bf16 products takes dense batches only: packed sequences go on to the
// f32 fused backward (through the f32 copies of sdpa_backward_typed), as do other levels.
bool sdpa_backward_on_pairs(const exec &ex, const attn_sdpa_desc &d) {
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (!kt || !kt->attention_backward_tile_bf16 || backward_composed()) return false;
    if (d.q_start || d.kv_start) return false;
    return ex.fpmath == ATTN_FPMATH_BF16 ||
           (d.q_type == ATTN_DTYPE_BF16 && d.kv_type == ATTN_DTYPE_BF16 &&
            d.out_type == ATTN_DTYPE_BF16);
}

void sdpa_backward_pairs(const exec &ex, const attn_sdpa_desc &d, const void *q, const void *k,
                         const void *v, const void *out, const void *dout, const float *lse,
                         void *dq, void *dk, void *dv) {
    const kernels::kernel_table &kt = *simd_kernels(ex);
    const backward_kernel pairs{kt.attention_backward_tile_bf16,
                                kt.attention_backward_scratch_floats_bf16, true,
                                kt.attention_backward_pack_t_bf16};
    fused_steps(ex, kt, pairs, d,
                {q, k, v, out, dout, dq, dk, dv, nullptr, nullptr, nullptr, 0, 0, 0}, lse, nullptr);
}

}  // namespace attn::ops
