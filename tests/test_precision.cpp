// Accuracy as PyTorch's: on inputs whose scaled scores reach |s| ~ 30 (and ~ 100 for the
// forward), every output and gradient of attn_sdpa_f32, attn_sdpa_backward_f32,
// attn_mha_forward_f32 and attn_mha_backward_f32 has a normwise error against float64 of at most
//   max(2 * (the error of a plain float32 computation of the same thing), 2e-6),
// on every path. The plain float32 computation and the float64 oracle are the same template
// (test_precision_plain.hpp): GEMM, softmax as e^(s - max) / sum, GEMM, the standard backward.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "test_precision_plain.hpp"
#include "test_util.hpp"

namespace {

using attn_precision::cast;
using attn_precision::normwise_error;
using attn_precision::plain_mha;
using attn_precision::plain_sdpa;
using attn_precision::vec;
constexpr double floor_error = 2e-6;

std::vector<float> normal(size_t n, uint32_t seed, float sigma) {
    return attn_test::normal_tensor(n, seed, sigma);
}

// The rule for one quantity: got (the library), plain (float32 yardstick), exact (float64).
// norm_of: the errors are relative to this vector's norm (default: exact's). ATTN_PRECISION_PRINT=1
// prints every pair of errors.
void expect_rule(const std::string &what, const std::vector<float> &got, const vec<float> &plain,
                 const vec<double> &exact, const vec<double> *norm_of = nullptr) {
    double e_got = normwise_error(got, exact), e_plain = normwise_error(plain, exact);
    if (norm_of) {
        auto norm = [](const vec<double> &x) {
            double s = 0.0;
            for (double e : x) s += e * e;
            return std::sqrt(s);
        };
        const double ratio = norm(exact) / norm(*norm_of);
        e_got *= ratio;
        e_plain *= ratio;
    }
    if (std::getenv("ATTN_PRECISION_PRINT"))
        std::printf("  %-6s library %.3g  plain float32 %.3g\n", what.c_str(), e_got, e_plain);
    EXPECT_LE(e_got, std::max(2.0 * e_plain, floor_error))
        << what << ": library " << e_got << ", plain float32 " << e_plain;
}

struct sdpa_case {
    const char *name;
    int64_t batch, heads, len_q, len_kv, dim;
    attn_causal causal;
    std::vector<int32_t> kv_len;
    float qk_sigma;  // q, k ~ N(0, sigma^2): scaled scores ~ N(0, sigma^4)
};

class Precision : public attn_test::path_test {};

// Scores of magnitude ~100 (q, k ~ 10 N(0,1), D 128): the forward's e^(s - m).
TEST_P(Precision, ForwardLargeScores) {
    const sdpa_case cases[] = {{"d128", 1, 2, 256, 256, 128, ATTN_CAUSAL_NONE, {}, 10.0f},
                               {"d64_causal", 1, 2, 80, 80, 64, ATTN_CAUSAL_TOP_LEFT, {}, 10.0f}};
    for (const sdpa_case &c : cases) {
        SCOPED_TRACE(c.name);
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, c.batch, c.heads, c.len_q, c.len_kv, c.dim);
        d.causal = c.causal;
        const size_t nq = size_t(c.batch * c.heads * c.len_q * c.dim),
                     nk = size_t(c.batch * c.heads * c.len_kv * c.dim);
        const auto q = normal(nq, 1, c.qk_sigma), k = normal(nk, 2, c.qk_sigma),
                   v = normal(nk, 3, 1.0f), g = normal(nq, 4, 1.0f);
        std::vector<float> out(nq);
        ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK);
        const auto exact = plain_sdpa<double>(d, cast<double>(q), cast<double>(k), cast<double>(v),
                                              cast<double>(g));
        const auto plain = plain_sdpa<float>(d, q, k, v, g);
        expect_rule("out", out, plain.out, exact.out);
    }
}

// Scores reaching |s| ~ 30: every gradient, with the forward's lse and without it.
TEST_P(Precision, SdpaBackwardLargeScores) {
    const sdpa_case cases[] = {
        {"plain_d64", 1, 2, 64, 64, 64, ATTN_CAUSAL_NONE, {}, 3.2f},
        {"causal_d16", 2, 1, 70, 70, 16, ATTN_CAUSAL_TOP_LEFT, {}, 3.2f},
        {"cross_padding_bottom_right_d128", 2, 2, 40, 100, 128, ATTN_CAUSAL_BOTTOM_RIGHT,
         {77, 100}, 3.2f},
        {"cross_d32", 1, 3, 33, 77, 32, ATTN_CAUSAL_NONE, {}, 3.2f}};
    for (const sdpa_case &c : cases)
        for (bool with_lse : {true, false}) {
            SCOPED_TRACE(std::string(c.name) + (with_lse ? " lse" : " no lse"));
            attn_sdpa_desc d;
            attn_sdpa_desc_init(&d, c.batch, c.heads, c.len_q, c.len_kv, c.dim);
            d.causal = c.causal;
            d.kv_len = c.kv_len.empty() ? nullptr : c.kv_len.data();
            const size_t nq = size_t(c.batch * c.heads * c.len_q * c.dim),
                         nk = size_t(c.batch * c.heads * c.len_kv * c.dim);
            const auto q = normal(nq, 5, c.qk_sigma), k = normal(nk, 6, c.qk_sigma),
                       v = normal(nk, 7, 1.0f), g = normal(nq, 8, 1.0f);
            std::vector<float> out(nq), lse(size_t(c.batch * c.heads * c.len_q)), dq(nq), dk(nk),
                dv(nk);
            attn_sdpa_desc f = d;
            f.lse = lse.data();
            ASSERT_EQ(attn_sdpa_f32(ctx(), &f, q.data(), k.data(), v.data(), out.data()), ATTN_OK);
            ASSERT_EQ(attn_sdpa_backward_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data(),
                                             g.data(), with_lse ? lse.data() : nullptr, dq.data(),
                                             dk.data(), dv.data()),
                      ATTN_OK);
            const auto exact = plain_sdpa<double>(d, cast<double>(q), cast<double>(k),
                                                  cast<double>(v), cast<double>(g));
            const auto plain = plain_sdpa<float>(d, q, k, v, g);
            expect_rule("dq", dq, plain.dq, exact.dq);
            expect_rule("dk", dk, plain.dk, exact.dk);
            expect_rule("dv", dv, plain.dv, exact.dv);
        }
}

struct mha_case {
    const char *name;
    int64_t batch, len_q, len_kv;
    bool self, causal;
    std::vector<int32_t> kv_len;
    int64_t d_model, heads;
};

// Weights ~ 0.3 N(0,1), x ~ N(0,1), d_model 96, 3 heads: scaled scores reach |s| ~ 30.
TEST_P(Precision, MhaLargeScores) {
    const mha_case cases[] = {{"self_causal_padding", 2, 48, 48, true, true, {48, 31}, 96, 3},
                              {"cross", 2, 20, 56, false, false, {}, 96, 3},
                              {"self_head_dim_96", 1, 40, 40, true, true, {}, 96, 1}};
    for (const mha_case &c : cases) {
        SCOPED_TRACE(c.name);
        attn_mha_desc d;
        attn_mha_desc_init(&d, c.batch, c.len_q, c.len_kv, c.d_model, c.heads);
        d.causal = c.causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
        d.kv_len = c.kv_len.empty() ? nullptr : c.kv_len.data();
        const int64_t dm = c.d_model, w = d.heads * d.head_dim;
        const auto xq = normal(size_t(c.batch * c.len_q * dm), 11, 1.0f);
        const auto xkv = c.self ? xq : normal(size_t(c.batch * c.len_kv * dm), 12, 1.0f);
        const auto wq = normal(size_t(w * dm), 13, 0.3f), wk = normal(size_t(w * dm), 14, 0.3f),
                   wv = normal(size_t(w * dm), 15, 0.3f), wo = normal(size_t(dm * w), 16, 0.3f);
        const auto bq = normal(size_t(w), 17, 0.1f), bk = normal(size_t(w), 18, 0.1f),
                   bv = normal(size_t(w), 19, 0.1f), bo = normal(size_t(dm), 20, 0.1f);
        const auto dy = normal(size_t(c.batch * c.len_q * dm), 21, 1.0f);
        d.w_q = wq.data(), d.w_k = wk.data(), d.w_v = wv.data(), d.w_o = wo.data();
        d.b_q = bq.data(), d.b_k = bk.data(), d.b_v = bv.data(), d.b_o = bo.data();

        std::vector<float> y(dy.size()), dxq(xq.size()), dxkv(xkv.size());
        std::vector<float> dwq(wq.size()), dwk(wk.size()), dwv(wv.size()), dwo(wo.size());
        std::vector<float> dbq(bq.size()), dbk(bk.size()), dbv(bv.size()), dbo(bo.size());
        attn_mha_grads gr{dwq.data(), dwk.data(), dwv.data(), dwo.data(),
                          dbq.data(), dbk.data(), dbv.data(), dbo.data()};
        const float *x_kv = c.self ? xq.data() : xkv.data();
        ASSERT_EQ(attn_mha_forward_f32(ctx(), &d, xq.data(), x_kv, y.data()), ATTN_OK);
        ASSERT_EQ(attn_mha_backward_f32(ctx(), &d, xq.data(), x_kv, dy.data(), dxq.data(),
                                        c.self ? nullptr : dxkv.data(), &gr),
                  ATTN_OK)
            << attn_last_error();

        auto run = [&](auto zero) {
            using T = decltype(zero);
            return plain_mha<T>(d, cast<T>(xq), cast<T>(xkv), cast<T>(wq), cast<T>(wk),
                                cast<T>(wv), cast<T>(wo), cast<T>(bq), cast<T>(bk), cast<T>(bv),
                                cast<T>(bo), cast<T>(dy));
        };
        auto exact = run(0.0);
        auto plain = run(0.0f);
        if (c.self) {  // dx_q holds the whole gradient
            for (size_t i = 0; i < exact.dx_q.size(); ++i) {
                exact.dx_q[i] += exact.dx_kv[i];
                plain.dx_q[i] += plain.dx_kv[i];
            }
        } else {
            expect_rule("dx_kv", dxkv, plain.dx_kv, exact.dx_kv);
        }
        expect_rule("y", y, plain.y, exact.y);
        expect_rule("dx_q", dxq, plain.dx_q, exact.dx_q);
        expect_rule("dw_q", dwq, plain.dw_q, exact.dw_q);
        expect_rule("dw_k", dwk, plain.dw_k, exact.dw_k);
        expect_rule("dw_v", dwv, plain.dw_v, exact.dw_v);
        expect_rule("dw_o", dwo, plain.dw_o, exact.dw_o);
        expect_rule("db_q", dbq, plain.db_q, exact.db_q);
        // the exact db_k is zero (softmax ignores a shift common to a row's scores): its error
        // is measured against the size of db_q
        expect_rule("db_k", dbk, plain.db_k, exact.db_k, &exact.db_q);
        expect_rule("db_v", dbv, plain.db_v, exact.db_v);
        expect_rule("db_o", dbo, plain.db_o, exact.db_o);
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, Precision, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
