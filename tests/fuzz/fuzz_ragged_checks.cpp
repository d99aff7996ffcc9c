// What the packed-sequence fuzzer checks of accepted calls, and its descs and descriptions.
#include "fuzz_ragged.hpp"

namespace fuzz::ragged_fuzz {

namespace {

// Address of element 0 of query-side row (b, h, i): packed row q_start[b] + i, or dense.
int64_t query_row(const ragged &r, const view &t, int64_t b, int64_t h, int64_t i) {
    return r.use_q_start ? t.offset + h * t.s[1] + (r.q_start[b] + i) * t.s[2] : t.offset + b * t.s[0] + h * t.s[1] + i * t.s[2];
}
int64_t key_row(const ragged &r, const view &t, int64_t b, int64_t h, int64_t j) {
    return r.use_kv_start ? t.offset + h * t.s[1] + (r.kv_start[b] + j) * t.s[2] : t.offset + b * t.s[0] + h * t.s[1] + j * t.s[2];
}
int64_t queries(const ragged &r, int64_t b) { return r.use_q_start ? int64_t(r.q_start[b + 1]) - r.q_start[b] : r.len_q; }
int64_t keys(const ragged &r, int64_t b) { return r.use_kv_start ? int64_t(r.kv_start[b + 1]) - r.kv_start[b] : r.len_kv; }
int64_t visible_keys(const ragged &r, int64_t b) { return r.kv_len.empty() ? keys(r, b) : std::min<int64_t>(keys(r, b), r.kv_len[b]); }

void all_finite(const snapshot &s, const view &t, const char *what) {
    if (t.buf < 0) return;
    for (int64_t a : addresses(t))
        if (!std::isfinite(s[static_cast<size_t>(t.buf)][static_cast<size_t>(a)])) fail(what, "(an element is not finite)");
}

}  // namespace

// Forward: every out element finite; lse never NaN or +inf; sequences without keys give zero
// rows and lse -inf (with sinks: the sink).
void check_forward(const ragged &r, const snapshot &ref, const snapshot &simd) {
    for (const snapshot *s : {&ref, &simd}) {
        all_finite(*s, r.out, "sdpa ragged: out left unwritten or not finite with clean inputs");
        if (r.lse.buf >= 0)
            for (int64_t a : addresses(r.lse)) {
                const float x = (*s)[static_cast<size_t>(r.lse.buf)][static_cast<size_t>(a)];
                FUZZ_CHECK(!std::isnan(x) && x != INFINITY, "sdpa ragged: lse NaN or +inf with clean inputs");
            }
        for (int64_t b = 0; b < r.batch; ++b) {
            if (visible_keys(r, b) > 0) continue;
            for (int64_t h = 0; h < r.heads_q; ++h)
                for (int64_t i = 0; i < queries(r, b); ++i) {
                    const float *o = &(*s)[static_cast<size_t>(r.out.buf)][static_cast<size_t>(query_row(r, r.out, b, h, i))];
                    for (int64_t e = 0; e < r.dim_v; ++e) FUZZ_CHECK(o[e] == 0.0f, "sdpa ragged: a sequence without keys has a nonzero out row");
                    if (r.lse.buf < 0) continue;
                    const int64_t at = r.use_q_start ? (r.q_start[b] + i) * r.heads_q + h : (b * r.heads_q + h) * r.len_q + i;
                    const float want = r.sinks.empty() ? -INFINITY : r.sinks[static_cast<size_t>(h)];
                    FUZZ_CHECK((*s)[static_cast<size_t>(r.lse.buf)][static_cast<size_t>(r.lse.offset + at)] == want,
                               "sdpa ragged: a sequence without keys has lse other than -inf (or the sink)");
                }
        }
    }
}

// Backward: every gradient element finite; dk and dv rows of keys no query sees are zeros.
void check_backward(const ragged &r, const view &dk, const view &dv, const view &dq, const view &dsinks,
                    const snapshot &ref, const snapshot &simd) {
    for (const snapshot *s : {&ref, &simd}) {
        for (const view *t : {&dq, &dk, &dv, &dsinks})
            all_finite(*s, *t, "sdpa_backward ragged: a gradient left unwritten or not finite with clean inputs");
        for (int64_t b = 0; b < r.batch; ++b) {
            const int64_t seen = queries(r, b) == 0 ? 0 : visible_keys(r, b);
            for (int64_t h = 0; h < r.heads_kv; ++h)
                for (int64_t j = seen; j < keys(r, b); ++j)
                    for (const view *t : {&dk, &dv}) {
                        const float *g = &(*s)[static_cast<size_t>(t->buf)][static_cast<size_t>(key_row(r, *t, b, h, j))];
                        for (int64_t e = 0; e < t->n[3]; ++e)
                            FUZZ_CHECK(g[e] == 0.0f, "sdpa_backward ragged: the dk/dv row of a key no query sees is not zero");
                    }
        }
    }
}

attn_sdpa_desc make_desc(const ragged &r) {
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, r.batch, r.heads_q, r.len_q, r.len_kv, r.dim_qk);
    d.heads_kv = r.heads_kv;
    d.dim_v = r.dim_v;
    d.q = layout_of(r.q, r.q_batch_stride), d.out = layout_of(r.out, r.out_batch_stride);
    d.k = layout_of(r.k, r.kv_batch_stride), d.v = layout_of(r.v, r.use_kv_start ? r.kv_batch_stride : r.v.s[0]);
    d.mask_strides = layout_of(r.mask, r.mask.s[0]);
    if (r.paged) d.page_size = r.page_size, d.num_pages = r.num_pages, d.block_table_stride = r.table_stride;
    return d;
}

// The desc's pointers into the pool and into the call's own arrays.
attn_sdpa_desc with_pointers(attn_sdpa_desc d, const ragged &r, pool &p) {
    d.mask = p.at(r.mask), d.weights = p.at(r.weights), d.lse = p.at(r.lse);
    d.kv_len = r.kv_len.empty() ? nullptr : r.kv_len.data();
    d.q_start = r.use_q_start ? r.q_start.data() : nullptr;
    d.kv_start = r.use_kv_start ? r.kv_start.data() : nullptr;
    d.block_table = r.paged ? r.block_table.data() : nullptr;
    d.alibi_slopes = r.slopes.empty() ? nullptr : r.slopes.data();
    d.sinks = r.sinks.empty() ? nullptr : r.sinks.data();
    return d;
}

std::string describe(const ragged &r, const attn_sdpa_desc &d, bool backward) {
    auto ints = [](const std::vector<int32_t> &v) {
        std::string s = "{";
        for (int32_t x : v) s += std::to_string(x) + ",";
        return s + "}";
    };
    char head[320];
    std::snprintf(head, sizeof head,
                  "%s ragged B=%lld Hq=%lld Hkv=%lld Lq=%lld Lkv=%lld Dqk=%lld Dv=%lld mla=%d causal=%d scale=%g p=%g "
                  "window=(%lld,%lld) softcap=%g slopes=%d sinks=%d page_size=%lld pages=%lld table_stride=%lld",
                  backward ? "sdpa_backward" : "sdpa", (long long)r.batch, (long long)r.heads_q, (long long)r.heads_kv,
                  (long long)r.len_q, (long long)r.len_kv, (long long)r.dim_qk, (long long)r.dim_v, int(r.mla),
                  int(d.causal), double(d.scale), double(d.dropout_p), (long long)d.window_left, (long long)d.window_right,
                  double(d.softcap), int(!r.slopes.empty()), int(!r.sinks.empty()), (long long)r.page_size,
                  (long long)r.num_pages, (long long)r.table_stride);
    return std::string(head) + "\n    q_start " + (r.use_q_start ? ints(r.q_start) : "null") + " kv_start " +
           (r.use_kv_start ? ints(r.kv_start) : "null") + " kv_len " + ints(r.kv_len) + " block_table " +
           (r.paged ? ints(r.block_table) : "null") + "\n    batch strides q " + std::to_string(r.q_batch_stride) +
           " out " + std::to_string(r.out_batch_stride) + " kv " + std::to_string(r.kv_batch_stride) + "\n    q " +
           str(r.q) + "\n    k " + str(r.k) + "\n    v " + str(r.v) + "\n    out " + str(r.out) + "\n    mask " +
           str(r.mask) + "\n    weights " + str(r.weights) + "\n    lse " + str(r.lse);
}


attn_layout layout_of(const view &t, int64_t batch_stride) { return attn_layout{batch_stride, t.s[1], t.s[2]}; }

}  // namespace fuzz::ragged_fuzz
