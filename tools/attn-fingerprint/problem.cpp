#include "problem.hpp"

#include <cmath>
#include <limits>

namespace attn_fingerprint {
namespace {

constexpr float minus_inf = -std::numeric_limits<float>::infinity();

uint64_t seed_of(const std::string &name) {
    fnv1a h;
    h.add(name.data(), name.size());
    return h.h;
}

// Dense [batch, heads, seq, dim] strides, or [batch, seq, heads, dim] (BSHD).
attn_layout layout(bool bshd, int64_t heads, int64_t seq, int64_t dim) {
    if (bshd) return attn_layout{seq * heads * dim, dim, heads * dim};
    return attn_layout{heads * seq * dim, seq * dim, dim};
}

int64_t extent(const attn_layout &l, int64_t batch, int64_t heads, int64_t seq, int64_t dim) {
    return (batch - 1) * l.batch + (heads - 1) * l.head + (seq - 1) * l.seq + dim;
}

// K and V of every sequence in pages of page_size keys, [page, head, row, dim], handed out
// in reverse order with two pages unused.
void set_pages(problem &p, const sdpa_case &c) {
    attn_sdpa_desc &d = p.d;
    const int64_t per_seq = (c.len_kv + c.page_size - 1) / c.page_size;
    d.page_size = c.page_size;
    d.block_table_stride = per_seq + 1;
    d.num_pages = c.batch * per_seq + 2;
    d.k = attn_layout{c.heads_kv * c.page_size * c.dim_qk, c.page_size * c.dim_qk, c.dim_qk};
    d.v = attn_layout{c.heads_kv * c.page_size * c.dim_v, c.page_size * c.dim_v, c.dim_v};
    p.block_table.assign(size_t(c.batch * d.block_table_stride), 0);
    int32_t next = int32_t(d.num_pages - 1);
    for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t j = 0; j < per_seq; ++j) p.block_table[size_t(b * d.block_table_stride + j)] = next--;
    d.block_table = p.block_table.data();
    p.k_elems = d.num_pages * d.k.batch;
    p.v_elems = d.num_pages * d.v.batch;
}

void set_options(problem &p, const sdpa_case &c, rng &r) {
    attn_sdpa_desc &d = p.d;
    if (c.scale != 0.0f) d.scale = c.scale;
    d.causal = c.causal;
    if (c.mask) {  // broadcast over the batch; a few keys -inf
        p.mask = draw_f32(r, c.heads_q * c.len_q * c.len_kv, -2.0f, 0.5f);
        for (size_t i = 0; i < p.mask.size(); i += 7) p.mask[i] = minus_inf;
        d.mask = p.mask.data();
        d.mask_strides = attn_layout{0, c.len_q * c.len_kv, c.len_kv};
    }
    if (c.kv_len) {
        for (int64_t b = 0; b < c.batch; ++b) p.kv_len.push_back(int32_t(c.len_kv - 13 * b));
        d.kv_len = p.kv_len.data();
    }
    if (c.dropout) {
        d.dropout_p = 0.2f;
        d.dropout_seed = 42;
    }
    d.window_left = c.window_left;
    d.window_right = c.window_right;
    d.softcap = c.softcap;
    if (c.alibi) {
        for (int64_t h = 0; h < c.heads_q; ++h) p.slopes.push_back(std::ldexp(1.0f, -int(h + 1)));
        d.alibi_slopes = p.slopes.data();
    }
    if (c.sinks) {
        p.sinks = draw_f32(r, c.heads_q, -1.0f, 2.0f);
        if (c.heads_q > 1) p.sinks[1] = minus_inf;
        p.dsinks.assign(size_t(c.heads_q), 0.0f);
        d.sinks = p.sinks.data();
        d.dsinks = p.dsinks.data();
    }
    if (c.weights) p.weights.assign(size_t(c.batch * c.heads_q * c.len_q * c.len_kv), 0.0f);
    if (c.lse) p.lse.assign(size_t(c.batch * c.heads_q * c.len_q), 0.0f);
    d.weights = c.weights ? p.weights.data() : nullptr;
    d.lse = c.lse ? p.lse.data() : nullptr;
}

}  // namespace

sdpa_case shape(const char *name, int64_t batch, int64_t heads_q, int64_t heads_kv,
                int64_t len_q, int64_t len_kv, int64_t dim_qk, int64_t dim_v) {
    sdpa_case c;
    c.name = name;
    c.batch = batch;
    c.heads_q = heads_q;
    c.heads_kv = heads_kv;
    c.len_q = len_q;
    c.len_kv = len_kv;
    c.dim_qk = dim_qk;
    c.dim_v = dim_v;
    return c;
}

problem::problem(const sdpa_case &c, attn_dtype q_type, attn_dtype kv_type, attn_dtype out_type) {
    rng r(seed_of(c.name));
    attn_sdpa_desc_init(&d, c.batch, c.heads_q, c.len_q, c.len_kv, c.dim_qk);
    d.heads_kv = c.heads_kv;
    d.dim_v = c.dim_v;
    d.q = layout(c.bshd, c.heads_q, c.len_q, c.dim_qk);
    d.k = layout(c.bshd, c.heads_kv, c.len_kv, c.dim_qk);
    d.v = layout(c.bshd, c.heads_kv, c.len_kv, c.dim_v);
    d.out = layout(c.bshd, c.heads_q, c.len_q, c.dim_v);
    d.q_type = q_type;
    d.kv_type = kv_type;
    d.out_type = out_type;
    q_elems = extent(d.q, c.batch, c.heads_q, c.len_q, c.dim_qk);
    k_elems = extent(d.k, c.batch, c.heads_kv, c.len_kv, c.dim_qk);
    v_elems = extent(d.v, c.batch, c.heads_kv, c.len_kv, c.dim_v);
    out_elems = extent(d.out, c.batch, c.heads_q, c.len_q, c.dim_v);
    if (c.page_size > 0) set_pages(*this, c);
    set_options(*this, c, r);
    q = draw(r, q_type, q_elems);
    k = draw(r, kv_type, k_elems);
    v = draw(r, kv_type, v_elems);
    out.assign(size_t(out_elems) * attn_dtype_size(out_type), 0);
    clear_outputs();
}

void problem::clear_outputs() {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<unsigned char>(0x3c + i % 5);
    for (auto &x : weights) x = 5.0f;
    for (auto &x : lse) x = 5.0f;
    for (auto &x : dsinks) x = 5.0f;
}

void problem::record_outputs(record &rec) const {
    rec.add(out);
    rec.add(weights);
    rec.add(lse);
}

}  // namespace attn_fingerprint
