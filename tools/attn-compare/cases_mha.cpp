// Sweeps for multi-head attention, forward and backward. The double-precision oracle is
// composed from the gemm and sdpa oracles exactly as the API describes it:
//   y = concat_h(SDPA(x_q W_q^T + b_q, x_kv W_k^T + b_k, x_kv W_v^T + b_v)) W_o^T + b_o
#include <cmath>

#include "compare.hpp"

namespace attn_compare {

namespace {

struct mha_options {
    int64_t batch = 1, len_q = 1, len_kv = 1, d_model = 64, heads = 4, heads_kv = 4, head_dim = 16;
    bool self = true, biases = false, kv_len = false, all_grads = true;
    attn_causal causal = ATTN_CAUSAL_NONE;
    float dropout_p = 0.0f;
};

std::string label(const mha_options &o) {
    std::string s = format("B%lld L%lldx%lld dm%lld H%lld", (long long)o.batch,
                           (long long)o.len_q, (long long)o.len_kv, (long long)o.d_model,
                           (long long)o.heads);
    if (o.heads_kv != o.heads) s += format("/%lld", (long long)o.heads_kv);
    s += format(" hd%lld", (long long)o.head_dim);
    s += o.self ? " self" : " cross";
    if (o.biases) s += " bias";
    if (o.causal == ATTN_CAUSAL_TOP_LEFT) s += " causal=tl";
    if (o.causal == ATTN_CAUSAL_BOTTOM_RIGHT) s += " causal=br";
    if (o.kv_len) s += " kv_len";
    if (o.dropout_p > 0.0f) s += format(" p=%g", o.dropout_p);
    return s;
}

// P[rows, out] = X[rows, in] W[out, in]^T + bias
std::vector<double> project(const std::vector<double> &x, const std::vector<double> &w,
                            const std::vector<double> &bias, int64_t rows, int64_t in,
                            int64_t out) {
    std::vector<double> p(size_t(rows * out));
    gemm_exact(ATTN_NO_TRANS, ATTN_TRANS, rows, out, in, 1.0, x.data(), in, w.data(), in, 0.0,
               p.data(), out);
    if (!bias.empty())
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < out; ++c) p[size_t(r * out + c)] += bias[size_t(c)];
    return p;
}

// Dense [batch, heads, seq, dim] -> [batch, seq, heads*dim] (the heads concatenated).
std::vector<double> concat_heads(const std::vector<double> &bhsd, int64_t batch, int64_t heads,
                                 int64_t seq, int64_t dim) {
    std::vector<double> out(bhsd.size());
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t s = 0; s < seq; ++s)
                for (int64_t x = 0; x < dim; ++x)
                    out[size_t(((b * seq + s) * heads + h) * dim + x)] =
                        bhsd[size_t(((b * heads + h) * seq + s) * dim + x)];
    return out;
}

std::vector<double> column_sums(const std::vector<double> &m, int64_t rows, int64_t cols) {
    std::vector<double> s(size_t(cols), 0.0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) s[size_t(c)] += m[size_t(r * cols + c)];
    return s;
}

void append(std::vector<double> &out, const std::vector<double> &v) {
    out.insert(out.end(), v.begin(), v.end());
}

struct mha_problem final : problem {
    mha_options o;
    bool backward;
    attn_mha_desc d;
    std::vector<float> x_q, x_kv, dy, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o;
    std::vector<int32_t> kv_len;

    int64_t hq() const { return o.heads * o.head_dim; }
    int64_t hkv() const { return o.heads_kv * o.head_dim; }

    mha_problem(const mha_options &opt, bool backward_, uint32_t seed) : o(opt), backward(backward_) {
        attn_mha_desc_init(&d, o.batch, o.len_q, o.len_kv, o.d_model, o.heads);
        d.heads_kv = o.heads_kv;
        d.head_dim = o.head_dim;
        d.causal = o.causal;
        d.dropout_p = o.dropout_p;
        d.dropout_seed = 0xD0D0u + seed;
        const int64_t dm = o.d_model;
        // weights ~ U(-1,1)/sqrt(d_model) keep the projections of unit size
        const float ws = 1.0f / std::sqrt(float(dm));
        x_q = random_values(size_t(o.batch * o.len_q * dm), seed);
        x_kv = o.self ? x_q : random_values(size_t(o.batch * o.len_kv * dm), seed + 1);
        dy = random_values(size_t(o.batch * o.len_q * dm), seed + 2);
        w_q = random_values(size_t(hq() * dm), seed + 3, -ws, ws);
        w_k = random_values(size_t(hkv() * dm), seed + 4, -ws, ws);
        w_v = random_values(size_t(hkv() * dm), seed + 5, -ws, ws);
        w_o = random_values(size_t(dm * hq()), seed + 6, -ws, ws);
        d.w_q = w_q.data(), d.w_k = w_k.data(), d.w_v = w_v.data(), d.w_o = w_o.data();
        if (o.biases) {
            b_q = random_values(size_t(hq()), seed + 7);
            b_k = random_values(size_t(hkv()), seed + 8);
            b_v = random_values(size_t(hkv()), seed + 9);
            b_o = random_values(size_t(dm), seed + 10);
            d.b_q = b_q.data(), d.b_k = b_k.data(), d.b_v = b_v.data(), d.b_o = b_o.data();
        }
        if (o.kv_len) {
            for (int64_t b = 0; b < o.batch; ++b)
                kv_len.push_back(int32_t(std::max<int64_t>(1, o.len_kv - b * (o.len_kv / 3))));
            d.kv_len = kv_len.data();
        }
    }

    attn_status run(attn_context *ctx, std::vector<float> &outputs) const override {
        const float *xkv = o.self ? x_q.data() : x_kv.data();
        if (!backward) {
            outputs.assign(size_t(o.batch * o.len_q * o.d_model), 0.0f);
            return attn_mha_forward_f32(ctx, &d, x_q.data(), xkv, outputs.data());
        }
        std::vector<float> dx_q(x_q.size()), dx_kv(o.self ? 0 : x_kv.size());
        std::vector<float> dw_q(w_q.size()), dw_k(w_k.size()), dw_v(w_v.size()), dw_o(w_o.size());
        std::vector<float> db_q(b_q.size()), db_k(b_k.size()), db_v(b_v.size()), db_o(b_o.size());
        attn_mha_grads g{};
        g.dw_q = dw_q.data(), g.dw_o = dw_o.data();
        if (o.all_grads) g.dw_k = dw_k.data(), g.dw_v = dw_v.data();
        if (o.biases) {
            g.db_o = db_o.data();
            if (o.all_grads) g.db_q = db_q.data(), g.db_k = db_k.data(), g.db_v = db_v.data();
        }
        attn_status st = attn_mha_backward_f32(ctx, &d, x_q.data(), xkv, dy.data(), dx_q.data(),
                                               o.self ? nullptr : dx_kv.data(), &g);
        outputs.clear();
        for (const auto *v : {&dx_q, &dx_kv, &dw_q, &dw_k, &dw_v, &dw_o, &db_q, &db_k, &db_v, &db_o}) {
            if ((v == &dw_k || v == &dw_v || v == &db_q || v == &db_k || v == &db_v) && !o.all_grads)
                continue;
            outputs.insert(outputs.end(), v->begin(), v->end());
        }
        return st;
    }

    std::vector<double> exact() const override {
        const int64_t B = o.batch, Lq = o.len_q, Lkv = o.len_kv, dm = o.d_model;
        const int64_t H = o.heads, Hkv = o.heads_kv, Dh = o.head_dim;
        const auto xq = to_double(x_q), xkv = to_double(x_kv);
        const auto wq = to_double(w_q), wk = to_double(w_k), wv = to_double(w_v),
                   wo = to_double(w_o);
        const auto bq = to_double(b_q), bk = to_double(b_k), bv = to_double(b_v),
                   bo = to_double(b_o);
        // Projections, [batch*seq, heads*head_dim]: BSHD tensors for the attention.
        const auto qp = project(xq, wq, bq, B * Lq, dm, hq());
        const auto kp = project(xkv, wk, bk, B * Lkv, dm, hkv());
        const auto vp = project(xkv, wv, bv, B * Lkv, dm, hkv());
        attn_sdpa_desc sd;
        attn_sdpa_desc_init(&sd, B, H, Lq, Lkv, Dh);
        sd.heads_kv = Hkv;
        sd.q = {Lq * hq(), Dh, hq()};
        sd.k = sd.v = {Lkv * hkv(), Dh, hkv()};
        sd.out = sd.q;
        sd.causal = d.causal;
        sd.kv_len = d.kv_len;
        sd.dropout_p = d.dropout_p;
        sd.dropout_seed = d.dropout_seed;
        std::vector<double> att(size_t(B * Lq * hq()));
        sdpa_exact(sd, qp.data(), kp.data(), vp.data(), att.data(), nullptr, nullptr);
        const auto concat = concat_heads(att, B, H, Lq, Dh);
        if (!backward) return project(concat, wo, bo, B * Lq, hq(), dm);

        const auto dyd = to_double(dy);
        // dC = dY W_o, dW_o = dY^T C, db_o = colsum dY
        std::vector<double> dc(size_t(B * Lq * hq())), dwo(size_t(dm * hq()));
        gemm_exact(ATTN_NO_TRANS, ATTN_NO_TRANS, B * Lq, hq(), dm, 1.0, dyd.data(), dm, wo.data(),
                   hq(), 0.0, dc.data(), hq());
        gemm_exact(ATTN_TRANS, ATTN_NO_TRANS, dm, hq(), B * Lq, 1.0, dyd.data(), dm,
                   concat.data(), hq(), 0.0, dwo.data(), hq());
        // Gradients of the projections, back in [batch*seq, heads*head_dim].
        std::vector<double> dqh(qp.size()), dkh(kp.size()), dvh(vp.size());
        sdpa_backward_exact(sd, qp.data(), kp.data(), vp.data(), dc.data(), dqh.data(),
                            dkh.data(), dvh.data());
        const auto dq = concat_heads(dqh, B, H, Lq, Dh);
        const auto dk = concat_heads(dkh, B, Hkv, Lkv, Dh);
        const auto dv = concat_heads(dvh, B, Hkv, Lkv, Dh);
        // dW = dP^T X, dX = dP W for each projection P = X W^T + b
        auto weight_grad = [](const std::vector<double> &dp, const std::vector<double> &x,
                              int64_t rows, int64_t out, int64_t in) {
            std::vector<double> dw(size_t(out * in));
            gemm_exact(ATTN_TRANS, ATTN_NO_TRANS, out, in, rows, 1.0, dp.data(), out, x.data(),
                       in, 0.0, dw.data(), in);
            return dw;
        };
        auto input_grad = [](std::vector<double> &dx, const std::vector<double> &dp,
                             const std::vector<double> &w, int64_t rows, int64_t out, int64_t in,
                             double beta) {
            gemm_exact(ATTN_NO_TRANS, ATTN_NO_TRANS, rows, in, out, 1.0, dp.data(), out,
                       w.data(), in, beta, dx.data(), in);
        };
        std::vector<double> dxq(xq.size()), dxkv(xkv.size());
        input_grad(dxq, dq, wq, B * Lq, hq(), dm, 0.0);
        auto &dx_from_kv = o.self ? dxq : dxkv;
        input_grad(dx_from_kv, dk, wk, B * Lkv, hkv(), dm, o.self ? 1.0 : 0.0);
        input_grad(dx_from_kv, dv, wv, B * Lkv, hkv(), dm, 1.0);

        std::vector<double> out = dxq;
        if (!o.self) append(out, dxkv);
        append(out, weight_grad(dq, xq, B * Lq, hq(), dm));
        if (o.all_grads) {
            append(out, weight_grad(dk, xkv, B * Lkv, hkv(), dm));
            append(out, weight_grad(dv, xkv, B * Lkv, hkv(), dm));
        }
        append(out, dwo);
        if (o.biases) {
            if (o.all_grads) {
                append(out, column_sums(dq, B * Lq, hq()));
                append(out, column_sums(dk, B * Lkv, hkv()));
                append(out, column_sums(dv, B * Lkv, hkv()));
            }
            append(out, column_sums(dyd, B * Lq, dm));
        }
        return out;
    }
};

void add(std::vector<case_spec> &out, bool backward, const mha_options &o) {
    const uint32_t seed = uint32_t(out.size()) * 7919u + 23u;
    std::string shape = label(o);
    if (backward && !o.all_grads) shape += " some-grads";
    out.push_back({backward ? "mha_backward" : "mha_forward", shape,
                   [=] { return std::make_unique<mha_problem>(o, backward, seed); }});
}

mha_options shape(int64_t batch, int64_t lq, int64_t lkv, int64_t dm, int64_t heads,
                  int64_t heads_kv, int64_t head_dim, bool self) {
    mha_options o;
    o.batch = batch, o.len_q = lq, o.len_kv = lkv, o.d_model = dm, o.heads = heads;
    o.heads_kv = heads_kv, o.head_dim = head_dim, o.self = self;
    return o;
}

}  // namespace

void add_mha_cases(sweep_size s, std::vector<case_spec> &out) {
    mha_options o;
    for (bool backward : {false, true}) {
        o = shape(2, 9, 9, 32, 4, 4, 8, true), o.biases = true;
        add(out, backward, o);
        o = shape(2, 7, 13, 24, 4, 2, 6, false), o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        o.kv_len = true, o.dropout_p = 0.25f, o.all_grads = !backward;
        add(out, backward, o);
    }
    if (s == sweep_size::quick) return;
    for (bool backward : {false, true}) {
        o = shape(2, 65, 65, 128, 8, 8, 16, true), o.biases = true;
        o.causal = ATTN_CAUSAL_TOP_LEFT;
        add(out, backward, o);
        o = shape(1, 64, 129, 128, 8, 2, 16, false), o.biases = true, o.kv_len = true;
        add(out, backward, o);
        o = shape(1, 129, 129, 256, 4, 4, 64, true), o.dropout_p = 0.1f;
        add(out, backward, o);
        o = shape(1, 33, 33, 96, 3, 1, 40, true);  // head_dim * heads != d_model
        add(out, backward, o);
    }
    for (bool backward : {false, true}) {
        o = shape(1, 257, 257, 512, 8, 8, 64, true), o.biases = true;
        o.causal = ATTN_CAUSAL_TOP_LEFT;
        add(out, backward, o);
    }
}

}  // namespace attn_compare
