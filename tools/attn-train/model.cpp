// The model of model.hpp: forward and backward through the public C API.
#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>

namespace attn_train {
namespace {

void check(attn_status s, const char *what) {
    if (s == ATTN_OK) return;
    std::fprintf(stderr, "attn-train: %s: %s (%s)\n", what, attn_status_string(s), attn_last_error());
    std::exit(1);
}

// C[m, n] = A[m, k] B^T (B stored [n, k]) or, with tb = false, A B (B stored [k, n]).
void gemm(attn_context *ctx, attn_trans ta, attn_trans tb, int64_t m, int64_t n, int64_t k,
          const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
          int64_t ldc) {
    check(attn_gemm_f32(ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc), "attn_gemm_f32");
}

}  // namespace

batch sample_batch(const task &t, int count, std::mt19937 &gen) {
    batch b;
    b.count = count;
    b.length = t.length();
    b.tokens.resize(size_t(count * b.length));
    b.target.resize(size_t(count));
    b.source.resize(size_t(count));
    std::vector<int> keys(size_t(t.keys));
    std::iota(keys.begin(), keys.end(), 0);
    for (int s = 0; s < count; ++s) {
        int *row = &b.tokens[size_t(s * b.length)];
        for (int i = 0; i < t.pairs; ++i) {  // a partial shuffle: the first `pairs` keys
            std::uniform_int_distribution<int> pick(i, t.keys - 1);
            std::swap(keys[size_t(i)], keys[size_t(pick(gen))]);
            row[2 * i] = keys[size_t(i)];
            row[2 * i + 1] = t.keys + std::uniform_int_distribution<int>(0, t.values - 1)(gen);
        }
        const int q = std::uniform_int_distribution<int>(0, t.pairs - 1)(gen);
        row[2 * t.pairs] = row[2 * q];
        b.target[size_t(s)] = row[2 * q + 1] - t.keys;
        b.source[size_t(s)] = 2 * q + 1;
    }
    return b;
}

void param::init(size_t n, float sigma, std::mt19937 &gen) {
    std::normal_distribution<float> dist(0.0f, sigma);
    w.resize(n);
    for (auto &x : w) x = dist(gen);
    g.assign(n, 0.0f);
    m.assign(n, 0.0f);
    v.assign(n, 0.0f);
}

void model::init(const task &tk, int d, int h, int w, uint32_t seed) {
    t = tk;
    d_model = d;
    heads = h;
    window = w;
    std::mt19937 gen(seed);
    const size_t dm = size_t(d), vocab = size_t(t.vocab());
    const float s = 1.0f / std::sqrt(float(d));
    E.init(vocab * dm, 1.0f, gen);
    F.init(vocab * dm, 1.0f, gen);
    w_q.init(dm * dm, s, gen);
    w_k.init(dm * dm, s, gen);
    w_v.init(dm * dm, s, gen);
    w_o.init(dm * dm, s, gen);
    w_r.init(size_t(t.values) * dm, s, gen);
    b_r.init(size_t(t.values), 0.0f, gen);
}

std::vector<param *> model::params() { return {&E, &F, &w_q, &w_k, &w_v, &w_o, &w_r, &b_r}; }

namespace {

// The attention layer's tensors for one batch, [count * length, d_model] each.
struct layer {
    std::vector<float> x, q, k, v, c, y, lse, mask;
    std::vector<uint16_t> qb, kb, vb, cb;  // bf16: q, k, v, c as attn_sdpa took and gave them
};

// The bf16 patterns of x (whose values are bf16 ones, or are rounded here) and back.
std::vector<uint16_t> bf16_bits(attn_context *ctx, const std::vector<float> &x) {
    std::vector<uint16_t> b(x.size());
    check(attn_convert(ctx, int64_t(x.size()), x.data(), ATTN_DTYPE_F32, b.data(), ATTN_DTYPE_BF16),
          "attn_convert");
    return b;
}
void widen_bf16(attn_context *ctx, const std::vector<uint16_t> &b, std::vector<float> &x) {
    check(attn_convert(ctx, int64_t(b.size()), b.data(), ATTN_DTYPE_BF16, x.data(), ATTN_DTYPE_F32),
          "attn_convert");
}

// x rounded to bf16 (attn_convert's rounding) and widened back: the values a bf16 tensor
// holds; returns the bf16 patterns.
std::vector<uint16_t> round_to_bf16(attn_context *ctx, std::vector<float> &x) {
    std::vector<uint16_t> b = bf16_bits(ctx, x);
    widen_bf16(ctx, b, x);
    return b;
}

// c = attention(q, k, v) of the composed layer (lse out). bf16: q, k, v rounded to bf16 go to
// attn_sdpa with BF16 types and the output comes back in bf16; l.q, l.k, l.v, l.c then hold
// those bf16 values widened, l.qb, l.kb, l.vb, l.cb their patterns (what the backward reads).
void attend_forward(attn_context *ctx, const model &m, layer &l, attn_sdpa_desc &sd) {
    sd.lse = l.lse.data();
    if (m.dtype == ATTN_DTYPE_F32) {
        check(attn_sdpa_f32(ctx, &sd, l.q.data(), l.k.data(), l.v.data(), l.c.data()), "attn_sdpa_f32");
    } else {
        l.qb = round_to_bf16(ctx, l.q), l.kb = round_to_bf16(ctx, l.k), l.vb = round_to_bf16(ctx, l.v);
        l.cb.resize(l.c.size());
        sd.q_type = sd.kv_type = sd.out_type = ATTN_DTYPE_BF16;
        check(attn_sdpa(ctx, &sd, l.qb.data(), l.kb.data(), l.vb.data(), l.cb.data()), "attn_sdpa");
        sd.q_type = sd.kv_type = sd.out_type = ATTN_DTYPE_F32;
        widen_bf16(ctx, l.cb, l.c);
    }
    sd.lse = nullptr;
}

// dq, dk, dv of the composed layer given dc. bf16: one attn_sdpa_backward with BF16 types on
// the patterns the forward took and gave (l.qb, l.kb, l.vb, l.cb) and dc rounded to bf16
// (the gradient of a bf16 output); the gradients come back in bf16, widened for the rest of
// the model's backward.
void attend_backward(attn_context *ctx, const model &m, const layer &l, const attn_sdpa_desc &sd,
                     std::vector<float> &dc, std::vector<float> &dq, std::vector<float> &dk,
                     std::vector<float> &dv) {
    if (m.dtype == ATTN_DTYPE_F32) {
        check(attn_sdpa_backward_f32(ctx, &sd, l.q.data(), l.k.data(), l.v.data(), l.c.data(),
                                     dc.data(), l.lse.data(), dq.data(), dk.data(), dv.data()),
              "attn_sdpa_backward_f32");
        return;
    }
    const std::vector<uint16_t> gb = bf16_bits(ctx, dc);
    std::vector<uint16_t> dqb(dq.size()), dkb(dk.size()), dvb(dv.size());
    attn_sdpa_desc bd = sd;
    bd.q_type = bd.kv_type = bd.out_type = ATTN_DTYPE_BF16;
    check(attn_sdpa_backward(ctx, &bd, l.qb.data(), l.kb.data(), l.vb.data(), l.cb.data(), gb.data(),
                             l.lse.data(), dqb.data(), dkb.data(), dvb.data()),
          "attn_sdpa_backward");
    widen_bf16(ctx, dqb, dq), widen_bf16(ctx, dkb, dk), widen_bf16(ctx, dvb, dv);
}

// The windowed layer's descriptor: BSHD views of [count, length, heads * head_dim] buffers,
// causal, and an additive mask of -inf on keys j <= i - window.
attn_sdpa_desc window_desc(const model &m, int count, int length, layer &l) {
    const int64_t hd = m.d_model / m.heads, dm = m.d_model;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, count, m.heads, length, length, hd);
    d.q = d.k = d.v = d.out = {length * dm, hd, dm};
    d.causal = ATTN_CAUSAL_TOP_LEFT;
    if (m.window > 0) {
        l.mask.assign(size_t(length * length), 0.0f);
        for (int i = 0; i < length; ++i)
            for (int j = 0; j <= i - m.window; ++j) l.mask[size_t(i * length + j)] = -INFINITY;
        d.mask = l.mask.data();
        d.mask_strides = {0, 0, length};
    }
    return d;
}

}  // namespace

double model::run(attn_context *ctx, const batch &b, bool grads, double *accuracy) {
    const int64_t n = b.count, L = b.length, dm = d_model, rows = n * L, nv = t.values;
    layer l;
    l.x.assign(size_t(rows * dm), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
        const int tok = b.tokens[size_t(r)];
        for (int64_t c = 0; c < dm; ++c) l.x[size_t(r * dm + c)] = E.w[size_t(tok * dm + c)];
        if (r % L == 0) continue;
        const int prev = b.tokens[size_t(r - 1)];
        for (int64_t c = 0; c < dm; ++c) l.x[size_t(r * dm + c)] += F.w[size_t(prev * dm + c)];
    }
    l.y.assign(size_t(rows * dm), 0.0f);
    attn_mha_desc md;
    attn_mha_desc_init(&md, n, L, L, dm, heads);
    md.causal = ATTN_CAUSAL_TOP_LEFT;
    md.w_q = w_q.w.data(), md.w_k = w_k.w.data(), md.w_v = w_v.w.data(), md.w_o = w_o.w.data();
    attn_sdpa_desc sd{};
    const bool fused = window == 0 && dtype == ATTN_DTYPE_F32;
    if (fused) {
        check(attn_mha_forward_f32(ctx, &md, l.x.data(), l.x.data(), l.y.data()), "attn_mha_forward_f32");
    } else {  // the same layer composed: the window's mask, or bf16 attention
        l.q.resize(l.x.size()), l.k.resize(l.x.size()), l.v.resize(l.x.size()), l.c.resize(l.x.size());
        l.lse.resize(size_t(n * heads * L));
        gemm(ctx, ATTN_NO_TRANS, ATTN_TRANS, rows, dm, dm, l.x.data(), dm, w_q.w.data(), dm, 0.0f, l.q.data(), dm);
        gemm(ctx, ATTN_NO_TRANS, ATTN_TRANS, rows, dm, dm, l.x.data(), dm, w_k.w.data(), dm, 0.0f, l.k.data(), dm);
        gemm(ctx, ATTN_NO_TRANS, ATTN_TRANS, rows, dm, dm, l.x.data(), dm, w_v.w.data(), dm, 0.0f, l.v.data(), dm);
        sd = window_desc(*this, int(n), int(L), l);
        attend_forward(ctx, *this, l, sd);
        gemm(ctx, ATTN_NO_TRANS, ATTN_TRANS, rows, dm, dm, l.c.data(), dm, w_o.w.data(), dm, 0.0f, l.y.data(), dm);
    }

    // readout at the query position, softmax cross-entropy
    std::vector<float> dy(grads ? size_t(rows * dm) : 0, 0.0f);
    if (grads)
        for (param *p : params()) std::fill(p->g.begin(), p->g.end(), 0.0f);
    double loss = 0.0;
    int correct = 0;
    std::vector<double> logits(static_cast<size_t>(nv));
    for (int64_t s = 0; s < n; ++s) {
        const float *h = &l.y[size_t((s * L + L - 1) * dm)];
        for (int64_t o = 0; o < nv; ++o) {
            double z = b_r.w[size_t(o)];
            for (int64_t c = 0; c < dm; ++c) z += double(w_r.w[size_t(o * dm + c)]) * h[c];
            logits[size_t(o)] = z;
        }
        const double top = *std::max_element(logits.begin(), logits.end());
        double sum = 0.0;
        for (double z : logits) sum += std::exp(z - top);
        const int want = b.target[size_t(s)];
        loss += top + std::log(sum) - logits[size_t(want)];
        if (std::max_element(logits.begin(), logits.end()) - logits.begin() == want) ++correct;
        if (!grads) continue;
        float *dh = &dy[size_t((s * L + L - 1) * dm)];
        for (int64_t o = 0; o < nv; ++o) {  // dlogit = softmax - onehot, averaged over the batch
            const float g = float((std::exp(logits[size_t(o)] - top) / sum - (o == want)) / double(n));
            b_r.g[size_t(o)] += g;
            for (int64_t c = 0; c < dm; ++c) {
                w_r.g[size_t(o * dm + c)] += g * h[c];
                dh[c] += g * w_r.w[size_t(o * dm + c)];
            }
        }
    }
    if (accuracy) *accuracy = double(correct) / double(n);
    if (!grads) return loss / double(n);

    std::vector<float> dx(size_t(rows * dm), 0.0f);
    if (fused) {
        attn_mha_grads g{w_q.g.data(), w_k.g.data(), w_v.g.data(), w_o.g.data(),
                         nullptr, nullptr, nullptr, nullptr};
        check(attn_mha_backward_f32(ctx, &md, l.x.data(), l.x.data(), dy.data(), dx.data(), nullptr, &g),
              "attn_mha_backward_f32");
    } else {
        std::vector<float> dc(l.x.size()), dq(l.x.size()), dk(l.x.size()), dv(l.x.size());
        gemm(ctx, ATTN_NO_TRANS, ATTN_NO_TRANS, rows, dm, dm, dy.data(), dm, w_o.w.data(), dm, 0.0f, dc.data(), dm);
        gemm(ctx, ATTN_TRANS, ATTN_NO_TRANS, dm, dm, rows, dy.data(), dm, l.c.data(), dm, 0.0f, w_o.g.data(), dm);
        attend_backward(ctx, *this, l, sd, dc, dq, dk, dv);
        const std::vector<float> *dproj[3] = {&dq, &dk, &dv};
        param *w[3] = {&w_q, &w_k, &w_v};
        for (int p = 0; p < 3; ++p) {  // dW = dProj^T x, dx += dProj W
            gemm(ctx, ATTN_TRANS, ATTN_NO_TRANS, dm, dm, rows, dproj[p]->data(), dm, l.x.data(), dm, 0.0f,
                 w[p]->g.data(), dm);
            gemm(ctx, ATTN_NO_TRANS, ATTN_NO_TRANS, rows, dm, dm, dproj[p]->data(), dm, w[p]->w.data(), dm,
                 p == 0 ? 0.0f : 1.0f, dx.data(), dm);
        }
    }
    for (int64_t r = 0; r < rows; ++r) {  // the embeddings' rows gather dx
        const int tok = b.tokens[size_t(r)];
        for (int64_t c = 0; c < dm; ++c) E.g[size_t(tok * dm + c)] += dx[size_t(r * dm + c)];
        if (r % L == 0) continue;
        const int prev = b.tokens[size_t(r - 1)];
        for (int64_t c = 0; c < dm; ++c) F.g[size_t(prev * dm + c)] += dx[size_t(r * dm + c)];
    }
    return loss / double(n);
}

std::vector<float> model::attention_weights(attn_context *ctx, const batch &b, int index, int head) {
    batch one;
    one.count = 1;
    one.length = b.length;
    one.tokens.assign(b.tokens.begin() + index * b.length, b.tokens.begin() + (index + 1) * b.length);
    const int64_t L = one.length, dm = d_model;
    layer l;
    l.x.assign(size_t(L * dm), 0.0f);
    for (int64_t r = 0; r < L; ++r)
        for (int64_t c = 0; c < dm; ++c)
            l.x[size_t(r * dm + c)] = E.w[size_t(one.tokens[size_t(r)] * dm + c)] +
                                      (r ? F.w[size_t(one.tokens[size_t(r - 1)] * dm + c)] : 0.0f);
    l.q.resize(l.x.size()), l.k.resize(l.x.size()), l.v.resize(l.x.size()), l.c.resize(l.x.size());
    gemm(ctx, ATTN_NO_TRANS, ATTN_TRANS, L, dm, dm, l.x.data(), dm, w_q.w.data(), dm, 0.0f, l.q.data(), dm);
    gemm(ctx, ATTN_NO_TRANS, ATTN_TRANS, L, dm, dm, l.x.data(), dm, w_k.w.data(), dm, 0.0f, l.k.data(), dm);
    gemm(ctx, ATTN_NO_TRANS, ATTN_TRANS, L, dm, dm, l.x.data(), dm, w_v.w.data(), dm, 0.0f, l.v.data(), dm);
    attn_sdpa_desc d = window_desc(*this, 1, int(L), l);
    std::vector<float> w(size_t(heads * L * L));
    d.weights = w.data();
    check(attn_sdpa_f32(ctx, &d, l.q.data(), l.k.data(), l.v.data(), l.c.data()), "attn_sdpa_f32");
    return std::vector<float>(w.begin() + head * L * L, w.begin() + (head + 1) * L * L);
}

void adam::update(std::vector<param *> ps) {
    ++step;
    const float c1 = 1.0f - std::pow(beta1, float(step)), c2 = 1.0f - std::pow(beta2, float(step));
    for (param *p : ps)
        for (size_t i = 0; i < p->w.size(); ++i) {
            p->m[i] = beta1 * p->m[i] + (1.0f - beta1) * p->g[i];
            p->v[i] = beta2 * p->v[i] + (1.0f - beta2) * p->g[i] * p->g[i];
            p->w[i] -= lr * (p->m[i] / c1) / (std::sqrt(p->v[i] / c2) + eps);
        }
}

double gradient_check(attn_context *ctx, model &m, const batch &b, std::mt19937 &gen) {
    m.run(ctx, b, true, nullptr);
    double worst = 0.0;
    const float h = 1e-2f;
    for (param *p : m.params()) {
        const std::vector<float> analytic = p->g;
        // the coordinates with the largest gradients (a central difference of a float loss
        // resolves about 1e-4 of the loss, so tiny entries say nothing) plus random ones
        std::vector<size_t> idx(p->w.size());
        std::iota(idx.begin(), idx.end(), size_t(0));
        std::partial_sort(idx.begin(), idx.begin() + 3, idx.end(), [&](size_t a, size_t c) {
            return std::fabs(analytic[a]) > std::fabs(analytic[c]);
        });
        idx.resize(3);
        for (int r = 0; r < 3; ++r)
            idx.push_back(std::uniform_int_distribution<size_t>(0, p->w.size() - 1)(gen));
        for (size_t i : idx) {
            const float keep = p->w[i];
            p->w[i] = keep + h;
            const double up = m.run(ctx, b, false, nullptr);
            p->w[i] = keep - h;
            const double down = m.run(ctx, b, false, nullptr);
            p->w[i] = keep;
            const double numeric = (up - down) / (2.0 * double(h));
            const double scale = std::max(std::fabs(numeric) + std::fabs(double(analytic[i])), 1e-2);
            worst = std::max(worst, std::fabs(numeric - double(analytic[i])) / scale);
        }
    }
    return worst;
}

}  // namespace attn_train
