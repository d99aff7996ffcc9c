// Values of attn_sdpa_backward_f32 on every path: dq, dk, dv against central finite
// differences of the double-precision forward (tests/test_util.hpp) for the loss
// L = sum(out * dout), over causal, mask, kv_len, GQA and dropout; plus layouts (BSHD, a
// KV cache whose unused capacity is left alone), lse given or recomputed, outputs written
// rather than accumulated.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::path_test;
using attn_test::make_desc;
using attn_test::random_tensor;
const float inf = std::numeric_limits<float>::infinity();

struct grads {
    std::vector<float> dq, dk, dv;
};

struct double_grads {
    std::vector<double> dq, dk, dv;
};

// The analytic gradients in double over dense BHSD tensors, from the full softmax rows:
// P = softmax(S), z = dropout factors, dV += (P z)^T dO, dP = z (dO V^T), D = rowsum(P dP),
// dS = P (dP - D), dQ = scale dS K, dK += scale dS^T Q. Checked against finite differences
// below, then used where finite differences would be too slow.
double_grads backward_double(const attn_sdpa_desc &d, const std::vector<double> &q,
                             const std::vector<double> &k, const std::vector<double> &v,
                             const std::vector<float> &dout) {
    const int64_t Hq = d.heads_q, Hkv = d.heads_kv, Lq = d.len_q, Lk = d.len_kv;
    const int64_t Dk = d.dim_qk, Dv = d.dim_v;
    double_grads g{std::vector<double>(q.size()), std::vector<double>(k.size()),
                   std::vector<double>(v.size())};
    std::vector<double> p(static_cast<size_t>(Lk)), dp(static_cast<size_t>(Lk));
    for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Lq; ++i) {
                const int64_t hk = h / (Hq / Hkv);
                const double *qi = &q[((b * Hq + h) * Lq + i) * Dk];
                const float *doi = &dout[((b * Hq + h) * Lq + i) * Dv];
                auto k_row = [&](int64_t j) { return ((b * Hkv + hk) * Lk + j) * Dk; };
                auto v_row = [&](int64_t j) { return ((b * Hkv + hk) * Lk + j) * Dv; };
                double top = -INFINITY;
                for (int64_t j = 0; j < Lk; ++j) {
                    const bool hidden = (d.causal == ATTN_CAUSAL_TOP_LEFT && j > i) ||
                                        (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + Lk - Lq) ||
                                        (d.kv_len && j >= d.kv_len[b]);
                    double sc = -INFINITY;
                    if (!hidden) {
                        sc = 0.0;
                        for (int64_t c = 0; c < Dk; ++c) sc += qi[c] * k[k_row(j) + c];
                        sc *= d.scale;
                        if (d.mask)
                            sc += d.mask[b * d.mask_strides.batch + h * d.mask_strides.head +
                                         i * d.mask_strides.seq + j];
                    }
                    p[j] = sc;
                    top = std::max(top, sc);
                }
                if (top == -INFINITY) continue;
                double sum = 0.0;
                for (int64_t j = 0; j < Lk; ++j) sum += (p[j] = std::exp(p[j] - top));
                const uint32_t key = attn::dropout::row_key(d.dropout_seed, b, h, i);
                double big_d = 0.0;
                for (int64_t j = 0; j < Lk; ++j) {
                    p[j] /= sum;
                    double z = 1.0;
                    if (d.dropout_p > 0.0f)
                        z = attn::dropout::dropped(key, j, attn::dropout::threshold(d.dropout_p))
                                ? 0.0
                                : 1.0 / (1.0 - d.dropout_p);
                    double dot = 0.0;
                    for (int64_t c = 0; c < Dv; ++c) {
                        g.dv[v_row(j) + c] += p[j] * z * doi[c];
                        dot += doi[c] * v[v_row(j) + c];
                    }
                    dp[j] = z * dot;
                    big_d += p[j] * dp[j];
                }
                double *dqi = &g.dq[((b * Hq + h) * Lq + i) * Dk];
                for (int64_t j = 0; j < Lk; ++j) {
                    const double ds = d.scale * p[j] * (dp[j] - big_d);
                    for (int64_t c = 0; c < Dk; ++c) {
                        dqi[c] += ds * k[k_row(j) + c];
                        g.dk[k_row(j) + c] += ds * qi[c];
                    }
                }
            }
    return g;
}

// max |a - b| / (1 + |b|) over two double vectors.
double max_rel_difference(const std::vector<double> &a, const std::vector<double> &b) {
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::fabs(a[i] - b[i]) / (1.0 + std::fabs(b[i])));
    return worst;
}

class SdpaBackward : public path_test {
  protected:
    // Dense q, k, v, dout for d, and the forward's out and lse through the API.
    void setup(const attn_sdpa_desc &desc, uint32_t seed) {
        d = desc;
        q = random_tensor(size_t(d.batch * d.heads_q * d.len_q * d.dim_qk), seed);
        k = random_tensor(size_t(d.batch * d.heads_kv * d.len_kv * d.dim_qk), seed + 1);
        v = random_tensor(size_t(d.batch * d.heads_kv * d.len_kv * d.dim_v), seed + 2);
        dout = random_tensor(size_t(d.batch * d.heads_q * d.len_q * d.dim_v), seed + 3);
        out.assign(dout.size(), NAN);
        lse.assign(size_t(d.batch * d.heads_q * d.len_q), NAN);
        attn_sdpa_desc fwd = d;
        fwd.lse = lse.data();
        ASSERT_EQ(attn_sdpa_f32(ctx(), &fwd, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
            << attn_last_error();
    }
    // The backward through the API; outputs start as NaN so any unwritten entry shows.
    grads backward(const float *lse_in) {
        grads g{std::vector<float>(q.size(), NAN), std::vector<float>(k.size(), NAN),
                std::vector<float>(v.size(), NAN)};
        EXPECT_EQ(
            attn_sdpa_backward_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data(), dout.data(),
                                   lse_in, g.dq.data(), g.dk.data(), g.dv.data()),
            ATTN_OK)
            << attn_last_error();
        return g;
    }
    // dL/dx by central differences of the double forward, L = sum(out * dout); which =
    // 0, 1, 2 picks q, k or v.
    std::vector<double> finite_difference(int which) const {
        std::vector<double> x[3] = {attn_test::to_double(q), attn_test::to_double(k),
                                    attn_test::to_double(v)};
        auto loss = [&]() {
            const auto o = attn_test::sdpa_double(d, x[0], x[1], x[2]);
            double sum = 0.0;
            for (size_t i = 0; i < o.size(); ++i) sum += o[i] * dout[i];
            return sum;
        };
        const double h = 1e-5;
        std::vector<double> g(x[which].size());
        for (size_t i = 0; i < g.size(); ++i) {
            const double keep = x[which][i];
            x[which][i] = keep + h;
            const double up = loss();
            x[which][i] = keep - h;
            const double down = loss();
            x[which][i] = keep;
            g[i] = (up - down) / (2 * h);
        }
        return g;
    }

    attn_sdpa_desc d;
    std::vector<float> q, k, v, dout, out, lse;
};

// Float gradients against double finite differences: |got - fd| <= 2e-5 (1 + |fd|). The
// finite-difference error is ~1e-10 here, so this bounds the float arithmetic.
constexpr double gradient_tol = 2e-5;

struct gradient_case {
    const char *name;
    attn_sdpa_desc d;
    std::vector<float> mask;      // [Lq, Lkv] broadcast over batch and heads when non-empty
    std::vector<int32_t> kv_len;  // [B] when non-empty
};

std::vector<gradient_case> gradient_cases() {
    std::vector<gradient_case> cases;
    auto add = [&](const char *name, attn_sdpa_desc d) { cases.push_back({name, d, {}, {}}); };
    add("plain", make_desc(1, 2, 2, 3, 4, 3, 2));
    add("causal_top_left", make_desc(1, 2, 2, 4, 4, 3, 3));
    cases.back().d.causal = ATTN_CAUSAL_TOP_LEFT;
    add("causal_bottom_right", make_desc(1, 1, 1, 3, 5, 4, 2));
    cases.back().d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    add("bottom_right_empty_rows", make_desc(1, 1, 1, 4, 2, 3, 2));  // rows 0,1 see nothing
    cases.back().d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    add("gqa", make_desc(2, 4, 2, 3, 3, 2, 3));
    add("dropout", make_desc(1, 2, 2, 4, 5, 3, 3));
    cases.back().d.dropout_p = 0.3f;
    cases.back().d.dropout_seed = 4242;
    add("gqa_causal_dropout", make_desc(1, 4, 1, 4, 4, 3, 2));
    cases.back().d.causal = ATTN_CAUSAL_TOP_LEFT;
    cases.back().d.dropout_p = 0.25f;
    cases.back().d.dropout_seed = 7;
    add("mask", make_desc(1, 2, 2, 3, 4, 3, 3));
    cases.back().mask = {0.5f, -inf, 0.0f, -1.0f, 0.0f, 0.0f, 2.0f, -inf, -inf, -inf, -inf, -inf};
    cases.back().d.mask_strides = {0, 0, 4};
    add("kv_len", make_desc(2, 1, 1, 3, 5, 3, 2));
    cases.back().kv_len = {2, 5};
    add("scale_one", make_desc(1, 1, 1, 3, 3, 4, 4));
    cases.back().d.scale = 1.0f;
    return cases;
}

TEST_P(SdpaBackward, MatchesFiniteDifferences) {
    for (gradient_case &c : gradient_cases()) {
        attn_sdpa_desc desc = c.d;
        if (!c.mask.empty()) desc.mask = c.mask.data();
        if (!c.kv_len.empty()) desc.kv_len = c.kv_len.data();
        setup(desc, 10);
        if (HasFatalFailure()) return;
        const grads g = backward(lse.data());
        EXPECT_LE(attn_test::max_rel_error(g.dq, finite_difference(0)), gradient_tol)
            << c.name << " dq";
        EXPECT_LE(attn_test::max_rel_error(g.dk, finite_difference(1)), gradient_tol)
            << c.name << " dk";
        EXPECT_LE(attn_test::max_rel_error(g.dv, finite_difference(2)), gradient_tol)
            << c.name << " dv";
        // The double analytic gradients agree with finite differences far more tightly.
        const double_grads a = backward_double(d, attn_test::to_double(q), attn_test::to_double(k),
                                               attn_test::to_double(v), dout);
        EXPECT_LE(max_rel_difference(a.dq, finite_difference(0)), 1e-8) << c.name << " dq";
        EXPECT_LE(max_rel_difference(a.dk, finite_difference(1)), 1e-8) << c.name << " dk";
        EXPECT_LE(max_rel_difference(a.dv, finite_difference(2)), 1e-8) << c.name << " dv";
    }
}

// Shapes past any query tile, key tile or key-chunk length, where finite differences would
// be slow: against the double analytic gradients, |got - want| <= 2e-5 (1 + |want|).
TEST_P(SdpaBackward, LongKeysMatchDoubleBackward) {
    std::vector<float> mask(3 * 530, 0.0f);
    for (size_t x = 0; x < mask.size(); x += 5) mask[x] = -inf;
    const std::vector<int32_t> kv_len = {530, 301};
    for (int which = 0; which < 2; ++which) {
        attn_sdpa_desc desc;
        if (which == 0) {  // GQA, bottom-right causal, dropout
            desc = make_desc(1, 4, 2, 50, 600, 20, 12);
            desc.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            desc.dropout_p = 0.15f;
            desc.dropout_seed = 5;
        } else {  // padding and a broadcast mask
            desc = make_desc(2, 2, 2, 3, 530, 8, 8);
            desc.kv_len = kv_len.data();
            desc.mask = mask.data();
            desc.mask_strides = {0, 0, 530};
        }
        setup(desc, 50);
        if (HasFatalFailure()) return;
        const grads g = backward(lse.data());
        const double_grads want = backward_double(
            d, attn_test::to_double(q), attn_test::to_double(k), attn_test::to_double(v), dout);
        EXPECT_LE(attn_test::max_rel_error(g.dq, want.dq), gradient_tol) << which << " dq";
        EXPECT_LE(attn_test::max_rel_error(g.dk, want.dk), gradient_tol) << which << " dk";
        EXPECT_LE(attn_test::max_rel_error(g.dv, want.dv), gradient_tol) << which << " dv";
    }
}

// Without the forward's lse the backward recomputes it: same gradients to rounding.
TEST_P(SdpaBackward, RecomputedLseMatchesGivenLse) {
    attn_sdpa_desc desc = make_desc(2, 2, 1, 5, 7, 4, 3);
    desc.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    setup(desc, 20);
    const grads given = backward(lse.data()), recomputed = backward(nullptr);
    EXPECT_LE(attn_test::max_rel_error(given.dq.data(), recomputed.dq.data(), q.size()), 1e-6);
    EXPECT_LE(attn_test::max_rel_error(given.dk.data(), recomputed.dk.data(), k.size()), 1e-6);
    EXPECT_LE(attn_test::max_rel_error(given.dv.data(), recomputed.dv.data(), v.size()), 1e-6);
}

// BSHD q/out/dq and K/V inside a KV cache of larger capacity: same gradients as dense
// BHSD, and the cache's unused rows of dk, dv keep their contents.
TEST_P(SdpaBackward, StridedLayoutsEqualDense) {
    const int64_t B = 2, H = 2, Lq = 3, Lk = 5, cap = 8, D = 4;
    setup(make_desc(B, H, H, Lq, Lk, D, D), 30);
    const grads dense = backward(lse.data());

    attn_sdpa_desc s = d;
    s.q = s.out = {Lq * H * D, D, H * D};   // BSHD
    s.k = s.v = {H * cap * D, cap * D, D};  // BHSD with capacity cap
    auto to_bshd = [&](const std::vector<float> &x) {
        std::vector<float> y(x.size());
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < Lq; ++i)
                    for (int64_t c = 0; c < D; ++c)
                        y[((b * Lq + i) * H + h) * D + c] = x[((b * H + h) * Lq + i) * D + c];
        return y;
    };
    auto to_cache = [&](const std::vector<float> &x, float fill) {
        std::vector<float> y(B * H * cap * D, fill);
        for (int64_t bh = 0; bh < B * H; ++bh)
            for (int64_t x_ = 0; x_ < Lk * D; ++x_) y[bh * cap * D + x_] = x[bh * Lk * D + x_];
        return y;
    };
    const auto q_s = to_bshd(q), out_s = to_bshd(out), dout_s = to_bshd(dout);
    const auto k_s = to_cache(k, 0.0f), v_s = to_cache(v, 0.0f);
    std::vector<float> dq(q.size(), NAN), dk(k_s.size(), 99.0f), dv(v_s.size(), 99.0f);
    ASSERT_EQ(attn_sdpa_backward_f32(ctx(), &s, q_s.data(), k_s.data(), v_s.data(), out_s.data(),
                                     dout_s.data(), lse.data(), dq.data(), dk.data(), dv.data()),
              ATTN_OK)
        << attn_last_error();
    const auto want_dq = to_bshd(dense.dq);
    const auto want_dk = to_cache(dense.dk, 99.0f), want_dv = to_cache(dense.dv, 99.0f);
    EXPECT_LE(attn_test::max_rel_error(dq.data(), want_dq.data(), dq.size()), 1e-6);
    EXPECT_LE(attn_test::max_rel_error(dk.data(), want_dk.data(), dk.size()), 1e-6);
    EXPECT_LE(attn_test::max_rel_error(dv.data(), want_dv.data(), dv.size()), 1e-6);
}

// A fully masked query row receives no gradient: its dq row is zero, and it adds nothing
// to dk, dv (equal to the gradients with that row's dout set to zero).
TEST_P(SdpaBackward, FullyMaskedRowHasZeroGradient) {
    const int64_t L = 4, D = 3;
    std::vector<float> mask(L * L, 0.0f);
    for (int64_t j = 0; j < L; ++j) mask[1 * L + j] = -inf;
    attn_sdpa_desc desc = make_desc(1, 1, 1, L, L, D, D);
    desc.mask = mask.data();
    desc.mask_strides = {0, 0, L};
    setup(desc, 40);
    const grads g = backward(lse.data());
    for (int64_t c = 0; c < D; ++c) EXPECT_EQ(g.dq[1 * D + c], 0.0f);
    for (int64_t c = 0; c < D; ++c) dout[1 * D + c] = 0.0f;
    const grads zeroed = backward(lse.data());
    EXPECT_LE(attn_test::max_rel_error(g.dk.data(), zeroed.dk.data(), k.size()), 1e-7);
    EXPECT_LE(attn_test::max_rel_error(g.dv.data(), zeroed.dv.data(), v.size()), 1e-7);
}

INSTANTIATE_TEST_SUITE_P(Paths, SdpaBackward, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
