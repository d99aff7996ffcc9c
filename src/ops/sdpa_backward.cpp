// The fused backward of scaled dot-product attention on the SIMD path (FlashAttention-2's
// algorithm; the tile kernel is kernels/attention_backward.hpp), for every score feature: the
// scores and the keys each query row sees come from the one definition the forward follows
// (core/scores.hpp).
//   1. per query row: the forward's statistics m, 1/l (given, from lse, or recomputed by the
//      forward kernel with its output discarded; with a sink, l includes it), delta =
//      rowsum(dO o O), the dropout key, and the sink's gradient -e^(sink - m) / l delta;
//   2. tasks over (batch, kv head, key chunk): each key tile of the chunk keeps its dK, dV in
//      the scratch while the query rows that see any of its keys (window, causal limit,
//      kv_len) of every query head of the group stream past, in head order (GQA sums in a
//      fixed order), and writes them once; dS K is accumulated into the chunk's dQ (chunk 0:
//      dq itself; others: dense partials), key tile after key tile;
//   3. dq = scale (dq + partial_1 + ... ), in chunk order; rows without gradient are zeros;
//      dsinks[h] = the rows' sink gradients summed over (batch, row) in order, in double.
// The chunks depend on the shape only, and every sum has a fixed order: the gradients are the
// same bits for every thread count. S and dP exist only as br x bk tiles: memory beyond the
// inputs and outputs is O(rows) plus the partials, which are capped (none when the heads alone
// give enough tasks). Every buffer is allocated before an output is written. Packed sequences
// (q_start, kv_start) take the composed backward (sdpa_backward_composed.cpp) instead.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/attention_args.hpp"
#include "kernels/kernels.hpp"
#include "ops/backward_switch.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "core/scores.hpp"
#include "core/kv_rows.hpp"
#include "core/dropout.hpp"
#include "core/convert.hpp"
#include "ref/ref.hpp"

namespace attn::ops {
namespace {

const float neg_inf = -std::numeric_limits<float>::infinity();
// Key chunks per head are added until (batch x kv heads x chunks) reaches this many tasks,
// while the dQ partials they need stay within max_partial_floats (32 MB).
constexpr int64_t target_tasks = 8;
constexpr int64_t max_partial_floats = int64_t(8) << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Element `at` of an array of type t.
const void *element(const void *base, attn_dtype t, int64_t at) {
    return static_cast<const char *>(base) + at * int64_t(attn_dtype_size(t));
}
void *element(void *base, attn_dtype t, int64_t at) {
    return static_cast<char *>(base) + at * int64_t(attn_dtype_size(t));
}

// sum_c a[c] b[c] over n elements of type t (widened exactly), in order, in f32.
float dot_row(const void *a, const void *b, attn_dtype t, int64_t n) {
    float sum = 0.0f;
    if (t == ATTN_DTYPE_F32) {
        const float *x = static_cast<const float *>(a), *y = static_cast<const float *>(b);
        for (int64_t c = 0; c < n; ++c) sum += x[c] * y[c];
        return sum;
    }
    const uint16_t *x = static_cast<const uint16_t *>(a), *y = static_cast<const uint16_t *>(b);
    const bool bf16 = t == ATTN_DTYPE_BF16;
    for (int64_t c = 0; c < n; ++c)
        sum += (bf16 ? convert::bf16_to_f32(x[c]) : convert::f16_to_f32(x[c])) *
               (bf16 ? convert::bf16_to_f32(y[c]) : convert::f16_to_f32(y[c]));
    return sum;
}

// The tensors of one backward call as stored: q, dq of d.q_type; k, v, dk, dv of d.kv_type;
// out, dout of d.out_type. dQ is accumulated in f32: in dq itself when q is f32, else in
// dq_acc (dense [b, h, i, c]) and rounded once into dq.
struct backward_tensors {
    const void *q, *k, *v, *out, *dout;
    void *dq, *dk, *dv;
    float *dq_acc;
    attn_layout dq_acc_layout;
    // for the kernel with bf16 products: Q and dO of head b * heads_q + h transposed, at
    // q_t + (b * heads_q + h) * q_t_head, rows padded to t_rows
    const uint16_t *q_t, *dout_t;
    int64_t q_t_head, dout_t_head, t_rows;
};

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

// What step 1 leaves for steps 2 and 3, per query row (dense [b, h, i]).
struct row_terms {
    std::vector<float> max, inv_sum, delta;
    std::vector<double> dsink;  // in double: the sum over rows cancels (delta has either sign)
    std::vector<uint32_t> dropout_keys;
};

// Step 1: m, 1/l, delta, the dropout key and the sink's gradient of every row.
void row_statistics(const exec &ex, const attn_sdpa_desc &d, const void *out, const void *dout,
                    const float *lse, const row_stats *stats, const float *fwd_sum,
                    row_terms &rows) {
    const int64_t rows_total = d.batch * d.heads_q * d.len_q;
    parallel_for(ex, rows_total, 256, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t i = row % d.len_q, bh = row / d.len_q;
            const int64_t b = bh / d.heads_q, h = bh % d.heads_q;
            float m, l;
            if (stats) m = stats->max[row], l = stats->sum[row];
            else if (lse) m = lse[row], l = 1.0f;
            else m = rows.max[size_t(row)], l = fwd_sum[row];
            if (l == 0.0f) m = neg_inf;
            rows.max[size_t(row)] = m;
            rows.inv_sum[size_t(row)] = 1.0f / l;
            // delta_i = dO_i . O_i = sum_j P_ij z_ij dP_ij, as O = (P z) V
            const int64_t o = b * d.out.batch + h * d.out.head + i * d.out.seq;
            const float delta =
                m != neg_inf ? dot_row(element(dout, d.out_type, o), element(out, d.out_type, o),
                                       d.out_type, d.dim_v)
                             : 0.0f;
            rows.delta[size_t(row)] = delta;
            if (!rows.dropout_keys.empty())
                rows.dropout_keys[size_t(row)] = dropout::row_key(d.dropout_seed, b, h, i);
            // the sink takes part in the softmax with no value: d loss / d sink = -P_sink delta
            if (!rows.dsink.empty()) {
                const float sink = sink_for(d, h);
                rows.dsink[size_t(row)] =
                    m == neg_inf || sink == neg_inf
                        ? 0.0
                        : -(std::exp(double(sink) - double(m)) / double(l)) * double(delta);
            }
        }
    });
}

// Step 2's tasks: chunk `chunk` of the key tiles of (batch, kv head) `head`.
struct key_chunks {
    const attn_sdpa_desc &d;
    const kernels::kernel_table &kt;
    const backward_kernel &kernel;
    const backward_tensors &io;
    const row_terms *rows;
    float *partials;  // dQ of chunks 1.. (dense [b, h, i, c])
    int64_t chunks, chunk_tiles, key_tiles, dq_floats;
};

void run_key_chunk(const key_chunks &plan, int64_t head, int64_t chunk, float *scratch) {
    const attn_sdpa_desc &d = plan.d;
    const int64_t bk = plan.kt.attention_backward_bk, group = d.heads_q / d.heads_kv;
    const int64_t b = head / d.heads_kv, hk = head % d.heads_kv;
    const int64_t keys_b = keys_in_batch(d, b);
    const bool dropout = d.dropout_p > 0.0f;
    const backward_tensors &io = plan.io;
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
    t.visibility = visibility_for(d, b);
    t.softcap = d.softcap;
    t.mask_ld = d.mask_strides.seq;
    t.dropout_threshold = dropout ? dropout::threshold(d.dropout_p) : 0;
    t.dropout_keep = dropout ? dropout::keep_scale(d.dropout_p) : 1.0f;
    t.scratch = scratch;
    const int64_t tile_end = std::min(plan.key_tiles, (chunk + 1) * plan.chunk_tiles);
    for (int64_t kt_i = chunk * plan.chunk_tiles; kt_i < tile_end; ++kt_i) {
        const int64_t key0 = kt_i * bk;
        const int64_t tile_keys = std::min(bk, d.len_kv - key0);
        t.key0 = key0;
        t.keys = std::max<int64_t>(0, std::min(tile_keys, keys_b - key0));
        t.k = element(io.k, d.kv_type, b * d.k.batch + hk * d.k.head + key0 * d.k.seq);
        t.v = element(io.v, d.kv_type, b * d.v.batch + hk * d.v.head + key0 * d.v.seq);
        t.dk = element(io.dk, d.kv_type, b * d.k.batch + hk * d.k.head + key0 * d.k.seq);
        t.dv = element(io.dv, d.kv_type, b * d.v.batch + hk * d.v.head + key0 * d.v.seq);
        // keys past the batch's length get no gradient; nor do keys no query row sees
        const row_span seen = rows_seeing(t.visibility, d.len_q, key0, key0 + t.keys);
        if (seen.end == seen.begin) t.keys = 0;
        for (int64_t c = t.keys; c < tile_keys; ++c) {
            const size_t bytes = attn_dtype_size(d.kv_type);
            std::memset(element(t.dk, d.kv_type, c * d.k.seq), 0, bytes * size_t(d.dim_qk));
            std::memset(element(t.dv, d.kv_type, c * d.v.seq), 0, bytes * size_t(d.dim_v));
        }
        if (t.keys == 0) continue;
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
            const int64_t bh = b * d.heads_q + h;
            t.first_head = h == hk * group;
            t.last_head = h == (hk + 1) * group - 1;
            t.q = element(io.q, d.q_type, b * d.q.batch + h * d.q.head);
            t.q_t = io.q_t ? io.q_t + bh * io.q_t_head : nullptr;
            t.dout_t = io.dout_t ? io.dout_t + bh * io.dout_t_head : nullptr;
            t.dout = element(io.dout, d.out_type, b * d.out.batch + h * d.out.head);
            if (chunk == 0) {
                const attn_layout &l = io.dq_acc_layout;
                t.dq = io.dq_acc + b * l.batch + h * l.head;
                t.dq_ld = l.seq;
            } else {
                t.dq = plan.partials + (chunk - 1) * plan.dq_floats + bh * d.len_q * d.dim_qk;
                t.dq_ld = d.dim_qk;
            }
            t.row_max = plan.rows->max.data() + bh * d.len_q;
            t.row_inv_sum = plan.rows->inv_sum.data() + bh * d.len_q;
            t.row_delta = plan.rows->delta.data() + bh * d.len_q;
            t.dropout_keys = dropout ? plan.rows->dropout_keys.data() + bh * d.len_q : nullptr;
            t.mask = d.mask ? d.mask + b * d.mask_strides.batch + h * d.mask_strides.head
                            : nullptr;
            t.alibi_slope = d.alibi_slopes ? d.alibi_slopes + h : nullptr;
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

// Q and dO of every head transposed (kernel.pack_t) into q_t, dout_t, sized here.
void transposed_rows(const exec &ex, const backward_kernel &kernel, const attn_sdpa_desc &d,
                     const row_terms &rows, backward_tensors &io,
                     std::unique_ptr<uint16_t[]> &q_t, std::unique_ptr<uint16_t[]> &dout_t,
                     bool fill) {
    if (!kernel.pack_t) return;
    io.t_rows = ceil_div(d.len_q, 32) * 32;  // whole blocks of 32 rows
    io.q_t_head = ceil_div(d.dim_qk, 32) * 32 * io.t_rows;
    io.dout_t_head = ceil_div(d.dim_v, 32) * 32 * io.t_rows;
    const int64_t heads = d.batch * d.heads_q;
    if (!fill) {
        q_t.reset(new uint16_t[size_t(heads * io.q_t_head)]);  // every element packed below
        dout_t.reset(new uint16_t[size_t(heads * io.dout_t_head)]);
        io.q_t = q_t.get();
        io.dout_t = dout_t.get();
        return;
    }
    parallel_tasks(ex, heads, [&](int64_t bh) {
        const int64_t b = bh / d.heads_q, h = bh % d.heads_q;
        const float *row_max = rows.max.data() + bh * d.len_q;
        kernel.pack_t(element(io.q, d.q_type, b * d.q.batch + h * d.q.head), d.q_type, d.q.seq,
                      d.len_q, d.dim_qk, row_max, q_t.get() + bh * io.q_t_head, io.t_rows);
        kernel.pack_t(element(io.dout, d.out_type, b * d.out.batch + h * d.out.head), d.out_type,
                      d.out.seq, d.len_q, d.dim_v, row_max, dout_t.get() + bh * io.dout_t_head,
                      io.t_rows);
    });
}

// Step 3: dq = scale * (sum of the chunks, in order), rounded once into dq when it is not the
// f32 accumulator; rows without gradient are zeros. dsinks summed in (batch, row) order.
void finish_gradients(const exec &ex, const kernels::kernel_table &kt, const attn_sdpa_desc &d,
                      const backward_tensors &io, const row_terms &rows, const float *partials,
                      int64_t chunks, int64_t dq_floats) {
    const int64_t rows_total = d.batch * d.heads_q * d.len_q;
    const attn_layout &l = io.dq_acc_layout;
    const bool rounded = io.dq_acc != io.dq;
    const float scale = d.scale;
    const int64_t dim = d.dim_qk;
    parallel_for(ex, rows_total, 256, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
            const int64_t i = row % d.len_q, bh = row / d.len_q;
            const int64_t b = bh / d.heads_q, h = bh % d.heads_q;
            float *dst = io.dq_acc + b * l.batch + h * l.head + i * l.seq;
            const bool none = rows.max[size_t(row)] == neg_inf;
            for (int64_t p = 1; p < chunks; ++p) {  // the chunks in order, then the scale
                const float *part = partials + (p - 1) * dq_floats + row * dim;
                for (int64_t c = 0; c < dim; ++c) dst[c] += part[c];
            }
            for (int64_t c = 0; c < dim; ++c) dst[c] = none ? 0.0f : scale * dst[c];
            if (rounded)
                kt.narrow_row(dst, d.dim_qk,
                              element(io.dq, d.q_type, b * d.q.batch + h * d.q.head + i * d.q.seq),
                              d.q_type);
        }
    });
    if (d.dsinks)
        for (int64_t h = 0; h < d.heads_q; ++h) {
            double sum = 0.0;
            for (int64_t b = 0; b < d.batch; ++b)
                for (int64_t i = 0; i < d.len_q; ++i)
                    sum += rows.dsink[size_t((b * d.heads_q + h) * d.len_q + i)];
            d.dsinks[h] = static_cast<float>(sum);
        }
}

// Steps 1 to 3 with the given tile kernel on the stored tensors.
void fused_steps(const exec &ex, const kernels::kernel_table &kt, const backward_kernel &kernel,
                 const attn_sdpa_desc &d, backward_tensors io, const float *lse,
                 const row_stats *stats) {
    const int64_t bk = kt.attention_backward_bk;
    const bool dropout = d.dropout_p > 0.0f;
    const int64_t rows_total = d.batch * d.heads_q * d.len_q;
    const int64_t key_tiles = ceil_div(d.len_kv, bk);
    const int64_t heads = d.batch * d.heads_kv;
    const int64_t dq_floats = rows_total * d.dim_qk;
    int64_t chunks = std::min(key_tiles, ceil_div(target_tasks, heads));
    if (chunks > 1 && (chunks - 1) * dq_floats > max_partial_floats)
        chunks = std::max<int64_t>(1, 1 + max_partial_floats / dq_floats);
    const int64_t chunk_tiles = ceil_div(key_tiles, chunks);
    chunks = ceil_div(key_tiles, chunk_tiles);

    // ---- scratch, all before any output is written ----
    const int64_t slot_floats = ceil_div(kernel.scratch_floats(d.dim_qk, d.dim_v), 16) * 16;
    aligned_floats scratch(size_t(slot_floats * worker_slots(ex)));
    const size_t n_rows = static_cast<size_t>(rows_total);
    row_terms rows;
    rows.max.resize(n_rows);
    rows.inv_sum.resize(n_rows);
    rows.delta.resize(n_rows);
    rows.dsink.resize(d.dsinks ? n_rows : 0);
    rows.dropout_keys.resize(dropout ? n_rows : 0);
    std::vector<float> partials(size_t((chunks - 1) * dq_floats), 0.0f);
    std::unique_ptr<float[]> dq_acc;  // zeroed in step 2
    if (d.q_type != ATTN_DTYPE_F32) {  // dQ accumulated in f32 apart from the 16-bit dq
        dq_acc.reset(new float[size_t(dq_floats)]);
        io.dq_acc = dq_acc.get();
        io.dq_acc_layout = {d.heads_q * d.len_q * d.dim_qk, d.len_q * d.dim_qk, d.dim_qk};
    }
    const bool recompute = !stats && !lse;
    std::vector<float> fwd_sum(recompute ? n_rows : 0);
    std::unique_ptr<uint16_t[]> q_t, dout_t;
    transposed_rows(ex, kernel, d, rows, io, q_t, dout_t, false);

    // ---- 1. per-row statistics, delta, dropout keys, the sinks' gradients ----
    if (recompute)
        recompute_forward_statistics(ex, kt, d, kernel.pairs, io.q, io.k, io.v,
                                     rows.max.data(), fwd_sum.data());
    row_statistics(ex, d, io.out, io.dout, lse, stats, fwd_sum.data(), rows);
    transposed_rows(ex, kernel, d, rows, io, q_t, dout_t, true);

    // ---- 2. key tiles; the dQ accumulator (chunk 0) starts from zero ----
    parallel_for(ex, rows_total, 256, [&](int64_t begin, int64_t end) {
        const attn_layout &l = io.dq_acc_layout;
        for (int64_t row = begin; row < end; ++row) {
            const int64_t i = row % d.len_q, bh = row / d.len_q;
            float *dst =
                io.dq_acc + (bh / d.heads_q) * l.batch + (bh % d.heads_q) * l.head + i * l.seq;
            std::memset(dst, 0, sizeof(float) * size_t(d.dim_qk));
        }
    });
    const key_chunks plan{d, kt, kernel, io, &rows, partials.data(),
                          chunks, chunk_tiles, key_tiles, dq_floats};
    parallel_tasks(ex, heads * chunks, [&](int64_t task) {
        run_key_chunk(plan, task / chunks, task % chunks,
                      scratch.get() + worker_slot(ex) * slot_floats);
    });

    // ---- 3. dq, dsinks ----
    finish_gradients(ex, kt, d, io, rows, partials.data(), chunks, dq_floats);
}

// The fused backward (this file's header) of f32 tensors: steps 1, 2 and 3 on the f32 kernel.
void fused_backward(const exec &ex, const kernels::kernel_table *kt, const attn_sdpa_desc &d,
                    const float *q, const float *k, const float *v, const float *out,
                    const float *dout, const float *lse, float *dq, float *dk, float *dv,
                    const row_stats *stats) {
    const backward_kernel f32{kt->attention_backward_tile, kt->attention_backward_scratch_floats,
                              false, nullptr};
    fused_steps(ex, *kt, f32, d,
                {q, k, v, out, dout, dq, dk, dv, dq, d.q, nullptr, nullptr, 0, 0, 0}, lse, stats);
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
    // fused: dense batches (it addresses rows as [batch, head, row]); packed sequences
    // (q_start, kv_start), each with its own counts and alignment, go on to the composed
    // backward, which addresses every row through core/seq_rows.hpp. The switch of
    // backward_switch.hpp sends every call there, for comparison.
    {[](const attn_sdpa_desc &d) { return !backward_composed() && !d.q_start && !d.kv_start; },
     &fused_backward},
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
// composed backward (through the f32 copies of sdpa_backward_typed), as in sdpa_backward.
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
    // dq_acc: dq itself when f32 (else replaced by a dense f32 accumulator)
    fused_steps(ex, kt, pairs, d,
                {q, k, v, out, dout, dq, dk, dv, static_cast<float *>(dq), d.q, nullptr, nullptr,
                 0, 0, 0},
                lse, nullptr);
}

}  // namespace attn::ops
