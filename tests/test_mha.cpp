// Values of attn_mha_forward_f32 / attn_mha_backward_f32 on every path, against a naive
// double-precision multi-head attention written here, independently of the library:
// projections with nn.Linear [out, in] weights and biases, per-head attention (GQA, causal,
// kv_len, dropout), output projection. The backward is checked against central finite
// differences of that forward.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::path_test;
using attn_test::random_tensor;
using doubles = std::vector<double>;

// Every learnable tensor and input of one MHA call, in double.
struct mha_values {
    doubles x_q, x_kv, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o;
};

// y [B, Lq, d_model] = MultiheadAttention(x_q, x_kv) as PyTorch computes it (batch_first).
// self_attention: keys and values are projected from x_q (x_kv is ignored).
doubles mha_double(const attn_mha_desc &d, const mha_values &p, bool self_attention) {
    const int64_t B = d.batch, Lq = d.len_q, Lk = d.len_kv, dm = d.d_model, H = d.heads;
    const int64_t Hkv = d.heads_kv, hd = d.head_dim;
    const doubles &x_kv = self_attention ? p.x_q : p.x_kv;
    // out[r, o] = sum_m x[r, m] w[o, m] + b[o]: an nn.Linear applied to each row.
    auto linear = [](const double *x, int64_t rows, int64_t in, const doubles &w, const doubles &b,
                     int64_t out_features) {
        doubles out(size_t(rows * out_features));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t o = 0; o < out_features; ++o) {
                double acc = b.empty() ? 0.0 : b[o];
                for (int64_t m = 0; m < in; ++m) acc += x[r * in + m] * w[o * in + m];
                out[r * out_features + o] = acc;
            }
        return out;
    };
    doubles y(size_t(B * Lq * dm));
    for (int64_t b = 0; b < B; ++b) {
        const doubles q = linear(&p.x_q[b * Lq * dm], Lq, dm, p.w_q, p.b_q, H * hd);
        const doubles k = linear(&x_kv[b * Lk * dm], Lk, dm, p.w_k, p.b_k, Hkv * hd);
        const doubles v = linear(&x_kv[b * Lk * dm], Lk, dm, p.w_v, p.b_v, Hkv * hd);
        doubles concat(size_t(Lq * H * hd), 0.0);
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = h / (H / Hkv);  // the key/value head this query head reads
            for (int64_t i = 0; i < Lq; ++i) {
                doubles w(size_t(Lk), 0.0);
                double top = -INFINITY;
                for (int64_t j = 0; j < Lk; ++j) {
                    const bool hidden = (d.causal == ATTN_CAUSAL_TOP_LEFT && j > i) ||
                                        (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + Lk - Lq) ||
                                        (d.kv_len && j >= d.kv_len[b]);
                    if (hidden) {
                        w[j] = -INFINITY;
                        continue;
                    }
                    double dot = 0.0;
                    for (int64_t c = 0; c < hd; ++c)
                        dot += q[i * H * hd + h * hd + c] * k[j * Hkv * hd + g * hd + c];
                    w[j] = dot / std::sqrt(double(hd));
                    top = std::max(top, w[j]);
                }
                if (top == -INFINITY) continue;
                double sum = 0.0;
                for (int64_t j = 0; j < Lk; ++j) sum += (w[j] = std::exp(w[j] - top));
                const uint32_t key = attn::dropout::row_key(d.dropout_seed, b, h, i);
                for (int64_t j = 0; j < Lk; ++j) {
                    double a = w[j] / sum;
                    if (d.dropout_p > 0.0f)
                        a = attn::dropout::dropped(key, j, attn::dropout::threshold(d.dropout_p))
                                ? 0.0
                                : a / (1.0 - d.dropout_p);
                    for (int64_t c = 0; c < hd; ++c)
                        concat[i * H * hd + h * hd + c] += a * v[j * Hkv * hd + g * hd + c];
                }
            }
        }
        const doubles yb = linear(concat.data(), Lq, H * hd, p.w_o, p.b_o, dm);
        std::copy(yb.begin(), yb.end(), y.begin() + b * Lq * dm);
    }
    return y;
}

struct mha_case {
    const char *name;
    attn_mha_desc d;
    bool self_attention, biases;
    std::vector<int32_t> kv_len;
};

std::vector<mha_case> mha_cases() {
    std::vector<mha_case> cases;
    auto add = [&](const char *name, int64_t B, int64_t Lq, int64_t Lk, int64_t dm, int64_t H,
                   bool self_attention, bool biases) {
        attn_mha_desc d;
        attn_mha_desc_init(&d, B, Lq, Lk, dm, H);
        cases.push_back({name, d, self_attention, biases, {}});
        return &cases.back().d;
    };
    add("cross_attention_biases", 2, 3, 5, 8, 2, false, true);
    add("self_attention_causal", 1, 4, 4, 6, 3, true, false)->causal = ATTN_CAUSAL_TOP_LEFT;
    {
        attn_mha_desc *d = add("gqa_head_dim_not_dm_over_heads", 1, 3, 4, 5, 4, false, true);
        d->heads_kv = 2;
        d->head_dim = 3;
    }
    {
        attn_mha_desc *d = add("bottom_right_kv_len_dropout", 2, 2, 5, 6, 2, false, true);
        d->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        d->dropout_p = 0.3f;
        d->dropout_seed = 99;
        cases.back().kv_len = {5, 3};
    }
    return cases;
}

class MhaValues : public path_test {
  protected:
    // Random float tensors for case c, with d's weight pointers aimed at them.
    void setup(const mha_case &c, uint32_t seed) {
        d = c.d;
        self = c.self_attention;
        const int64_t dm = d.d_model, wq = d.heads * d.head_dim, wkv = d.heads_kv * d.head_dim;
        auto make = [&](std::vector<float> &x, int64_t n) {
            x = random_tensor(size_t(n), seed++, -0.8f, 0.8f);
        };
        make(x_q, d.batch * d.len_q * dm);
        make(x_kv, d.batch * d.len_kv * dm);
        make(w_q, wq * dm);
        make(w_k, wkv * dm);
        make(w_v, wkv * dm);
        make(w_o, dm * wq);
        make(dy, d.batch * d.len_q * dm);
        b_q.clear(), b_k.clear(), b_v.clear(), b_o.clear();
        if (c.biases) {
            make(b_q, wq);
            make(b_k, wkv);
            make(b_v, wkv);
            make(b_o, dm);
        }
        kv_len = c.kv_len;
        point_desc();
    }
    void point_desc() {
        d.w_q = w_q.data(), d.w_k = w_k.data(), d.w_v = w_v.data(), d.w_o = w_o.data();
        d.b_q = b_q.empty() ? nullptr : b_q.data();
        d.b_k = b_k.empty() ? nullptr : b_k.data();
        d.b_v = b_v.empty() ? nullptr : b_v.data();
        d.b_o = b_o.empty() ? nullptr : b_o.data();
        d.kv_len = kv_len.empty() ? nullptr : kv_len.data();
    }
    const float *kv_input() const { return self ? x_q.data() : x_kv.data(); }
    mha_values as_double() const {
        using attn_test::to_double;
        return {to_double(x_q), to_double(x_kv), to_double(w_q), to_double(w_k), to_double(w_v),
                to_double(w_o), to_double(b_q),  to_double(b_k), to_double(b_v), to_double(b_o)};
    }
    // dL/dt for L = sum(y * dy) by central differences of mha_double, t a member of p.
    doubles finite_difference(doubles mha_values::*t) const {
        mha_values p = as_double();
        auto loss = [&]() {
            const doubles y = mha_double(d, p, self);
            double s = 0.0;
            for (size_t i = 0; i < y.size(); ++i) s += y[i] * dy[i];
            return s;
        };
        doubles &x = p.*t;
        doubles g(x.size());
        const double h = 1e-5;
        for (size_t i = 0; i < x.size(); ++i) {
            const double keep = x[i];
            x[i] = keep + h;
            const double up = loss();
            x[i] = keep - h;
            const double down = loss();
            x[i] = keep;
            g[i] = (up - down) / (2 * h);
        }
        return g;
    }
    // The derivative of L along direction u of tensor t, by central differences: equals
    // sum_i dL/dt_i u_i.
    double directional_difference(doubles mha_values::*t, const std::vector<float> &u) const {
        auto loss_at = [&](double step) {
            mha_values p = as_double();
            doubles &x = p.*t;
            for (size_t i = 0; i < x.size(); ++i) x[i] += step * u[i];
            const doubles y = mha_double(d, p, self);
            double sum = 0.0;
            for (size_t i = 0; i < y.size(); ++i) sum += y[i] * dy[i];
            return sum;
        };
        const double h = 1e-5;
        return (loss_at(h) - loss_at(-h)) / (2 * h);
    }

    attn_mha_desc d;
    bool self = false;
    std::vector<float> x_q, x_kv, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, dy;
    std::vector<int32_t> kv_len;
};

// The forward against the double implementation: |got - want| <= 1e-5 (1 + |want|).
TEST_P(MhaValues, ForwardMatchesDouble) {
    for (const mha_case &c : mha_cases()) {
        setup(c, 1);
        std::vector<float> y(x_q.size(), NAN);
        ASSERT_EQ(attn_mha_forward_f32(ctx(), &d, x_q.data(), kv_input(), y.data()), ATTN_OK)
            << c.name << ": " << attn_last_error();
        EXPECT_LE(attn_test::max_rel_error(y, mha_double(d, as_double(), self)), 1e-5) << c.name;
    }
}

// Every gradient against finite differences: |got - fd| <= 5e-5 (1 + |fd|). For the
// self-attention case dx_kv is NULL and dx_q holds the whole input gradient.
TEST_P(MhaValues, BackwardMatchesFiniteDifferences) {
    for (const mha_case &c : mha_cases()) {
        setup(c, 11);
        std::vector<float> dx_q(x_q.size(), NAN), dx_kv(x_kv.size(), NAN);
        std::vector<float> dw_q(w_q.size(), NAN), dw_k(w_k.size(), NAN), dw_v(w_v.size(), NAN),
            dw_o(w_o.size(), NAN), db_q(w_q.size() / d.d_model, NAN),
            db_k(w_k.size() / d.d_model, NAN), db_v(w_v.size() / d.d_model, NAN),
            db_o(size_t(d.d_model), NAN);
        const attn_mha_grads g{dw_q.data(), dw_k.data(), dw_v.data(), dw_o.data(),
                               db_q.data(), db_k.data(), db_v.data(), db_o.data()};
        ASSERT_EQ(attn_mha_backward_f32(ctx(), &d, x_q.data(), kv_input(), dy.data(), dx_q.data(),
                                        self ? nullptr : dx_kv.data(), &g),
                  ATTN_OK)
            << c.name << ": " << attn_last_error();
        const double tol = 5e-5;
        EXPECT_LE(attn_test::max_rel_error(dx_q, finite_difference(&mha_values::x_q)), tol)
            << c.name << " dx_q";
        if (!self) {
            EXPECT_LE(attn_test::max_rel_error(dx_kv, finite_difference(&mha_values::x_kv)), tol)
                << c.name << " dx_kv";
        }
        EXPECT_LE(attn_test::max_rel_error(dw_q, finite_difference(&mha_values::w_q)), tol)
            << c.name << " dw_q";
        EXPECT_LE(attn_test::max_rel_error(dw_k, finite_difference(&mha_values::w_k)), tol)
            << c.name << " dw_k";
        EXPECT_LE(attn_test::max_rel_error(dw_v, finite_difference(&mha_values::w_v)), tol)
            << c.name << " dw_v";
        EXPECT_LE(attn_test::max_rel_error(dw_o, finite_difference(&mha_values::w_o)), tol)
            << c.name << " dw_o";
        if (c.biases) {
            EXPECT_LE(attn_test::max_rel_error(db_q, finite_difference(&mha_values::b_q)), tol)
                << c.name << " db_q";
            EXPECT_LE(attn_test::max_rel_error(db_k, finite_difference(&mha_values::b_k)), tol)
                << c.name << " db_k";
            EXPECT_LE(attn_test::max_rel_error(db_v, finite_difference(&mha_values::b_v)), tol)
                << c.name << " db_v";
            EXPECT_LE(attn_test::max_rel_error(db_o, finite_difference(&mha_values::b_o)), tol)
                << c.name << " db_o";
        }
    }
}

// Sequences past the attention tiles and key-chunk length (50 queries, 600 keys), with GQA,
// biases, causal, kv_len and dropout. The forward is checked element by element; each
// gradient g of a tensor t through one random direction u: sum_i g_i u_i against the
// central difference of the double forward along u, to 2e-6 (1 + sum_i |g_i u_i|); the
// float rounding measured here is about 2e-7 of that sum.
TEST_P(MhaValues, LongSequencesForwardAndDirectionalDerivatives) {
    mha_case c{"long", {}, false, true, {600, 333}};
    attn_mha_desc_init(&c.d, 2, 50, 600, 32, 4);
    c.d.heads_kv = 2;
    c.d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    c.d.dropout_p = 0.1f;
    c.d.dropout_seed = 8;
    setup(c, 31);
    std::vector<float> y(x_q.size(), NAN);
    ASSERT_EQ(attn_mha_forward_f32(ctx(), &d, x_q.data(), x_kv.data(), y.data()), ATTN_OK)
        << attn_last_error();
    EXPECT_LE(attn_test::max_rel_error(y, mha_double(d, as_double(), false)), 1e-5);

    std::vector<float> dx_q(x_q.size()), dx_kv(x_kv.size()), dw_q(w_q.size()), dw_k(w_k.size()),
        dw_v(w_v.size()), dw_o(w_o.size()), db_q(b_q.size()), db_k(b_k.size()), db_v(b_v.size()),
        db_o(b_o.size());
    const attn_mha_grads g{dw_q.data(), dw_k.data(), dw_v.data(), dw_o.data(),
                           db_q.data(), db_k.data(), db_v.data(), db_o.data()};
    ASSERT_EQ(attn_mha_backward_f32(ctx(), &d, x_q.data(), x_kv.data(), dy.data(), dx_q.data(),
                                    dx_kv.data(), &g),
              ATTN_OK)
        << attn_last_error();
    struct named {
        const char *name;
        const std::vector<float> *grad;
        doubles mha_values::*tensor;
    };
    const named all[] = {{"dx_q", &dx_q, &mha_values::x_q}, {"dx_kv", &dx_kv, &mha_values::x_kv},
                         {"dw_q", &dw_q, &mha_values::w_q}, {"dw_k", &dw_k, &mha_values::w_k},
                         {"dw_v", &dw_v, &mha_values::w_v}, {"dw_o", &dw_o, &mha_values::w_o},
                         {"db_q", &db_q, &mha_values::b_q}, {"db_v", &db_v, &mha_values::b_v},
                         {"db_o", &db_o, &mha_values::b_o}};
    uint32_t seed = 500;
    for (const named &n : all) {
        const std::vector<float> u = random_tensor(n.grad->size(), seed++);
        double along = 0.0, magnitude = 0.0;
        for (size_t i = 0; i < u.size(); ++i) {
            along += double((*n.grad)[i]) * u[i];
            magnitude += std::fabs(double((*n.grad)[i]) * u[i]);
        }
        EXPECT_NEAR(along, directional_difference(n.tensor, u), 2e-6 * (1.0 + magnitude)) << n.name;
    }
    // The key bias shifts every score of a row equally, so softmax removes it: db_k = 0, a
    // column sum of dK over 1200 key rows that cancels; float rounding leaves about 1e-5.
    for (float x : db_k) EXPECT_NEAR(x, 0.0f, 1e-4);
}

// Self-attention asked for dx_kv separately: dx_q + dx_kv is the whole input gradient that
// dx_q alone holds when dx_kv is NULL. Gradients not asked for (NULL) are simply skipped,
// and those asked for are unchanged by that.
TEST_P(MhaValues, SelfAttentionInputGradientSplitsAndNullGradients) {
    setup(mha_cases()[1], 21);  // self-attention, causal
    ASSERT_TRUE(self);
    std::vector<float> whole(x_q.size(), NAN), dx_q(x_q.size(), NAN), dx_kv(x_q.size(), NAN);
    std::vector<float> dw_o_all(w_o.size(), NAN), dw_o_only(w_o.size(), NAN);
    attn_mha_grads all{};
    all.dw_o = dw_o_all.data();
    ASSERT_EQ(attn_mha_backward_f32(ctx(), &d, x_q.data(), x_q.data(), dy.data(), whole.data(),
                                    nullptr, &all),
              ATTN_OK);
    attn_mha_grads only_o{};
    only_o.dw_o = dw_o_only.data();
    ASSERT_EQ(attn_mha_backward_f32(ctx(), &d, x_q.data(), x_q.data(), dy.data(), dx_q.data(),
                                    dx_kv.data(), &only_o),
              ATTN_OK);
    std::vector<float> sum(x_q.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = dx_q[i] + dx_kv[i];
    EXPECT_LE(attn_test::max_rel_error(sum.data(), whole.data(), sum.size()), 1e-6);
    EXPECT_EQ(dw_o_only, dw_o_all);
    EXPECT_LE(attn_test::max_rel_error(whole, finite_difference(&mha_values::x_q)), 5e-5);
}

// dx_kv NULL with dx_q given: with x_kv == x_q (one sequence) dx_q receives the whole input
// gradient, checked against finite differences of the self-attention loss; x_kv == x_q read
// as a shorter key sequence has nowhere to put the key/value part and is rejected with
// INVALID_ARGUMENT, no output byte written; a copy of x_q is cross-attention, whose NULL
// dx_kv means "not wanted": dx_q is then the query part alone, the same as with dx_kv given,
// and dx_q + dx_kv is the whole gradient.
TEST_P(MhaValues, NullDxKvOnlyForOneSequence) {
    setup(mha_cases()[1], 41);  // self-attention, causal, batch 1, len 4
    ASSERT_TRUE(self);
    const std::vector<float> copy = x_q;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> dx_q(x_q.size(), nan), dw_q(w_q.size(), nan);
    attn_mha_grads g{};
    g.dw_q = dw_q.data();
    auto all_nan = [](const std::vector<float> &v) {
        for (float x : v)
            if (!std::isnan(x)) return false;
        return true;
    };
    d.len_kv = 3;  // x_kv == x_q read as the first 3 of its 4 tokens
    EXPECT_EQ(attn_mha_backward_f32(ctx(), &d, x_q.data(), x_q.data(), dy.data(), dx_q.data(),
                                    nullptr, &g),
              ATTN_INVALID_ARGUMENT);
    const std::string message = attn_last_error();
    EXPECT_NE(message.find("attn_mha_backward_f32: dx_kv = NULL"), std::string::npos) << message;
    EXPECT_NE(message.find("desc->len_kv = 3"), std::string::npos) << message;
    EXPECT_NE(message.find("desc->len_q = 4"), std::string::npos) << message;
    EXPECT_TRUE(all_nan(dx_q)) << "dx_q written";
    EXPECT_TRUE(all_nan(dw_q)) << "g->dw_q written";
    d.len_kv = 4;

    const doubles whole = finite_difference(&mha_values::x_q);
    std::vector<float> dx_kv(x_q.size(), nan);
    ASSERT_EQ(attn_mha_backward_f32(ctx(), &d, x_q.data(), copy.data(), dy.data(), dx_q.data(),
                                    dx_kv.data(), &g),
              ATTN_OK)
        << attn_last_error();
    std::vector<float> sum(x_q.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = dx_q[i] + dx_kv[i];
    EXPECT_LE(attn_test::max_rel_error(sum, whole), 5e-5);
    std::vector<float> query_part(x_q.size(), nan);
    ASSERT_EQ(attn_mha_backward_f32(ctx(), &d, x_q.data(), copy.data(), dy.data(),
                                    query_part.data(), nullptr, &g),
              ATTN_OK)
        << attn_last_error();
    EXPECT_LE(attn_test::max_rel_error(query_part.data(), dx_q.data(), dx_q.size()), 1e-6);
    EXPECT_GT(attn_test::max_rel_error(query_part, whole), 1e-3);  // the key/value part is real
    ASSERT_EQ(attn_mha_backward_f32(ctx(), &d, x_q.data(), x_q.data(), dy.data(), dx_q.data(),
                                    nullptr, &g),
              ATTN_OK)
        << attn_last_error();
    EXPECT_LE(attn_test::max_rel_error(dx_q, whole), 5e-5);
    EXPECT_LE(attn_test::max_rel_error(dw_q, finite_difference(&mha_values::w_q)), 5e-5);
}

// The source text's example as one head with identity projections (d_model = 2): Q = K =
// V = x, so y = A x with the seed's attention matrix A; row 1 is
// 0.4011 (1,0) + 0.1978 (0,1) + 0.4011 (1,1) = (0.8022, 0.5989).
TEST_P(MhaValues, SeedExampleWithIdentityProjections) {
    attn_mha_desc m;
    attn_mha_desc_init(&m, 1, 3, 3, 2, 1);
    const std::vector<float> eye = {1, 0, 0, 1}, x = {1, 0, 0, 1, 1, 1};
    m.w_q = m.w_k = m.w_v = m.w_o = eye.data();
    std::vector<float> y(6, NAN);
    ASSERT_EQ(attn_mha_forward_f32(ctx(), &m, x.data(), x.data(), y.data()), ATTN_OK);
    const double a[3][3] = {
        {0.4011, 0.1978, 0.4011}, {0.1978, 0.4011, 0.4011}, {0.2483, 0.2483, 0.5035}};
    for (int i = 0; i < 3; ++i)
        for (int c = 0; c < 2; ++c) {
            const double want = a[i][0] * x[c] + a[i][1] * x[2 + c] + a[i][2] * x[4 + c];
            // each printed A entry is within 5e-5, and at most two enter a sum
            EXPECT_NEAR(y[i * 2 + c], want, 1e-4) << "y[" << i << "," << c << "]";
        }
    EXPECT_NEAR(y[0], 0.8022, 1e-4);
    EXPECT_NEAR(y[1], 0.5989, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Paths, MhaValues, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
