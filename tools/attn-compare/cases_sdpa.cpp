// Sweeps for scaled dot-product attention, forward and backward, over its options:
// causal (both corners), grouped-query heads, broadcast masks, kv_len padding, dropout,
// BSHD and KV-cache strides, the weights and lse outputs.
#include <cmath>
#include <limits>

#include "compare.hpp"

namespace attn_compare {

namespace {

enum class mask_kind { none, full, per_batch, key_padding };
enum class layout_kind { bhsd, bshd, kv_cache };

struct sdpa_options {
    int64_t batch = 1, heads_q = 1, heads_kv = 1, len_q = 1, len_kv = 1, dim_qk = 64, dim_v = 64;
    attn_causal causal = ATTN_CAUSAL_NONE;
    mask_kind mask = mask_kind::none;
    bool kv_len = false;
    float dropout_p = 0.0f;
    layout_kind layout = layout_kind::bhsd;
    bool weights = false, lse = false;  // forward: extra outputs; backward: lse given or not
    float scale = 0.0f;                 // 0 = the default 1/sqrt(dim_qk)
    // masks and layouts of today's models
    int64_t window_left = -1, window_right = -1;
    float softcap = 0.0f;
    bool alibi = false, sinks = false;
    int64_t page_size = 0;              // > 0: K and V in pages of this many keys (forward)
};

std::string label(const sdpa_options &o) {
    std::string s = format("B%lld H%lld", (long long)o.batch, (long long)o.heads_q);
    if (o.heads_kv != o.heads_q) s += format("/%lld", (long long)o.heads_kv);
    s += format(" L%lldx%lld D%lld", (long long)o.len_q, (long long)o.len_kv, (long long)o.dim_qk);
    if (o.dim_v != o.dim_qk) s += format("/%lld", (long long)o.dim_v);
    if (o.causal == ATTN_CAUSAL_TOP_LEFT) s += " causal=tl";
    if (o.causal == ATTN_CAUSAL_BOTTOM_RIGHT) s += " causal=br";
    static const char *const masks[] = {"", " mask", " mask[b,1,i,j]", " mask[b,1,1,j]"};
    s += masks[int(o.mask)];
    if (o.kv_len) s += " kv_len";
    if (o.dropout_p > 0.0f) s += format(" p=%g", o.dropout_p);
    if (o.layout == layout_kind::bshd) s += " bshd";
    if (o.layout == layout_kind::kv_cache) s += " kv-cache";
    if (o.scale != 0.0f) s += format(" scale=%g", o.scale);
    if (o.causal == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN) s += " causal=br-kv_len";
    if (o.window_left >= 0 || o.window_right >= 0)
        s += format(" window=(%lld,%lld)", (long long)o.window_left, (long long)o.window_right);
    if (o.softcap > 0.0f) s += format(" softcap=%g", o.softcap);
    if (o.alibi) s += " alibi";
    if (o.sinks) s += " sinks";
    if (o.page_size > 0) s += format(" pages=%lld", (long long)o.page_size);
    return s;
}

attn_layout dense(int64_t heads, int64_t seq, int64_t dim) {
    return {heads * seq * dim, seq * dim, dim};
}

// Inputs of one attention problem, laid out as the options ask.
struct sdpa_inputs {
    attn_sdpa_desc d;
    std::vector<float> q, k, v, mask, slopes, sinks;
    std::vector<int32_t> kv_len;
    int64_t page_size = 0;

    sdpa_inputs(const sdpa_options &o, uint32_t seed) {
        attn_sdpa_desc_init(&d, o.batch, o.heads_q, o.len_q, o.len_kv, o.dim_qk);
        d.heads_kv = o.heads_kv;
        d.dim_v = o.dim_v;
        d.causal = o.causal;
        d.dropout_p = o.dropout_p;
        d.dropout_seed = 0x5EED0000u + seed;
        if (o.scale != 0.0f) d.scale = o.scale;
        const int64_t B = o.batch, Hq = o.heads_q, Hkv = o.heads_kv;
        if (o.layout == layout_kind::bshd) {
            d.q = {o.len_q * Hq * o.dim_qk, o.dim_qk, Hq * o.dim_qk};
            d.k = {o.len_kv * Hkv * o.dim_qk, o.dim_qk, Hkv * o.dim_qk};
            d.v = {o.len_kv * Hkv * o.dim_v, o.dim_v, Hkv * o.dim_v};
            d.out = {o.len_q * Hq * o.dim_v, o.dim_v, Hq * o.dim_v};
        } else {
            d.q = dense(Hq, o.len_q, o.dim_qk);
            d.out = dense(Hq, o.len_q, o.dim_v);
            // A KV cache holds `capacity` positions, of which len_kv are filled.
            const int64_t cap = o.layout == layout_kind::kv_cache ? o.len_kv + 37 : o.len_kv;
            d.k = dense(Hkv, cap, o.dim_qk);
            d.v = dense(Hkv, cap, o.dim_v);
        }
        q = random_values(size_t(layout_extent(d.q, B, Hq, o.len_q, o.dim_qk)), seed);
        k = random_values(size_t(layout_extent(d.k, B, Hkv, o.len_kv, o.dim_qk)), seed + 1);
        v = random_values(size_t(layout_extent(d.v, B, Hkv, o.len_kv, o.dim_v)), seed + 2);
        const int64_t Lq = o.len_q, Lkv = o.len_kv;
        switch (o.mask) {
        case mask_kind::none: break;
        case mask_kind::full:
            d.mask_strides = {Hq * Lq * Lkv, Lq * Lkv, Lkv};
            mask = random_values(size_t(B * Hq * Lq * Lkv), seed + 3, -2.0f, 2.0f);
            break;
        case mask_kind::per_batch:  // shared by the heads
            d.mask_strides = {Lq * Lkv, 0, Lkv};
            mask = random_values(size_t(B * Lq * Lkv), seed + 3, -2.0f, 2.0f);
            break;
        case mask_kind::key_padding:  // shared by heads and rows: every 5th key hidden
            d.mask_strides = {Lkv, 0, 0};
            mask.assign(size_t(B * Lkv), 0.0f);
            for (size_t j = 0; j < mask.size(); j += 5)
                mask[j] = -std::numeric_limits<float>::infinity();
            break;
        }
        if (!mask.empty()) d.mask = mask.data();
        if (o.kv_len) {
            // batch b keeps len_kv - b * (len_kv / 3) keys
            for (int64_t b = 0; b < B; ++b)
                kv_len.push_back(int32_t(std::max<int64_t>(1, Lkv - b * (Lkv / 3))));
            d.kv_len = kv_len.data();
        }
        d.window_left = o.window_left;
        d.window_right = o.window_right;
        d.softcap = o.softcap;
        for (int64_t h = 0; h < Hq && o.alibi; ++h)  // the standard slopes 2^(-8 (h+1) / H)
            slopes.push_back(float(std::exp2(-8.0 * double(h + 1) / double(Hq))));
        if (o.alibi) d.alibi_slopes = slopes.data();
        for (int64_t h = 0; h < Hq && o.sinks; ++h) sinks.push_back(h % 2 ? -3.0f : 2.0f);
        if (o.sinks) d.sinks = sinks.data();
        page_size = o.page_size;
    }

    // K or V ([batch, heads_kv, len_kv] rows of layout l) copied into pages of page_size keys,
    // the pages in reverse order; the desc's layout and block table set to match.
    std::vector<float> paged(const std::vector<float> &x, const attn_layout &l, int64_t dim,
                             attn_sdpa_desc &p, std::vector<int32_t> &table) const {
        const int64_t per_seq = (d.len_kv + page_size - 1) / page_size;
        const int64_t pages = d.batch * per_seq;
        table.resize(size_t(pages));
        for (int64_t e = 0; e < pages; ++e) table[size_t(e)] = int32_t(pages - 1 - e);
        const attn_layout pl{d.heads_kv * page_size * dim, page_size * dim, dim};
        std::vector<float> pool(size_t(pages * pl.batch), 0.0f);
        for (int64_t b = 0; b < d.batch; ++b)
            for (int64_t h = 0; h < d.heads_kv; ++h)
                for (int64_t j = 0; j < d.len_kv; ++j)
                    for (int64_t c = 0; c < dim; ++c)
                        pool[size_t(table[size_t(b * per_seq + j / page_size)] * pl.batch +
                                    h * pl.head + (j % page_size) * pl.seq + c)] =
                            x[size_t(b * l.batch + h * l.head + j * l.seq + c)];
        p.block_table = table.data();
        p.block_table_stride = per_seq;
        p.page_size = page_size;
        p.num_pages = pages;
        (&l == &d.k ? p.k : p.v) = pl;
        return pool;
    }

    size_t out_size() const { return size_t(layout_extent(d.out, d.batch, d.heads_q, d.len_q, d.dim_v)); }
    size_t rows() const { return size_t(d.batch * d.heads_q * d.len_q); }
};

// ---------------------------------------------------------------------------------------
struct sdpa_problem final : problem {
    sdpa_inputs in;
    bool weights, lse;

    sdpa_problem(const sdpa_options &o, uint32_t seed) : in(o, seed), weights(o.weights), lse(o.lse) {}

    attn_status run(attn_context *ctx, std::vector<float> &outputs) const override {
        attn_sdpa_desc d = in.d;
        std::vector<float> out(in.out_size(), 0.0f), w, l;
        if (weights) {
            w.assign(in.rows() * size_t(d.len_kv), 0.0f);
            d.weights = w.data();
        }
        if (lse) {
            l.assign(in.rows(), 0.0f);
            d.lse = l.data();
        }
        std::vector<int32_t> table;
        std::vector<float> k_pool, v_pool;
        const float *k = in.k.data(), *v = in.v.data();
        if (in.page_size > 0) {  // the same keys, in pages (pool reversed)
            k_pool = in.paged(in.k, in.d.k, d.dim_qk, d, table);
            v_pool = in.paged(in.v, in.d.v, d.dim_v, d, table);
            k = k_pool.data(), v = v_pool.data();
        }
        attn_status st = attn_sdpa_f32(ctx, &d, in.q.data(), k, v, out.data());
        outputs = gather_bhsd(out.data(), d.out, d.batch, d.heads_q, d.len_q, d.dim_v);
        outputs.insert(outputs.end(), w.begin(), w.end());
        outputs.insert(outputs.end(), l.begin(), l.end());
        return st;
    }

    std::vector<double> exact() const override {
        const attn_sdpa_desc &d = in.d;
        std::vector<double> out(in.rows() * size_t(d.dim_v));
        std::vector<double> w(weights ? in.rows() * size_t(d.len_kv) : 0), l(lse ? in.rows() : 0);
        sdpa_exact(d, to_double(in.q).data(), to_double(in.k).data(), to_double(in.v).data(),
                   out.data(), weights ? w.data() : nullptr, lse ? l.data() : nullptr);
        out.insert(out.end(), w.begin(), w.end());
        out.insert(out.end(), l.begin(), l.end());
        return out;
    }
};

// ---------------------------------------------------------------------------------------
// Backward: the forward's out and lse come from the double-precision oracle rounded to
// float, so every implementation differentiates the very same forward.
struct sdpa_backward_problem final : problem {
    sdpa_inputs in;
    bool give_lse;
    std::vector<float> out, lse, dout;

    sdpa_backward_problem(const sdpa_options &o, uint32_t seed) : in(o, seed), give_lse(o.lse) {
        const attn_sdpa_desc &d = in.d;
        std::vector<double> out_dense(in.rows() * size_t(d.dim_v)), lse_dense(in.rows());
        sdpa_exact(d, to_double(in.q).data(), to_double(in.k).data(), to_double(in.v).data(),
                   out_dense.data(), nullptr, lse_dense.data());
        out.assign(in.out_size(), 0.0f);
        size_t row = 0;
        for (int64_t b = 0; b < d.batch; ++b)
            for (int64_t h = 0; h < d.heads_q; ++h)
                for (int64_t i = 0; i < d.len_q; ++i, ++row)
                    for (int64_t x = 0; x < d.dim_v; ++x)
                        out[size_t(b * d.out.batch + h * d.out.head + i * d.out.seq + x)] =
                            float(out_dense[row * size_t(d.dim_v) + size_t(x)]);
        lse.assign(lse_dense.begin(), lse_dense.end());
        dout = random_values(in.out_size(), seed + 5);
    }

    attn_status run(attn_context *ctx, std::vector<float> &outputs) const override {
        const attn_sdpa_desc &d = in.d;
        std::vector<float> dq(in.q.size(), 0.0f), dk(in.k.size(), 0.0f), dv(in.v.size(), 0.0f);
        attn_status st = attn_sdpa_backward_f32(ctx, &d, in.q.data(), in.k.data(), in.v.data(),
                                                out.data(), dout.data(),
                                                give_lse ? lse.data() : nullptr, dq.data(),
                                                dk.data(), dv.data());
        outputs = gather_bhsd(dq.data(), d.q, d.batch, d.heads_q, d.len_q, d.dim_qk);
        auto dk_dense = gather_bhsd(dk.data(), d.k, d.batch, d.heads_kv, d.len_kv, d.dim_qk);
        auto dv_dense = gather_bhsd(dv.data(), d.v, d.batch, d.heads_kv, d.len_kv, d.dim_v);
        outputs.insert(outputs.end(), dk_dense.begin(), dk_dense.end());
        outputs.insert(outputs.end(), dv_dense.begin(), dv_dense.end());
        return st;
    }

    std::vector<double> exact() const override {
        const attn_sdpa_desc &d = in.d;
        std::vector<double> dq(size_t(d.batch * d.heads_q * d.len_q * d.dim_qk));
        std::vector<double> dk(size_t(d.batch * d.heads_kv * d.len_kv * d.dim_qk));
        std::vector<double> dv(size_t(d.batch * d.heads_kv * d.len_kv * d.dim_v));
        sdpa_backward_exact(d, to_double(in.q).data(), to_double(in.k).data(),
                            to_double(in.v).data(), to_double(dout).data(), dq.data(), dk.data(),
                            dv.data());
        dq.insert(dq.end(), dk.begin(), dk.end());
        dq.insert(dq.end(), dv.begin(), dv.end());
        return dq;
    }
};

template <class Problem>
void add(std::vector<case_spec> &out, const char *op, const sdpa_options &o) {
    const uint32_t seed = uint32_t(out.size()) * 7919u + 19u;
    std::string shape = label(o);
    if (std::string(op) == "sdpa") {
        if (o.weights) shape += " +weights";
        if (o.lse) shape += " +lse";
    } else if (!o.lse) {
        shape += " lse=null";
    }
    out.push_back({op, shape, [=] { return std::make_unique<Problem>(o, seed); }});
}

sdpa_options shape(int64_t batch, int64_t hq, int64_t hkv, int64_t lq, int64_t lkv, int64_t dqk,
                   int64_t dv) {
    sdpa_options o;
    o.batch = batch, o.heads_q = hq, o.heads_kv = hkv, o.len_q = lq, o.len_kv = lkv;
    o.dim_qk = dqk, o.dim_v = dv;
    return o;
}

}  // namespace

void add_sdpa_cases(sweep_size s, std::vector<case_spec> &out) {
    auto fwd = [&](sdpa_options o) { add<sdpa_problem>(out, "sdpa", o); };
    sdpa_options o;
    // The seed's example size, then the options one at a time on small shapes.
    fwd(shape(1, 1, 1, 3, 3, 2, 2));
    fwd(shape(2, 2, 2, 17, 33, 16, 16));
    o = shape(1, 2, 2, 33, 33, 64, 64), o.causal = ATTN_CAUSAL_TOP_LEFT, o.weights = o.lse = true;
    fwd(o);
    o = shape(1, 2, 2, 40, 13, 32, 32), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.lse = true;
    fwd(o);  // len_q > len_kv: the first rows see no key at all
    o = shape(2, 4, 2, 9, 65, 32, 24), o.mask = mask_kind::per_batch, o.kv_len = true;
    fwd(o);
    o = shape(2, 2, 1, 17, 29, 16, 16), o.dropout_p = 0.25f, o.weights = true;
    fwd(o);
    o = shape(2, 4, 2, 1, 50, 64, 64), o.layout = layout_kind::kv_cache;
    fwd(o);
    o = shape(2, 3, 3, 21, 21, 8, 8), o.layout = layout_kind::bshd, o.mask = mask_kind::key_padding;
    fwd(o);
    // masks and layouts of today's models
    o = shape(1, 2, 2, 300, 300, 32, 32), o.causal = ATTN_CAUSAL_TOP_LEFT, o.window_left = 40;
    o.lse = true;
    fwd(o);
    o = shape(2, 4, 2, 9, 333, 32, 32), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    o.kv_len = true, o.window_left = 30, o.alibi = true, o.sinks = true, o.lse = true;
    fwd(o);
    o = shape(1, 4, 4, 65, 130, 64, 64), o.window_left = 20, o.window_right = 5;
    o.softcap = 5.0f, o.scale = 1.0f, o.weights = o.lse = true;
    fwd(o);
    o = shape(1, 8, 2, 1, 3000, 64, 64), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    o.window_left = 700, o.softcap = 30.0f, o.alibi = true, o.sinks = true, o.page_size = 16;
    o.lse = true;
    fwd(o);  // split-key decode from a paged cache
    o = shape(2, 4, 2, 100, 230, 32, 32), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    o.mask = mask_kind::per_batch, o.kv_len = true, o.dropout_p = 0.2f, o.window_left = 50;
    o.softcap = 20.0f, o.alibi = true, o.sinks = true, o.page_size = 1, o.weights = o.lse = true;
    fwd(o);
    if (s == sweep_size::quick) return;
    for (int64_t page : {1, 16, 256}) {
        o = shape(2, 8, 2, 33, 1100, 64, 64), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        o.kv_len = true, o.window_left = 400, o.page_size = page, o.lse = true;
        fwd(o);
    }

    for (int64_t L : {1, 17, 64, 65, 257, 1025}) fwd(shape(1, 2, 2, L, L, 64, 64));
    for (int64_t D : {1, 16, 65, 128, 256}) fwd(shape(1, 2, 2, 257, 257, D, D));
    fwd(shape(1, 1, 1, 1025, 1025, 128, 128));
    fwd(shape(1, 2, 1, 1000, 1023, 255, 255));  // no size a multiple of any tile
    o = shape(1, 1, 1, 1025, 1025, 256, 256), o.causal = ATTN_CAUSAL_TOP_LEFT;
    fwd(o);
    o = shape(1, 2, 2, 257, 257, 64, 64), o.causal = ATTN_CAUSAL_TOP_LEFT;
    fwd(o);
    o = shape(1, 2, 2, 65, 257, 64, 64), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    fwd(o);
    o = shape(1, 2, 2, 100, 37, 64, 64), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.lse = true;
    fwd(o);
    fwd(shape(2, 8, 2, 129, 129, 64, 64));
    o = shape(1, 8, 1, 65, 65, 128, 128), o.causal = ATTN_CAUSAL_TOP_LEFT;
    fwd(o);
    o = shape(2, 2, 2, 65, 129, 32, 32), o.mask = mask_kind::full;
    fwd(o);
    o = shape(2, 4, 4, 129, 129, 64, 64), o.mask = mask_kind::per_batch;
    fwd(o);
    o = shape(3, 2, 2, 33, 77, 16, 16), o.mask = mask_kind::key_padding;
    fwd(o);
    o = shape(2, 2, 2, 129, 257, 64, 64), o.kv_len = true;
    fwd(o);
    o = shape(2, 2, 2, 100, 257, 64, 64), o.kv_len = true, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    fwd(o);
    o = shape(2, 2, 2, 257, 257, 64, 64), o.dropout_p = 0.1f;
    fwd(o);
    o = shape(1, 2, 2, 65, 65, 64, 64), o.dropout_p = 0.5f, o.causal = ATTN_CAUSAL_TOP_LEFT;
    o.weights = true;
    fwd(o);
    o = shape(2, 4, 4, 129, 129, 64, 64), o.layout = layout_kind::bshd;
    fwd(o);
    o = shape(1, 8, 2, 1, 1025, 128, 128), o.layout = layout_kind::kv_cache;
    fwd(o);  // one decoding step against a long cache
    // Decoding, 1 to 4 query rows: split into key chunks (long caches) or not, with every
    // masking option, dropout and a head size that is not a whole number of vectors.
    o = shape(1, 4, 4, 1, 4097, 128, 128), o.lse = true;
    fwd(o);
    o = shape(2, 8, 2, 2, 3000, 130, 130), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    o.mask = mask_kind::full, o.lse = true;
    fwd(o);
    o = shape(2, 4, 4, 3, 700, 64, 64), o.kv_len = true, o.dropout_p = 0.1f;
    o.layout = layout_kind::bshd, o.weights = o.lse = true;
    fwd(o);
    o = shape(2, 12, 2, 1, 1500, 64, 64), o.mask = mask_kind::per_batch, o.kv_len = true;
    o.dropout_p = 0.1f, o.layout = layout_kind::bshd, o.weights = o.lse = true;
    fwd(o);  // one query, groups of 6 heads: tiles of 4 and 2 heads, mask shared by heads
    o = shape(1, 8, 2, 4, 2049, 96, 80), o.layout = layout_kind::kv_cache;
    o.causal = ATTN_CAUSAL_TOP_LEFT, o.mask = mask_kind::per_batch, o.dropout_p = 0.2f;
    fwd(o);
    o = shape(1, 4, 4, 16, 300, 64, 64), o.layout = layout_kind::kv_cache;
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    fwd(o);
    o = shape(2, 2, 2, 129, 65, 64, 64), o.weights = o.lse = true;
    fwd(o);
    fwd(shape(1, 2, 2, 129, 129, 64, 32));
    fwd(shape(1, 2, 2, 97, 97, 40, 96));
    o = shape(1, 2, 2, 64, 64, 64, 64), o.scale = 1.0f;
    fwd(o);
    // Everything at once.
    o = shape(2, 8, 2, 100, 200, 72, 40), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    o.mask = mask_kind::per_batch, o.kv_len = true, o.dropout_p = 0.2f;
    o.layout = layout_kind::bshd, o.weights = o.lse = true;
    fwd(o);
}

void add_sdpa_backward_cases(sweep_size s, std::vector<case_spec> &out) {
    auto bwd = [&](sdpa_options o) { add<sdpa_backward_problem>(out, "sdpa_backward", o); };
    sdpa_options o;
    o = shape(1, 2, 2, 17, 17, 16, 16), o.lse = true;
    bwd(o);
    o = shape(2, 4, 2, 23, 31, 32, 24), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    o.dropout_p = 0.2f;
    bwd(o);
    o = shape(2, 2, 2, 19, 19, 8, 8), o.mask = mask_kind::per_batch, o.kv_len = true;
    o.layout = layout_kind::bshd, o.lse = true;
    bwd(o);
    o = shape(2, 4, 2, 37, 80, 32, 32), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.window_left = 9;
    o.window_right = -1, o.softcap = 5.0f, o.scale = 1.0f, o.alibi = true, o.sinks = true;
    o.kv_len = true, o.lse = true;
    bwd(o);
    o = shape(2, 2, 2, 7, 90, 16, 16), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    o.kv_len = true, o.window_left = 20, o.sinks = true, o.dropout_p = 0.1f;
    bwd(o);
    if (s == sweep_size::quick) return;

    for (int64_t L : {1, 64, 257}) {
        o = shape(1, 2, 2, L, L, 64, 64), o.lse = true;
        bwd(o);
    }
    o = shape(1, 2, 2, 129, 129, 128, 128), o.lse = true;
    bwd(o);
    o = shape(1, 1, 1, 513, 513, 128, 128), o.causal = ATTN_CAUSAL_TOP_LEFT, o.lse = true;
    bwd(o);
    o = shape(1, 2, 2, 257, 257, 64, 64), o.causal = ATTN_CAUSAL_TOP_LEFT;
    bwd(o);
    o = shape(1, 2, 1, 1000, 1025, 64, 64), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.lse = true;
    bwd(o);
    o = shape(1, 2, 2, 65, 129, 64, 64), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.lse = true;
    bwd(o);
    o = shape(2, 8, 2, 129, 129, 64, 64), o.lse = true;
    bwd(o);
    o = shape(2, 2, 2, 65, 129, 32, 32), o.mask = mask_kind::full, o.lse = true;
    bwd(o);
    o = shape(3, 2, 2, 33, 77, 16, 16), o.mask = mask_kind::key_padding, o.kv_len = true;
    bwd(o);
    o = shape(2, 2, 2, 129, 129, 64, 64), o.dropout_p = 0.1f, o.lse = true;
    bwd(o);
    o = shape(2, 4, 4, 129, 129, 64, 64), o.layout = layout_kind::bshd, o.lse = true;
    bwd(o);
    o = shape(1, 4, 4, 16, 300, 64, 64), o.layout = layout_kind::kv_cache, o.lse = true;
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    bwd(o);
    o = shape(1, 2, 2, 97, 97, 40, 96);
    bwd(o);
    o = shape(2, 8, 2, 100, 200, 72, 40), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    o.mask = mask_kind::per_batch, o.kv_len = true, o.dropout_p = 0.2f;
    o.layout = layout_kind::bshd, o.lse = true;
    bwd(o);
}

}  // namespace attn_compare
