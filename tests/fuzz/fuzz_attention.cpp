// The attention ops of the API fuzzer: scaled dot-product attention (forward and backward,
// any strides, masks, kv_len, causal modes, dropout, aliasing) and multi-head attention.
#include "fuzz_decode.hpp"

namespace fuzz {

namespace {

// Which keys query row (b, h, i) sees: causal mode, kv_len padding and -inf mask entries.
struct visibility {
    int64_t len_q, len_kv;
    int causal;
    std::vector<int32_t> kv_len;  // empty: none
    std::vector<float> mask;      // dense copy [batch, heads_q, len_q, len_kv]; empty: none
    int64_t heads_q;

    bool visible(int64_t b, int64_t h, int64_t i, int64_t j) const {
        if (causal == ATTN_CAUSAL_TOP_LEFT && j > i) return false;
        if (causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + (len_kv - len_q)) return false;
        if (causal == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN && j > i + (kv_len[static_cast<size_t>(b)] - len_q))
            return false;
        if (!kv_len.empty() && j >= kv_len[static_cast<size_t>(b)]) return false;
        if (!mask.empty() && mask[static_cast<size_t>(((b * heads_q + h) * len_q + i) * len_kv + j)] == -INFINITY)
            return false;
        return true;
    }
    int64_t count(int64_t b, int64_t h, int64_t i) const {
        int64_t n = 0;
        for (int64_t j = 0; j < len_kv; ++j) n += visible(b, h, i, j);
        return n;
    }
};

float element(const pool &p, const view &t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return p.bufs[static_cast<size_t>(t.buf)][static_cast<size_t>(t.offset + a * t.s[0] + b * t.s[1] + c * t.s[2] + d)];
}
const float *row(const snapshot &s, const view &t, int64_t a, int64_t b, int64_t c) {
    return &s[static_cast<size_t>(t.buf)][static_cast<size_t>(t.offset + a * t.s[0] + b * t.s[1] + c * t.s[2])];
}
attn_layout layout(const view &t) { return attn_layout{t.s[0], t.s[1], t.s[2]}; }

bool any_overlap(const std::vector<view> &outputs, const std::vector<view> &inputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
        if (outputs[i].buf < 0) continue;
        for (const view &in : inputs)
            if (overlap(outputs[i], in)) return true;
        for (size_t j = i + 1; j < outputs.size(); ++j)
            if (overlap(outputs[i], outputs[j])) return true;
    }
    return false;
}

}  // namespace

bool decode_sdpa(FuzzedDataProvider &in, pool &p, value_source &src, call &c, bool backward) {
    int64_t batch = size_in(in, 3, 5), heads_kv = size_in(in, 3, 4);
    int64_t heads_q = in.ConsumeIntegralInRange<int>(0, 7) == 0
                          ? size_in(in, 4, 8)
                          : sat_mul(heads_kv, in.ConsumeIntegralInRange<int64_t>(1, 3));
    int64_t len_q = size_in(in, 9, 70), len_kv = size_in(in, 9, 200);
    int64_t dim_qk = size_in(in, 9, 70), dim_v = in.ConsumeBool() ? dim_qk : size_in(in, 9, 70);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, batch, heads_q, len_q, len_kv, dim_qk);
    d.heads_kv = heads_kv;
    d.dim_v = dim_v;

    view q = dense(batch, heads_q, len_q, dim_qk), k = dense(batch, heads_kv, len_kv, dim_qk);
    view v = dense(batch, heads_kv, len_kv, dim_v), out = dense(batch, heads_q, len_q, dim_v);
    for (view *t : {&q, &k, &v, &out}) {
        choose_strides(in, *t);
        t->offset = offset_in(in);
    }
    if (!p.place(q, src) || !p.place(k, src) || !p.place(v, src)) return false;
    int alias = in.ConsumeIntegralInRange<int>(0, 31);
    if (!backward && alias < 3) {
        if (!p.alias(out, alias == 0 ? q : alias == 1 ? k : v, src)) return false;
    } else if (!p.place(out, src)) {
        return false;
    }
    const int causal = enum_in(in, 4);  // 3: each sequence's own length (needs kv_len)
    set_enum(d.causal, causal);
    d.scale = scale_in(in, d.scale);
    d.dropout_p = dropout_in(in);
    d.dropout_seed = in.ConsumeIntegral<uint64_t>();

    view mask, weights, lse;
    if (in.ConsumeIntegralInRange<int>(0, 2) == 0) {
        mask = dense(batch, heads_q, len_q, len_kv);
        choose_strides(in, mask);
        if (!p.place(mask, src)) return false;
        auto &m = p.bufs[static_cast<size_t>(mask.buf)];
        for (int i = in.ConsumeIntegralInRange<int>(0, 6); i > 0; --i)
            m[in.ConsumeIntegralInRange<size_t>(0, m.size() - 1)] = -INFINITY;
    }
    bool kv_len_valid = true;
    std::vector<int32_t> kv_len;
    if (in.ConsumeIntegralInRange<int>(0, 3) == 0) kv_len = kv_len_in(in, batch, len_kv, &kv_len_valid);
    if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
        weights = dense(batch, heads_q, len_q, len_kv);
        if (!backward && alias == 3 ? !p.alias(weights, out, src) : !p.place(weights, src)) return false;
    }
    if (in.ConsumeIntegralInRange<int>(0, 2) == 0) {
        lse = dense(batch, heads_q, len_q, 1);
        if (!backward && alias == 4 ? !p.alias(lse, q, src) : !p.place(lse, src)) return false;
    }

    // Special values: NaN in q only (its rows become NaN), anywhere in the inputs, or none.
    int special_mode = in.ConsumeIntegralInRange<int>(0, 7);
    unsigned special = 0;
    if (special_mode == 0) {
        auto &qb = p.bufs[static_cast<size_t>(q.buf)];
        for (int i = in.ConsumeIntegralInRange<int>(1, 2); i > 0; --i)
            qb[in.ConsumeIntegralInRange<size_t>(0, qb.size() - 1)] = NAN;
        special = 1;
    } else if (special_mode == 1) {
        special = inject_specials(in, p, {q.buf, k.buf, v.buf, mask.buf}) | 32;
    }
    int nulls = in.ConsumeIntegralInRange<int>(0, 47);
    view *nullable[] = {&q, &k, &v, &out};
    if (nulls < 4) nullable[nulls]->buf = -1;

    bool valid = batch >= 1 && heads_q >= 1 && heads_kv >= 1 && len_q >= 1 && len_kv >= 1 && dim_qk >= 1 &&
                 dim_v >= 1 && heads_q % heads_kv == 0 && q.buf >= 0 && k.buf >= 0 && v.buf >= 0 &&
                 out.buf >= 0 && extent(q) > 0 && extent(k) > 0 && extent(v) > 0 && extent(out) > 0 &&
                 (mask.buf < 0 || extent(mask) > 0) && (weights.buf < 0 || extent(weights) > 0) &&
                 (lse.buf < 0 || extent(lse) > 0) &&
                 ((causal >= 0 && causal <= 2) || (causal == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN && !kv_len.empty())) &&
                 std::isfinite(d.scale) && dropout_valid(d.dropout_p) && kv_len_valid;
    d.q = layout(q), d.k = layout(k), d.v = layout(v), d.out = layout(out);
    d.mask_strides = layout(mask);
    c.describe = [=] {
        char s[256];
        std::snprintf(s, sizeof s, "%s B=%lld Hq=%lld Hkv=%lld Lq=%lld Lkv=%lld Dqk=%lld Dv=%lld causal=%d scale=%g p=%g kv_len=%s special=%u",
                      backward ? "sdpa_backward" : "sdpa", (long long)batch, (long long)heads_q, (long long)heads_kv,
                      (long long)len_q, (long long)len_kv, (long long)dim_qk, (long long)dim_v, causal, double(d.scale),
                      double(d.dropout_p), kv_len.empty() ? "none" : kv_len_valid ? "valid" : "invalid", special);
        return std::string(s) + "\n    q " + str(q) + "\n    k " + str(k) + "\n    v " + str(v) + "\n    out " + str(out) +
               "\n    mask " + str(mask) + "\n    weights " + str(weights) + "\n    lse " + str(lse);
    };
    c.compare = (special & ~16u) == 0 && moderate_scale(d.scale);

    if (!backward) {
        valid = valid && !aliased_within(out) && !any_overlap({out, weights, lse}, {q, k, v, mask});
        c.must_reject = !valid;
        c.outputs = {out, weights, lse};
        c.run = [&p, d, q, k, v, out, mask, weights, lse, kv_len](attn_context *ctx) {
            attn_sdpa_desc dd = d;
            dd.mask = p.at(mask), dd.weights = p.at(weights), dd.lse = p.at(lse);
            dd.kv_len = kv_len.empty() ? nullptr : kv_len.data();
            return attn_sdpa_f32(ctx, &dd, p.at(q), p.at(k), p.at(v), p.at(out));
        };
        if (!valid || (special & 32)) return true;
        // Rows every key is hidden from give zeros, lse -inf and zero weights; hidden keys get
        // weight 0; with NaN in a query row, that row is NaN and only that row.
        visibility vis{len_q, len_kv, causal, kv_len, {}, heads_q};
        std::vector<char> nan_row(static_cast<size_t>(batch * heads_q * len_q), 0);
        if (mask.buf >= 0) vis.mask.reserve(static_cast<size_t>(batch * heads_q * len_q * len_kv));
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t h = 0; h < heads_q; ++h)
                for (int64_t i = 0; i < len_q; ++i) {
                    for (int64_t e = 0; e < dim_qk; ++e)
                        if (std::isnan(element(p, q, b, h, i, e))) nan_row[(b * heads_q + h) * len_q + i] = 1;
                    if (mask.buf >= 0)
                        for (int64_t j = 0; j < len_kv; ++j) vis.mask.push_back(element(p, mask, b, h, i, j));
                }
        bool moderate = moderate_scale(d.scale);
        c.check = [vis, nan_row, out, weights, lse, batch, heads_q, len_q, len_kv, dim_v, moderate](
                      const snapshot &ref, const snapshot &simd) {
            for (int64_t b = 0; b < batch; ++b)
                for (int64_t h = 0; h < heads_q; ++h)
                    for (int64_t i = 0; i < len_q; ++i) {
                        int64_t r = (b * heads_q + h) * len_q + i, seen = vis.count(b, h, i);
                        // NaN + a -inf mask entry is NaN: whether such a key is hidden is open.
                        if (nan_row[r] && !vis.mask.empty()) continue;
                        const float *o_ref = row(ref, out, b, h, i), *o_simd = row(simd, out, b, h, i);
                        for (int64_t e = 0; e < dim_v; ++e) {
                            if (seen == 0) {
                                FUZZ_CHECK(o_ref[e] == 0.0f && o_simd[e] == 0.0f, "sdpa: fully masked row is not zero");
                            } else if (nan_row[r]) {
                                FUZZ_CHECK(std::isnan(o_ref[e]) && std::isnan(o_simd[e]), "sdpa: NaN query row not NaN");
                            } else {
                                FUZZ_CHECK(std::isfinite(o_ref[e]) && std::isfinite(o_simd[e]), "sdpa: clean row not finite");
                                if (moderate)
                                    FUZZ_CHECK(std::fabs(o_simd[e] - o_ref[e]) <= 1e-4 * (1.0 + std::fabs(o_ref[e])),
                                           "sdpa: SIMD row differs from reference");
                            }
                        }
                        if (lse.buf >= 0 && seen == 0)
                            FUZZ_CHECK(ref[lse.buf][r] == -INFINITY && simd[lse.buf][r] == -INFINITY,
                                       "sdpa: fully masked row lse is not -inf");
                        if (weights.buf < 0 || nan_row[r]) continue;
                        for (int64_t j = 0; j < len_kv; ++j)
                            if (!vis.visible(b, h, i, j))
                                FUZZ_CHECK(ref[weights.buf][r * len_kv + j] == 0.0f && simd[weights.buf][r * len_kv + j] == 0.0f,
                                           "sdpa: a hidden key has weight");
                    }
        };
        return true;
    }

    // Backward: out and lse come from a reference forward of the same call when it is valid.
    view dout = out, dq = q, dk = k, dv = v;
    dout.buf = -1;
    if (!p.place(dout, src)) return false;
    for (view *t : {&dq, &dk, &dv})
        if (t->buf >= 0 && !p.place(*t, src)) return false;
    if (alias < 3) {  // a gradient written over its input
        view *grad[] = {&dq, &dk, &dv};
        const view *input[] = {&q, &k, &v};
        if (!p.alias(*grad[alias], *input[alias], src)) return false;
    }
    if (valid) {
        attn_sdpa_desc fwd = d;
        fwd.mask = p.at(mask), fwd.lse = p.at(lse), fwd.weights = nullptr;
        fwd.kv_len = kv_len.empty() ? nullptr : kv_len.data();
        if (attn_sdpa_f32(contexts().reference, &fwd, p.at(q), p.at(k), p.at(v), p.at(out)) != ATTN_OK) lse.buf = -1;
    } else {
        lse.buf = -1;
    }
    if (in.ConsumeIntegralInRange<int>(0, 47) == 0) dout.buf = -1;
    valid = valid && dout.buf >= 0 && !aliased_within(dq) && !aliased_within(dk) && !aliased_within(dv) &&
            !any_overlap({dq, dk, dv}, {q, k, v, out, dout, lse, mask});
    c.must_reject = !valid;
    c.outputs = {dq, dk, dv};
    if (d.dropout_p > 0.5f) c.compare = false;  // 1/(1-p) amplifies rounding beyond the tolerance
    c.run = [&p, d, q, k, v, out, dout, lse, dq, dk, dv, mask, weights, kv_len](attn_context *ctx) {
        attn_sdpa_desc dd = d;
        dd.mask = p.at(mask), dd.weights = p.at(weights), dd.lse = nullptr;  // weights: ignored
        dd.kv_len = kv_len.empty() ? nullptr : kv_len.data();
        return attn_sdpa_backward_f32(ctx, &dd, p.at(q), p.at(k), p.at(v), p.at(out), p.at(dout), p.at(lse),
                                      p.at(dq), p.at(dk), p.at(dv));
    };
    return true;
}

bool decode_mha(FuzzedDataProvider &in, pool &p, value_source &src, call &c, bool backward) {
    int64_t batch = size_in(in, 2, 4), len_q = size_in(in, 6, 40);
    bool self = in.ConsumeBool();
    int64_t len_kv = self ? len_q : size_in(in, 6, 60);
    int64_t heads_kv = size_in(in, 2, 4);
    int64_t heads = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? size_in(in, 4, 8)
                                                              : sat_mul(heads_kv, in.ConsumeIntegralInRange<int64_t>(1, 3));
    int64_t head_dim = size_in(in, 6, 40), d_model = size_in(in, 8, 48);
    attn_mha_desc d;
    attn_mha_desc_init(&d, batch, len_q, len_kv, d_model, heads);
    d.heads_kv = heads_kv;
    d.head_dim = head_dim;
    int64_t q_width = sat_mul(heads, head_dim), kv_width = sat_mul(heads_kv, head_dim);

    view x_q = dense(1, batch, len_q, d_model), x_kv = dense(1, batch, len_kv, d_model);
    view y = dense(1, batch, len_q, d_model);
    view w[4] = {dense(1, 1, q_width, d_model), dense(1, 1, kv_width, d_model), dense(1, 1, kv_width, d_model),
                 dense(1, 1, d_model, q_width)};
    view bias[4] = {dense(1, 1, 1, q_width), dense(1, 1, 1, kv_width), dense(1, 1, 1, kv_width),
                    dense(1, 1, 1, d_model)};
    if (!p.place(x_q, src)) return false;
    if (self) x_kv = x_q;
    else if (!p.place(x_kv, src)) return false;
    for (int i = 0; i < 4; ++i) {
        if (!p.place(w[i], src)) return false;
        for (auto &x : p.bufs[static_cast<size_t>(w[i].buf)]) x *= 0.25f;  // keeps scores moderate
        if (in.ConsumeBool() && !p.place(bias[i], src)) return false;
    }
    const int causal = enum_in(in, 3);
    set_enum(d.causal, causal);
    d.dropout_p = dropout_in(in);
    d.dropout_seed = in.ConsumeIntegral<uint64_t>();
    bool kv_len_valid = true;
    std::vector<int32_t> kv_len;
    if (in.ConsumeIntegralInRange<int>(0, 3) == 0) kv_len = kv_len_in(in, batch, len_kv, &kv_len_valid);
    int alias = in.ConsumeIntegralInRange<int>(0, 23);

    std::vector<int> input_bufs{x_q.buf, x_kv.buf};
    for (int i = 0; i < 4; ++i) input_bufs.push_back(w[i].buf), input_bufs.push_back(bias[i].buf);
    unsigned special = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? inject_specials(in, p, input_bufs) : 0;
    int nulls = in.ConsumeIntegralInRange<int>(0, 63);
    if (nulls < 4) w[nulls].buf = -1;
    if (nulls == 4) x_q.buf = -1;
    if (nulls == 5) x_kv.buf = -1;

    std::vector<view> inputs{x_q, x_kv};
    bool valid = batch >= 1 && len_q >= 1 && len_kv >= 1 && d_model >= 1 && heads >= 1 && heads_kv >= 1 &&
                 head_dim >= 1 && heads % heads_kv == 0 && x_q.buf >= 0 && x_kv.buf >= 0 &&
                 extent(x_q) > 0 && extent(x_kv) > 0 && causal >= 0 && causal <= 2 &&
                 dropout_valid(d.dropout_p) && kv_len_valid;
    for (int i = 0; i < 4; ++i) {
        valid = valid && w[i].buf >= 0 && extent(w[i]) > 0 && (bias[i].buf < 0 || extent(bias[i]) > 0);
        inputs.push_back(w[i]), inputs.push_back(bias[i]);
    }
    c.compare = (special & ~16u) == 0;
    c.describe = [=] {
        char s[256];
        std::snprintf(s, sizeof s, "%s B=%lld Lq=%lld Lkv=%lld d_model=%lld heads=%lld heads_kv=%lld head_dim=%lld causal=%d p=%g self=%d nulls=%d alias=%d",
                      backward ? "mha_backward" : "mha", (long long)batch, (long long)len_q, (long long)len_kv,
                      (long long)d_model, (long long)heads, (long long)heads_kv, (long long)head_dim, causal,
                      double(d.dropout_p), int(self), nulls, alias);
        return std::string(s);
    };
    auto fill_desc = [w, bias, kv_len](pool &pl, attn_mha_desc dd) {
        dd.w_q = pl.at(w[0]), dd.w_k = pl.at(w[1]), dd.w_v = pl.at(w[2]), dd.w_o = pl.at(w[3]);
        dd.b_q = pl.at(bias[0]), dd.b_k = pl.at(bias[1]), dd.b_v = pl.at(bias[2]), dd.b_o = pl.at(bias[3]);
        dd.kv_len = kv_len.empty() ? nullptr : kv_len.data();
        return dd;
    };

    if (!backward) {
        if (alias == 0 ? !p.alias(y, x_q, src) : !p.place(y, src)) return false;
        if (nulls == 6) y.buf = -1;
        c.must_reject = !(valid && y.buf >= 0 && !any_overlap({y}, inputs));
        c.outputs = {y};
        c.run = [&p, d, x_q, x_kv, y, fill_desc](attn_context *ctx) {
            attn_mha_desc dd = fill_desc(p, d);
            return attn_mha_forward_f32(ctx, &dd, p.at(x_q), p.at(x_kv), p.at(y));
        };
        return true;
    }

    view dy = y, dx_q = x_q, dx_kv = dense(1, batch, len_kv, d_model);
    if (!p.place(dy, src)) return false;
    if (alias == 0 ? !p.alias(dx_q, x_q, src) : !p.place(dx_q, src)) return false;
    if (self && in.ConsumeBool()) dx_kv.buf = -1;  // the whole gradient goes to dx_q
    else if (!p.place(dx_kv, src)) return false;
    view dw[4], db[4];
    for (int i = 0; i < 4; ++i) {
        dw[i] = w[i], db[i] = bias[i];
        if (in.ConsumeIntegralInRange<int>(0, 3) == 0) dw[i].buf = -1;
        else if (!p.place(dw[i], src)) return false;
        if (bias[i].buf >= 0 && !p.place(db[i], src)) return false;
    }
    if (nulls == 6) dy.buf = -1;
    std::vector<view> outputs{dx_q, dx_kv};
    for (int i = 0; i < 4; ++i) outputs.push_back(dw[i]), outputs.push_back(db[i]);
    inputs.push_back(dy);
    c.must_reject = !(valid && dy.buf >= 0 && !any_overlap(outputs, inputs));
    c.outputs = outputs;
    if (d.dropout_p > 0.5f) c.compare = false;  // 1/(1-p) amplifies rounding beyond the tolerance
    c.run = [&p, d, x_q, x_kv, dy, dx_q, dx_kv, dw, db, fill_desc](attn_context *ctx) {
        attn_mha_desc dd = fill_desc(p, d);
        attn_mha_grads g{p.at(dw[0]), p.at(dw[1]), p.at(dw[2]), p.at(dw[3]),
                         p.at(db[0]), p.at(db[1]), p.at(db[2]), p.at(db[3])};
        return attn_mha_backward_f32(ctx, &dd, p.at(x_q), p.at(x_kv), p.at(dy), p.at(dx_q), p.at(dx_kv), &g);
    };
    return true;
}

}  // namespace fuzz
