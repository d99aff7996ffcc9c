// Reference scaled dot-product attention, one query row at a time:
//   A[b,h,i,:] = softmax_j(s_ij) with s the score of src/core/scores.hpp
//   (scale, softcap, + mask, - ALiBi; window, causal and kv_len hiding), the head's sink in
//   the denominator, out[b,h,i,:] = sum_j dropout(A)[j] * v_j; K and V through the one
//   addressing function (paged or not).
// Scratch is O(len_kv) per row; the len_q x len_kv matrix is only written when asked for.
#include <vector>

#include "ref/ref.hpp"
#include "core/seq_rows.hpp"
#include "ref/sdpa_row.hpp"

namespace attn::ref {

void sdpa(const attn_sdpa_desc &d, const float *q, const float *k, const float *v, float *out) {
    const core::seq_rows rows(d);  // each sequence's rows and counts (packed or dense)
    std::vector<float> s(static_cast<size_t>(d.len_kv));  // scores, then weights
    std::vector<float> z(static_cast<size_t>(d.len_kv));  // dropout factors
    for (int64_t b = 0; b < d.batch; ++b) {
        const int64_t keys = rows.keys(b);
        const core::key_visibility visibility = rows.visibility(b);
        for (int64_t h = 0; h < d.heads_q; ++h) {
            const core::kv_rows v_rows = rows.v_rows(v, b, sdpa_row::kv_head(d, h));
            const float sink = core::sink_for(d, h);
            for (int64_t i = 0; i < rows.queries(b); ++i) {
                float *out_row = out + rows.out_at(b, h, i);
                float *lse = d.lse ? d.lse + rows.lse_at(b, h, i) : nullptr;
                // weights (dense only): [batch, heads_q, len_q, len_kv]
                float *weights_row =
                    d.weights ? d.weights + ((b * d.heads_q + h) * d.len_q + i) * d.len_kv : nullptr;

                const float m = sdpa_row::scores(rows, q, k, b, h, i, s.data());
                for (int64_t c = 0; c < d.dim_v; ++c) out_row[c] = 0.0f;
                if (m == sdpa_row::neg_inf) {  // every key masked: zeros, never NaN; lse = sink
                    if (lse) *lse = sink;
                    if (weights_row)
                        for (int64_t j = 0; j < d.len_kv; ++j) weights_row[j] = 0.0f;
                    continue;
                }
                // A_j = softmax_j(s) with the sink in the denominator, before dropout.
                const float row_lse = sdpa_row::softmax_in_place(s.data(), keys, m, sink);
                if (lse) *lse = row_lse;
                if (weights_row)
                    for (int64_t j = 0; j < d.len_kv; ++j) weights_row[j] = s[j];
                // out_i = sum_j (A_j * z_j) v_j, z = dropout factors (all 1 without dropout).
                sdpa_row::dropout_factors(d, b, h, i, keys, z.data());
                // A hidden key is never read; every other key contributes, even with weight
                // 0 (masked by -inf, dropped): a NaN in its V row reaches the output.
                const core::key_range seen = visibility.row(i);
                for (int64_t j = 0; j < keys; ++j) {
                    if (sdpa_row::key_hidden(seen, j)) continue;
                    const float p = s[j] * z[j];
                    const float *v_row = v_rows.row_as<float>(j);
                    for (int64_t c = 0; c < d.dim_v; ++c) out_row[c] += p * v_row[c];
                }
            }
        }
    }
}

}  // namespace attn::ref

namespace attn::ref {
namespace {

// Elements spanned by a [batch, heads, seq, dim] tensor with these strides.
int64_t span_elements(const attn_layout &l, int64_t batch, int64_t heads, int64_t seq,
                      int64_t dim) {
    if (batch <= 0 || heads <= 0 || seq <= 0) return 0;
    return (batch - 1) * l.batch + (heads - 1) * l.head + (seq - 1) * l.seq + dim;
}

// The rows of a tensor as [outer, heads, seq] with these strides: the layout itself, or,
// packed by `start` (q_start, kv_start), one outer row of start[batch] packed rows.
struct row_space {
    attn_layout l;
    int64_t outer, seq;
};
row_space rows_of(const attn_layout &l, const int32_t *start, int64_t batch, int64_t seq) {
    if (!start) return {l, batch, seq};
    return {attn_layout{0, l.head, l.seq}, 1, start[batch]};
}

// The logical elements of a [batch, heads, seq, dim] tensor of type t, widened to f32 at the
// same offsets (the gaps between rows stay 0).
std::vector<float> widened(const void *x, attn_dtype t, const attn_layout &l, int64_t batch,
                           int64_t heads, int64_t seq, int64_t dim) {
    std::vector<float> out(size_t(span_elements(l, batch, heads, seq, dim)), 0.0f);
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < seq; ++i) {
                const int64_t row = b * l.batch + h * l.head + i * l.seq;
                for (int64_t c = 0; c < dim; ++c) out[size_t(row + c)] = load_element(x, t, row + c);
            }
    return out;
}

// The layout of a quantized cache's K or V once dequantized: packed rows with kv_start (no
// packed row at all: strides 0, as the API passes them), else dense [batch, heads_kv, len_kv,
// dim].
attn_layout f32_kv_layout(const attn_sdpa_desc &d, int64_t dim) {
    if (d.kv_start) return d.kv_start[d.batch] == 0 ? attn_layout{0, 0, 0} : attn_layout{0, dim, d.heads_kv * dim};
    return {d.heads_kv * d.len_kv * dim, d.len_kv * dim, dim};
}

// K or V of a quantized cache (kv_type I8 .. FP8_E5M2), every key of every (sequence, kv head)
// dequantized to f32, x = scale * (q - zero) (or scale * fp8(q)) through the rows' own
// addressing (paged, packed or dense), into the f32 layout of over_f32_kv: dense
// [batch, heads_kv, len_kv, dim], or packed [kv_start[batch], heads_kv, dim] with kv_start.
std::vector<float> dequantized(const attn_sdpa_desc &d, const void *x, bool is_k, int64_t dim) {
    const core::seq_rows rows(d);
    const attn_layout l = f32_kv_layout(d, dim);
    std::vector<float> out(size_t((d.kv_start ? rows.key_rows_total() : d.batch * d.len_kv) *
                                  d.heads_kv * dim));
    for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t h = 0; h < d.heads_kv && rows.keys(b) > 0; ++h) {  // (no keys: no row)
            const core::kv_rows r = is_k ? rows.k_rows(x, b, h) : rows.v_rows(x, b, h);
            float *at = out.data() + (d.kv_start ? d.kv_start[b] * l.seq : b * l.batch) + h * l.head;
            for (int64_t j = 0; j < rows.keys(b); ++j)
                for (int64_t c = 0; c < dim; ++c) at[j * l.seq + c] = r.value(j, c);
        }
    return out;
}

// The same problem over those f32 K and V (not paged).
attn_sdpa_desc over_f32_kv(const attn_sdpa_desc &d) {
    attn_sdpa_desc f = d;
    f.kv_type = ATTN_DTYPE_F32;
    f.k = f32_kv_layout(d, d.dim_qk);
    f.v = f32_kv_layout(d, d.dim_v);
    f.block_table = nullptr;
    f.block_table_stride = f.page_size = f.num_pages = 0;
    f.k_scale = f.v_scale = f.k_zero = f.v_zero = nullptr;
    f.k_scale_strides = f.v_scale_strides = attn_layout{0, 0, 0};
    f.k_group = f.v_group = 0;
    return f;
}

}  // namespace

// Typed attention by the plain route: widen q, k, v to f32 (exact; a quantized cache
// dequantized in f32), compute in f32, round each output element once to out_type.
void sdpa_typed(const attn_sdpa_desc &d, const void *q, const void *k, const void *v, void *out) {
    if (core::is_quantized(d.kv_type)) {  // dequantized K and V, then as an f32 cache
        const std::vector<float> kf = dequantized(d, k, true, d.dim_qk);
        const std::vector<float> vf = dequantized(d, v, false, d.dim_v);
        sdpa_typed(over_f32_kv(d), q, kf.data(), vf.data(), out);
        return;
    }
    if (d.q_type == ATTN_DTYPE_F32 && d.kv_type == ATTN_DTYPE_F32 && d.out_type == ATTN_DTYPE_F32) {
        sdpa(d, static_cast<const float *>(q), static_cast<const float *>(k),
             static_cast<const float *>(v), static_cast<float *>(out));
        return;
    }
    const row_space qs = rows_of(d.q, d.q_start, d.batch, d.len_q);
    const row_space os = rows_of(d.out, d.q_start, d.batch, d.len_q);
    // paged K/V: the whole pool, num_pages pages of page_size rows
    const row_space ks = d.block_table ? row_space{d.k, d.num_pages, d.page_size}
                                       : rows_of(d.k, d.kv_start, d.batch, d.len_kv);
    const row_space vs = d.block_table ? row_space{d.v, d.num_pages, d.page_size}
                                       : rows_of(d.v, d.kv_start, d.batch, d.len_kv);
    const std::vector<float> qf = widened(q, d.q_type, qs.l, qs.outer, d.heads_q, qs.seq, d.dim_qk);
    const std::vector<float> kf = widened(k, d.kv_type, ks.l, ks.outer, d.heads_kv, ks.seq, d.dim_qk);
    const std::vector<float> vf = widened(v, d.kv_type, vs.l, vs.outer, d.heads_kv, vs.seq, d.dim_v);
    std::vector<float> of(size_t(span_elements(os.l, os.outer, d.heads_q, os.seq, d.dim_v)) + 1);
    attn_sdpa_desc f32 = d;
    f32.q_type = f32.kv_type = f32.out_type = ATTN_DTYPE_F32;
    sdpa(f32, qf.data(), kf.data(), vf.data(), of.data());
    for (int64_t b = 0; b < os.outer; ++b)
        for (int64_t h = 0; h < d.heads_q; ++h)
            for (int64_t i = 0; i < os.seq; ++i) {
                const int64_t row = b * os.l.batch + h * os.l.head + i * os.l.seq;
                for (int64_t c = 0; c < d.dim_v; ++c)
                    store_element(out, d.out_type, row + c, of[size_t(row + c)]);
            }
}

}  // namespace attn::ref
