// Packed sequences in the API fuzzer: attn_sdpa / attn_sdpa_f32 and their backwards with
// q_start and kv_start (cumulative starts, valid or broken: a first entry other than 0, a
// decreasing step, a count above len_q / len_kv, values near INT32_MAX; sequences of no rows;
// kv_len per sequence), the serving step (q_start over a paged cache whose pages sequences may
// share, kv_len, ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN) and latent attention (v inside k's rows: the
// same rows and strides, dim_v <= dim_qk, starting anywhere in the row), with any packed
// strides (unused batch strides set to anything), masks, windows, softcap, ALiBi, sinks,
// dropout and lse. Each call goes through execute() (fuzz_support.hpp); on top of its checks:
//  - a call the API defines as valid, whose outputs each have a buffer of their own and an
//    injective layout, is accepted;
//  - outputs start as NaN: with clean inputs an accepted call leaves every element of them
//    finite (no row left unwritten); a sequence without keys gives zero rows and lse -inf (with
//    sinks: the sink); in the backward, the dk and dv rows of keys no query sees are zeros.
#include "fuzz_ragged.hpp"

namespace fuzz {

namespace {

using namespace ragged_fuzz;

// Three inputs in four are tidy: every choice valid, except the unused batch strides, which
// any value may take. The others break rules freely. (Valid calls are what reach the
// kernels; a rule broken anywhere in an untidy call is a likely rejection.)
bool tidy = false;

// A rule-breaking choice, taken 1 time in n when the input is not tidy.
bool breaks(FuzzedDataProvider &in, int n) { return !tidy && in.ConsumeIntegralInRange<int>(0, n - 1) == 0; }

int64_t sized(FuzzedDataProvider &in, int64_t typical, int64_t large) {
    if (!tidy) return size_in(in, typical, large);
    return in.ConsumeIntegralInRange<int64_t>(1, in.ConsumeIntegralInRange<int>(0, 7) == 0 ? large : typical);
}

// choose_strides; in a tidy input, a layout with a negative stride or an undefined extent
// becomes dense.
void strides_in(FuzzedDataProvider &in, view &t) {
    choose_strides(in, t);
    if (tidy && (t.s[0] < 0 || t.s[1] < 0 || t.s[2] < 0 || extent(t) < 0 || extent(t) > max_buffer_floats)) set_dense(t);
}

bool starts_valid(const std::vector<int32_t> &s, int64_t max_count) {
    if (s.empty() || s[0] != 0) return false;
    for (size_t b = 0; b + 1 < s.size(); ++b) {
        const int64_t count = int64_t(s[b + 1]) - s[b];
        if (count < 0 || count > max_count) return false;
    }
    return true;
}

// Cumulative starts of `batch` sequences of at most `max_count` rows: counts in
// [0, max_count], often 0, 1 or max_count; now and then broken. A batch outside [1, 64] gets
// two entries (the call must be rejected before reading them).
std::vector<int32_t> starts_in(FuzzedDataProvider &in, int64_t batch, int64_t max_count) {
    if (batch < 1 || batch > 64) return {0, 0};
    const int64_t cap = std::min<int64_t>(max_count, 64);  // larger packs are too large to fuzz
    std::vector<int32_t> s{0};
    for (int64_t b = 0; b < batch; ++b) {
        int64_t count;
        switch (in.ConsumeIntegralInRange<int>(0, 7)) {
        case 0: count = 0; break;
        case 1: count = std::min<int64_t>(1, cap); break;
        case 2: count = cap; break;
        default: count = in.ConsumeIntegralInRange<int64_t>(0, std::max<int64_t>(cap, 0));
        }
        s.push_back(static_cast<int32_t>(s.back() + count));
    }
    const size_t at = in.ConsumeIntegralInRange<size_t>(0, size_t(batch) - 1);
    switch (tidy ? 19 : in.ConsumeIntegralInRange<int>(0, 19)) {
    case 0: s[0] = in.ConsumeBool() ? 1 : -1; break;
    case 1: s[at + 1] = s[at] - in.ConsumeIntegralInRange<int32_t>(1, 3); break;  // decreasing
    case 2:  // one count above max_count, the later starts shifted with it
        if (max_count < 1000)
            for (size_t b = at + 1; b < s.size(); ++b) s[b] += static_cast<int32_t>(max_count + 1 - (s[at + 1] - s[at]));
        break;
    case 3: s.back() = INT32_MAX; break;
    case 4: s[at + 1] = INT32_MIN; break;
    default: break;
    }
    return s;
}

// kv_len for the sequences' key counts `keys` (capacity len_kv): mostly in [0, keys[b]],
// sometimes just outside.
std::vector<int32_t> lengths_in(FuzzedDataProvider &in, const std::vector<int64_t> &keys) {
    std::vector<int32_t> out;
    for (int64_t k : keys) {
        k = std::max<int64_t>(k, 0);
        int64_t v = in.ConsumeIntegralInRange<int64_t>(0, k);
        switch (in.ConsumeIntegralInRange<int>(0, 11)) {
        case 0: v = 0; break;
        case 1: v = k; break;
        case 2: v = tidy ? v : k + 1; break;
        case 3: v = tidy ? v : -1; break;
        default: break;
        }
        out.push_back(static_cast<int32_t>(v));
    }
    return out;
}

// The API's rule for a layout written through (out, dq, dk, dv): the dims of size > 1 sorted
// by stride (the contiguous one first), each stride at least the extent of those before it.
bool injective_rule(const view &t) {
    std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
    if (t.n[3] > 1) dims.push_back({1, t.n[3]});
    for (int i = 2; i >= 0; --i)
        if (t.n[i] > 1) dims.push_back({t.s[i], t.n[i]});
    std::stable_sort(dims.begin(), dims.end(), [](auto &a, auto &b) { return a.first < b.first; });
    int64_t spanned = 1;
    for (auto [stride, size] : dims) {
        if (stride < spanned) return false;
        spanned = sat_add(spanned, sat_mul(size - 1, stride));
    }
    return true;
}

// Places a view; one whose extent overflows gets a small buffer (the API must reject it
// before reading). False: too large to fuzz.
bool place_any(pool &p, view &t, value_source &src) {
    if (extent(t) >= 0) return p.place(t, src);
    const int64_t offset = t.offset;
    view small = dense(1, 1, 1, 4);
    small.offset = offset;
    if (!p.place(small, src)) return false;
    t.buf = small.buf;
    return true;
}

bool outputs_overlap(const std::vector<view> &outputs, const std::vector<view> &inputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
        for (const view &x : inputs)
            if (overlap(outputs[i], x)) return true;
        for (size_t j = i + 1; j < outputs.size(); ++j)
            if (overlap(outputs[i], outputs[j])) return true;
    }
    return false;
}

void poison(pool &p, const view &t) {
    if (t.buf >= 0)
        for (auto &x : p.bufs[static_cast<size_t>(t.buf)]) x = NAN;
}

// A packed [rows, heads, dim] tensor: view {1, heads, rows, dim} with strides from the input.
view packed(FuzzedDataProvider &in, int64_t heads, int64_t rows, int64_t dim) {
    view t = dense(1, heads, rows, dim);
    strides_in(in, t);
    t.offset = offset_in(in);
    return t;
}

void decode_shape(FuzzedDataProvider &in, ragged &r) {
    tidy = in.ConsumeIntegralInRange<int>(0, 3) != 3;  // an exhausted input reads 0: tidy
    r.mla = in.ConsumeIntegralInRange<int>(0, 3) == 0;
    r.batch = sized(in, 4, 9);
    r.heads_kv = r.mla && in.ConsumeBool() ? 1 : sized(in, 2, 3);
    r.heads_q = breaks(in, 8) ? size_in(in, 4, 8)
                                                          : sat_mul(r.heads_kv, in.ConsumeIntegralInRange<int64_t>(1, r.mla ? 8 : 3));
    r.len_q = sized(in, 9, 40);
    r.len_kv = sized(in, 12, 130);
    r.dim_qk = sized(in, 12, 72);
    if (r.mla)  // v is the first dim_v elements of each k row, or any dim_v of them
        r.dim_v = breaks(in, 16) ? size_in(in, 12, 72)
                                                              : in.ConsumeIntegralInRange<int64_t>(1, std::max<int64_t>(std::min<int64_t>(r.dim_qk, 72), 1));
    else
        r.dim_v = in.ConsumeBool() ? r.dim_qk : sized(in, 12, 72);
    // an exhausted input reads 0: q_start over a paged cache, a serving step
    r.use_q_start = in.ConsumeIntegralInRange<int>(0, 7) != 7;
    r.use_kv_start = in.ConsumeIntegralInRange<int>(0, 2) == 2;
    r.paged = !r.use_kv_start ? in.ConsumeIntegralInRange<int>(0, 2) == 0 : breaks(in, 32);
    r.typed_entry = in.ConsumeBool();
}

// q_start, kv_start, kv_len and the page table with their validity.
void decode_sequences(FuzzedDataProvider &in, ragged &r) {
    const bool batch_ok = r.batch >= 1 && r.batch <= 64;
    if (!batch_ok && (r.use_q_start || r.use_kv_start)) r.starts_ok = false;  // sizes rejected
    if (r.use_q_start) {
        r.q_start = starts_in(in, r.batch, r.len_q);
        r.starts_ok = r.starts_ok && starts_valid(r.q_start, r.len_q);
    }
    if (r.use_kv_start) {
        r.kv_start = starts_in(in, r.batch, r.len_kv);
        r.starts_ok = r.starts_ok && starts_valid(r.kv_start, r.len_kv);
    }
    std::vector<int64_t> keys;  // each sequence's key count K_b
    for (int64_t b = 0; batch_ok && b < r.batch; ++b)
        keys.push_back(r.use_kv_start && r.starts_ok ? int64_t(r.kv_start[b + 1]) - r.kv_start[b] : std::min<int64_t>(r.len_kv, 100000));
    if (batch_ok && in.ConsumeIntegralInRange<int>(0, r.paged ? 1 : 2) == 0) {
        r.kv_len = lengths_in(in, keys);
        for (size_t b = 0; b < r.kv_len.size(); ++b)
            r.kv_len_ok = r.kv_len_ok && r.kv_len[b] >= 0 && r.kv_len[b] <= r.len_kv && r.kv_len[b] <= keys[b];
    }
    if (!r.paged) return;
    r.page_size = in.ConsumeIntegralInRange<int64_t>(breaks(in, 32) ? 0 : 1, 8);
    if (r.len_kv > 100000) {  // a table that long is not fuzzed: a short one, to be rejected
        r.table_stride = 1, r.num_pages = 1, r.pages_ok = false;
        r.block_table.assign(4, 0);
        return;
    }
    const int64_t per_seq = r.page_size > 0 && r.len_kv > 0 ? (r.len_kv + r.page_size - 1) / r.page_size : 1;
    r.num_pages = in.ConsumeIntegralInRange<int64_t>(breaks(in, 32) ? 0 : 1,
                                                     std::max<int64_t>(1, std::min<int64_t>(sat_mul(per_seq, std::max<int64_t>(r.batch, 1)), 48)));
    r.table_stride = per_seq + in.ConsumeIntegralInRange<int64_t>(breaks(in, 32) ? -1 : 0, 2);
    r.pages_ok = r.page_size >= 1 && r.num_pages >= 1 && r.table_stride >= per_seq && !r.use_kv_start;
    if (!batch_ok || r.table_stride < 1) {  // rejected for its sizes or its stride
        r.block_table.assign(4, 0);
        return;
    }
    r.block_table.resize(size_t(r.batch * r.table_stride));
    for (auto &id : r.block_table) id = static_cast<int32_t>(in.ConsumeIntegralInRange<int64_t>(0, std::max<int64_t>(r.num_pages - 1, 0)));
    if (breaks(in, 16))  // a page id out of range (in use or not)
        r.block_table[in.ConsumeIntegralInRange<size_t>(0, r.block_table.size() - 1)] =
            in.ConsumeBool() ? -1 : static_cast<int32_t>(r.num_pages);
    for (int64_t b = 0; r.pages_ok && b < r.batch; ++b) {
        const int64_t used_keys = r.kv_len.empty() ? r.len_kv : std::clamp<int64_t>(r.kv_len[b], 0, r.len_kv);
        for (int64_t e = 0; e < (used_keys + r.page_size - 1) / r.page_size; ++e) {
            const int32_t id = r.block_table[size_t(b * r.table_stride + e)];
            if (id < 0 || id >= r.num_pages) r.pages_ok = false;
        }
    }
}

int64_t total_rows(const std::vector<int32_t> &starts, bool ok) { return ok ? starts.back() : 1; }

// The tensors: packed or dense q and out, packed, paged or dense k; v inside k with MLA.
bool decode_tensors(FuzzedDataProvider &in, pool &p, value_source &src, ragged &r) {
    const bool ok = r.starts_ok;
    if (r.use_q_start) {
        r.q = packed(in, r.heads_q, total_rows(r.q_start, ok), r.dim_qk);
        r.out = packed(in, r.heads_q, total_rows(r.q_start, ok), r.dim_v);
    } else {
        r.q = dense(r.batch, r.heads_q, r.len_q, r.dim_qk), r.out = dense(r.batch, r.heads_q, r.len_q, r.dim_v);
        strides_in(in, r.q), strides_in(in, r.out);
    }
    if (r.use_kv_start) {
        r.k = packed(in, r.heads_kv, total_rows(r.kv_start, ok), r.dim_qk);
    } else {
        r.k = dense(r.paged ? r.num_pages : r.batch, r.heads_kv, r.paged ? r.page_size : r.len_kv, r.dim_qk);
        strides_in(in, r.k);
        r.k.offset = offset_in(in);
    }
    // Unused batch strides: anything, negative included.
    static const int64_t junk[] = {0, -1, -7, 3, INT64_MIN, INT64_MAX};
    r.q_batch_stride = r.use_q_start && in.ConsumeBool() ? junk[in.ConsumeIntegralInRange<int>(0, 5)] : r.q.s[0];
    r.out_batch_stride = r.use_q_start && in.ConsumeBool() ? junk[in.ConsumeIntegralInRange<int>(0, 5)] : r.out.s[0];
    r.kv_batch_stride = r.use_kv_start && in.ConsumeBool() ? junk[in.ConsumeIntegralInRange<int>(0, 5)] : r.k.s[0];
    if (!place_any(p, r.q, src) || !place_any(p, r.k, src)) return false;
    if (r.mla) {  // v: the same rows as k, dim_v elements from `shift` on
        r.v = r.k;
        r.v.n[3] = r.dim_v;
        const int64_t room = r.dim_v >= 0 && r.dim_qk > r.dim_v ? std::min<int64_t>(r.dim_qk - r.dim_v, 64) : 0;
        const int64_t shift = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<int64_t>(0, room);
        view host = r.k;
        host.offset += shift;
        if (r.k.buf >= 0 && extent(r.v) >= 0 ? !p.alias(r.v, host, src) : !place_any(p, r.v, src)) return false;
    } else {
        r.v = r.k;
        r.v.n[3] = r.dim_v;
        if (in.ConsumeIntegralInRange<int>(0, 3) != 0) strides_in(in, r.v);
        r.v.offset = offset_in(in);
        if (!place_any(p, r.v, src)) return false;
    }
    return true;
}

void decode_options(FuzzedDataProvider &in, pool &p, value_source &src, ragged &r, attn_sdpa_desc &d) {
    const int causal = tidy ? in.ConsumeIntegralInRange<int>(0, r.kv_len.empty() ? 2 : 3) : enum_in(in, 4);
    set_enum(d.causal, causal);
    const float scale = scale_in(in, d.scale);
    if (!tidy || moderate_scale(scale)) d.scale = scale;
    d.dropout_p = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? dropout_in(in) : 0.0f;
    if (tidy && !dropout_valid(d.dropout_p)) d.dropout_p = 0.0f;
    d.dropout_seed = in.ConsumeIntegral<uint64_t>();
    static const int64_t windows[] = {-1, -1, -1, 0, 1, 3, 8, -2};
    d.window_left = windows[in.ConsumeIntegralInRange<int>(0, tidy ? 6 : 7)];
    d.window_right = windows[in.ConsumeIntegralInRange<int>(0, tidy ? 6 : 7)];
    static const float caps[] = {0.0f, 0.0f, 0.0f, 5.0f, 0.5f, -1.0f, NAN};
    d.softcap = caps[in.ConsumeIntegralInRange<int>(0, tidy ? 4 : 6)];
    const bool heads_ok = r.heads_q >= 1 && r.heads_q <= 64;
    if (heads_ok && in.ConsumeIntegralInRange<int>(0, 4) == 0) {
        for (int64_t h = 0; h < r.heads_q; ++h) r.slopes.push_back(0.0625f * float(in.ConsumeIntegralInRange<int>(0, 8)));
        if (breaks(in, 16)) r.slopes[0] = NAN;
    }
    if (heads_ok && in.ConsumeIntegralInRange<int>(0, 4) == 0) {
        static const float sink_values[] = {0.0f, 1.5f, -3.0f, -INFINITY, INFINITY, NAN};
        for (int64_t h = 0; h < r.heads_q; ++h)
            r.sinks.push_back(sink_values[in.ConsumeIntegralInRange<int>(0, breaks(in, 16) ? 5 : 3)]);
    }
    bool slopes_ok = true, sinks_ok = true;
    for (float s : r.slopes) slopes_ok = slopes_ok && std::isfinite(s);
    for (float s : r.sinks) sinks_ok = sinks_ok && !std::isnan(s) && s != INFINITY;
    r.options_ok = ((causal >= 0 && causal <= 2) || (causal == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN && !r.kv_len.empty())) &&
                   std::isfinite(d.scale) && dropout_valid(d.dropout_p) && d.window_left >= -1 && d.window_right >= -1 &&
                   std::isfinite(d.softcap) && d.softcap >= 0.0f && slopes_ok && sinks_ok;
    if (in.ConsumeIntegralInRange<int>(0, 5) == 0) {
        r.mask = dense(r.batch, r.heads_q, r.len_q, r.len_kv);
        strides_in(in, r.mask);
        if (extent(r.mask) >= 0 && extent(r.mask) <= max_buffer_floats && elements(r.mask) <= max_view_elements &&
            p.place(r.mask, src)) {
            auto &m = p.bufs[static_cast<size_t>(r.mask.buf)];
            for (int i = in.ConsumeIntegralInRange<int>(0, 6); i > 0; --i)
                m[in.ConsumeIntegralInRange<size_t>(0, m.size() - 1)] = -INFINITY;
        } else {
            r.mask = view{};
        }
    }
}

// With ATTN_FUZZ_STATS set: the valid calls whose results were checked, by kind.
struct checked_counts {
    uint64_t forward = 0, backward = 0, packed_q = 0, packed_kv = 0, paged = 0, latent = 0, empty = 0;
};
checked_counts &checked() {
    static checked_counts c;
    static const bool told = [] {
        if (std::getenv("ATTN_FUZZ_STATS"))
            std::atexit([] {
                const checked_counts &k = checked();
                std::fprintf(stderr,
                             "fuzz_api: packed sequences checked: %llu forward, %llu backward; %llu with q_start, %llu "
                             "with kv_start, %llu paged, %llu latent (v in k), %llu with an empty sequence\n",
                             (unsigned long long)k.forward, (unsigned long long)k.backward,
                             (unsigned long long)k.packed_q, (unsigned long long)k.packed_kv,
                             (unsigned long long)k.paged, (unsigned long long)k.latent, (unsigned long long)k.empty);
            });
        return true;
    }();
    (void)told;
    return c;
}
void count_checked(const ragged &r, bool backward) {
    checked_counts &c = checked();
    ++(backward ? c.backward : c.forward);
    c.packed_q += r.use_q_start, c.packed_kv += r.use_kv_start, c.paged += r.paged, c.latent += r.mla;
    bool empty = false;
    for (int64_t b = 0; b < r.batch; ++b) {
        const int64_t n = r.use_q_start ? int64_t(r.q_start[b + 1]) - r.q_start[b] : r.len_q;
        const int64_t keys = r.use_kv_start ? int64_t(r.kv_start[b + 1]) - r.kv_start[b] : r.len_kv;
        empty |= n == 0 || keys == 0 || (!r.kv_len.empty() && r.kv_len[b] == 0);
    }
    c.empty += empty;
}

// Every layout stride the API reads is >= 0 and every extent defined.
bool layouts_ok(const ragged &r) {
    for (const view *t : {&r.q, &r.k, &r.v, &r.out})
        if (t->s[1] < 0 || t->s[2] < 0 || extent(*t) < 0) return false;
    if (!r.use_q_start && (r.q.s[0] < 0 || r.out.s[0] < 0)) return false;
    if (!r.use_kv_start && (r.k.s[0] < 0 || r.v.s[0] < 0)) return false;
    if (r.mask.buf >= 0 && (r.mask.s[0] < 0 || r.mask.s[1] < 0 || r.mask.s[2] < 0 || extent(r.mask) < 0)) return false;
    return true;
}

bool decode_backward(FuzzedDataProvider &in, pool &p, value_source &src, call &c, std::shared_ptr<ragged> rp,
                     attn_sdpa_desc d, bool valid, int alias);

}  // namespace

bool decode_sdpa_ragged(FuzzedDataProvider &in, pool &p, value_source &src, call &c, bool backward) {
    auto rp = std::make_shared<ragged>();
    ragged &r = *rp;
    decode_shape(in, r);
    if (backward) r.paged = false;  // paged K/V has no backward (ATTN_UNSUPPORTED)
    decode_sequences(in, r);
    if (!decode_tensors(in, p, src, r)) return false;
    attn_sdpa_desc d = make_desc(r);
    decode_options(in, p, src, r, d);
    const int64_t total_q = r.use_q_start ? total_rows(r.q_start, r.starts_ok) : 0;
    if (in.ConsumeIntegralInRange<int>(0, 2) == 0) {
        r.lse = r.use_q_start ? matrix(total_q, r.heads_q, r.heads_q) : dense(r.batch, r.heads_q, r.len_q, 1);
        if (!place_any(p, r.lse, src)) return false;
    }
    if (!backward && in.ConsumeIntegralInRange<int>(0, 7) == 0 && !(tidy && (r.use_q_start || r.use_kv_start))) {
        r.weights = dense(r.batch, r.heads_q, r.len_q, r.len_kv);
        if (!place_any(p, r.weights, src)) return false;
    }
    const int special_mode = tidy ? 9 : in.ConsumeIntegralInRange<int>(0, 9);  // 0, 1: NaN or specials
    if (special_mode == 0 && r.q.buf >= 0) {
        auto &qb = p.bufs[static_cast<size_t>(r.q.buf)];
        qb[in.ConsumeIntegralInRange<size_t>(0, qb.size() - 1)] = NAN;
    } else if (special_mode == 1) {
        inject_specials(in, p, {r.q.buf, r.k.buf, r.v.buf, r.mask.buf});
    }
    const int alias = tidy ? 2 : in.ConsumeIntegralInRange<int>(0, 23);  // 0, 1: an output over an input
    const int nulls = tidy ? 47 : in.ConsumeIntegralInRange<int>(0, 47);
    view *nullable[] = {&r.q, &r.k, &r.v, &r.out};
    if (nulls < 4) nullable[nulls]->buf = -1;
    r.out_null = nulls == 3;

    // The element counts of the dense tensors fit int64, as the rules ask even of packed calls.
    auto fits = [](std::initializer_list<int64_t> dims) {
        int64_t n = 1;
        for (int64_t x : dims)
            if (__builtin_mul_overflow(n, x, &n)) return false;
        return true;
    };
    const bool sizes_ok = r.batch >= 1 && r.heads_q >= 1 && r.heads_kv >= 1 && r.len_q >= 1 && r.len_kv >= 1 &&
                          r.dim_qk >= 1 && r.dim_v >= 1 && r.heads_q % r.heads_kv == 0 &&
                          fits({r.batch, r.heads_q, r.len_q, r.dim_qk}) && fits({r.batch, r.heads_q, r.len_q, r.dim_v}) &&
                          fits({r.batch, r.heads_kv, r.len_kv, r.dim_qk}) && fits({r.batch, r.heads_kv, r.len_kv, r.dim_v}) &&
                          (r.mask.buf < 0 && r.weights.buf < 0 ? true : fits({r.batch, r.heads_q, r.len_q, r.len_kv}));
    bool valid = sizes_ok && r.starts_ok && r.kv_len_ok && (!r.paged || r.pages_ok) && r.options_ok && layouts_ok(r) &&
                 r.q.buf >= 0 && r.k.buf >= 0 && r.v.buf >= 0 && !r.out_null &&
                 (r.weights.buf < 0 || (!r.use_q_start && !r.use_kv_start && extent(r.weights) >= 0)) &&
                 (r.lse.buf < 0 || extent(r.lse) >= 0);
    c.compare = special_mode > 1 && moderate_scale(d.scale);
    c.describe = [rp, d, backward] { return describe(*rp, d, backward); };
    if (backward) return decode_backward(in, p, src, c, rp, d, valid, alias);

    if (!r.out_null) {
        if (alias < 2) {
            if (!p.alias(r.out, alias == 0 ? r.q : r.k, src)) return false;
        } else {
            if (!place_any(p, r.out, src)) return false;
            poison(p, r.out);
        }
    }
    poison(p, r.lse);
    poison(p, r.weights);
    valid = valid && r.out.buf >= 0 && extent(r.out) >= 0 && !aliased_within(r.out) &&
            !outputs_overlap({r.out, r.weights, r.lse}, {r.q, r.k, r.v, r.mask});
    c.must_reject = !valid;
    c.must_accept = valid && alias >= 2 && injective_rule(r.out);
    c.outputs = {r.out, r.weights, r.lse};
    c.run = [&p, rp, d](attn_context *ctx) {
        const ragged &x = *rp;
        const attn_sdpa_desc dd = with_pointers(d, x, p);
        if (x.typed_entry) return attn_sdpa(ctx, &dd, p.at(x.q), p.at(x.k), p.at(x.v), p.at(x.out));
        return attn_sdpa_f32(ctx, &dd, p.at(x.q), p.at(x.k), p.at(x.v), p.at(x.out));
    };
    if (valid && c.compare)
        c.check = [rp](const snapshot &ref, const snapshot &simd) {
            count_checked(*rp, false);
            check_forward(*rp, ref, simd);
        };
    return true;
}

namespace {

bool decode_backward(FuzzedDataProvider &in, pool &p, value_source &src, call &c, std::shared_ptr<ragged> rp,
                     attn_sdpa_desc d, bool valid, int alias) {
    ragged &r = *rp;
    view dout = r.out, dq = r.q, dk = r.k, dv = r.v, dsinks;
    if ((!r.out_null && !place_any(p, r.out, src)) || !place_any(p, dout, src)) return false;
    for (view *t : {&dq, &dk, &dv})
        if (t->buf >= 0 && !place_any(p, *t, src)) return false;
    if (alias < 2) {  // a gradient written over its input
        if (!p.alias(alias == 0 ? dq : dk, alias == 0 ? r.q : r.k, src)) return false;
    } else {
        for (const view *t : {&dq, &dk, &dv}) poison(p, *t);
    }
    if (!r.sinks.empty() && in.ConsumeBool()) {
        dsinks = dense(1, 1, 1, r.heads_q);
        if (!p.place(dsinks, src)) return false;
        poison(p, dsinks);
    }
    if (breaks(in, 48)) dout.buf = -1;
    view lse = r.lse;
    if (valid) {  // out and lse of the reference forward
        attn_sdpa_desc fwd = with_pointers(d, r, p);
        if (attn_sdpa_f32(contexts().reference, &fwd, p.at(r.q), p.at(r.k), p.at(r.v), p.at(r.out)) != ATTN_OK) lse.buf = -1;
    } else if (in.ConsumeBool()) {
        lse.buf = -1;
    }
    valid = valid && dout.buf >= 0 && extent(dout) >= 0 && dq.buf >= 0 && dk.buf >= 0 && dv.buf >= 0 &&
            !aliased_within(dq) && !aliased_within(dk) && !aliased_within(dv) &&
            !outputs_overlap({dq, dk, dv, dsinks}, {r.q, r.k, r.v, r.out, dout, lse, r.mask});
    c.must_reject = !valid;
    c.must_accept = valid && alias >= 2 && injective_rule(r.q) && injective_rule(r.k) && injective_rule(r.v);
    c.outputs = {dq, dk, dv, dsinks};
    if (d.dropout_p > 0.5f) c.compare = false;  // 1/(1-p) amplifies rounding beyond the tolerance
    // An out that overlaps itself cannot hold the forward's output, as the backward asks: D =
    // dO . O is then not the P's. The paths agree on D as read from out, but a row whose every
    // score is -inf (a mask) with a sink has no gradient in the reference, while the fused
    // path, given lse (the sink's, finite), takes dsink = -P_sink D from that out.
    if (aliased_within(r.out)) c.compare = false;
    c.run = [&p, rp, d, dout, lse, dq, dk, dv, dsinks](attn_context *ctx) {
        const ragged &x = *rp;
        attn_sdpa_desc dd = with_pointers(d, x, p);
        dd.lse = nullptr, dd.dsinks = p.at(dsinks);
        if (x.typed_entry)
            return attn_sdpa_backward(ctx, &dd, p.at(x.q), p.at(x.k), p.at(x.v), p.at(x.out), p.at(dout), p.at(lse),
                                      p.at(dq), p.at(dk), p.at(dv));
        return attn_sdpa_backward_f32(ctx, &dd, p.at(x.q), p.at(x.k), p.at(x.v), p.at(x.out), p.at(dout), p.at(lse),
                                      p.at(dq), p.at(dk), p.at(dv));
    };
    if (valid && c.compare)
        c.check = [rp, dq, dk, dv, dsinks](const snapshot &ref, const snapshot &simd) {
            count_checked(*rp, true);
            check_backward(*rp, dk, dv, dq, dsinks, ref, simd);
        };
    return true;
}

}  // namespace

}  // namespace fuzz
