// The backward of attention (attn_sdpa_backward_f32) on every path, the reference included,
// per ISA. Criterion for dq, dk, dv, with e(x) = max |x - exact| / (1 + |exact|) against the
// float64 analytic gradients below:
//   e(path) <= 2 * e(plain) + 1e-5,
// plain the same gradients in plain float32 (backward_in<float>). The 1e-5 floor (about 80
// float ulps at 1): gradients sum len_q or len_kv products of fp32 values, so a different
// but equally exact order of those sums moves them by about that much at these sizes.
// And the gradients are bitwise identical for 1, 2 and 3 threads.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ref/dropout.hpp"
#include "test_util.hpp"

namespace {

using attn_test::random_tensor;
constexpr double floor_tolerance = 1e-5;

template <class T>
struct grads {
    std::vector<T> dq, dk, dv;
};

// Analytic gradients in the number type T over dense BHSD tensors (T = double: the oracle;
// T = float: the plain float32 computation, the yardstick), for the options of d (mask,
// causal, kv_len, dropout, GQA): P = softmax(S), dV = (P z)^T dO, dP = z (dO V^T),
// dS = P (dP - sum_j P dP), dQ = scale dS K, dK = scale dS^T Q.
template <class T>
grads<T> backward_in(const attn_sdpa_desc &d, const std::vector<T> &q, const std::vector<T> &k,
                     const std::vector<T> &v, const std::vector<T> &dout) {
    using vec = std::vector<T>;
    const int64_t Lq = d.len_q, Lk = d.len_kv, Dk = d.dim_qk, Dv = d.dim_v;
    const int64_t group = d.heads_q / d.heads_kv;
    grads<T> g{vec(q.size(), T(0)), vec(k.size(), T(0)), vec(v.size(), T(0))};
    vec s(static_cast<size_t>(Lk)), dp(static_cast<size_t>(Lk));
    for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t h = 0; h < d.heads_q; ++h)
            for (int64_t i = 0; i < Lq; ++i) {
                const int64_t hk = h / group;
                const T *q_row = &q[size_t(((b * d.heads_q + h) * Lq + i) * Dk)];
                const T *do_row = &dout[size_t(((b * d.heads_q + h) * Lq + i) * Dv)];
                const int64_t kv_row0 = (b * d.heads_kv + hk) * Lk;
                auto k_row = [&](int64_t j) { return &k[size_t((kv_row0 + j) * Dk)]; };
                auto v_row = [&](int64_t j) { return &v[size_t((kv_row0 + j) * Dv)]; };
                T m = T(-INFINITY);
                for (int64_t j = 0; j < Lk; ++j) {
                    bool hidden = (d.causal == ATTN_CAUSAL_TOP_LEFT && j > i) ||
                                  (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + Lk - Lq) ||
                                  (d.kv_len && j >= d.kv_len[b]);
                    T dot = T(0);
                    for (int64_t c = 0; c < Dk; ++c) dot += q_row[c] * k_row(j)[c];
                    s[j] = hidden ? T(-INFINITY) : T(d.scale) * dot;
                    if (!hidden && d.mask)
                        s[j] += T(d.mask[b * d.mask_strides.batch + h * d.mask_strides.head +
                                       i * d.mask_strides.seq + j]);
                    m = std::max(m, s[j]);
                }
                if (m == T(-INFINITY)) continue;
                T sum = T(0);
                for (int64_t j = 0; j < Lk; ++j) sum += T(std::exp(s[j] - m));
                const uint32_t key = attn::dropout::row_key(d.dropout_seed, b, h, i);
                const uint32_t thresh = attn::dropout::threshold(d.dropout_p);
                T big_d = T(0);
                for (int64_t j = 0; j < Lk; ++j) {
                    const T p = T(std::exp(s[j] - m)) / sum;
                    T z = T(1);
                    if (d.dropout_p > 0.0f)
                        z = attn::dropout::dropped(key, j, thresh) ? T(0)
                                                                     : T(1) / (T(1) - T(d.dropout_p));
                    T dot = T(0);
                    for (int64_t c = 0; c < Dv; ++c) {
                        g.dv[size_t((kv_row0 + j) * Dv + c)] += p * z * do_row[c];
                        dot += do_row[c] * v_row(j)[c];
                    }
                    dp[j] = z * dot;
                    s[j] = p;
                    big_d += p * dp[j];
                }
                for (int64_t j = 0; j < Lk; ++j) {
                    const T ds = T(d.scale) * s[j] * (dp[j] - big_d);
                    for (int64_t c = 0; c < Dk; ++c) {
                        g.dq[size_t(((b * d.heads_q + h) * Lq + i) * Dk + c)] += ds * k_row(j)[c];
                        g.dk[size_t((kv_row0 + j) * Dk + c)] += ds * q_row[c];
                    }
                }
            }
    return g;
}

struct backward_case {
    std::string name;
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v;
    attn_causal causal = ATTN_CAUSAL_NONE;
    bool mask = false, with_lse = true;
    std::vector<int32_t> kv_len;
    float dropout = 0.0f;
};

struct problem {
    attn_sdpa_desc d;
    std::vector<float> q, k, v, dout, mask, out, lse;
    explicit problem(const backward_case &c) {
        attn_sdpa_desc_init(&d, c.batch, c.heads_q, c.len_q, c.len_kv, c.dim_qk);
        d.heads_kv = c.heads_kv;
        d.dim_v = c.dim_v;
        d.k = {c.heads_kv * c.len_kv * c.dim_qk, c.len_kv * c.dim_qk, c.dim_qk};
        d.v = {c.heads_kv * c.len_kv * c.dim_v, c.len_kv * c.dim_v, c.dim_v};
        d.out = {c.heads_q * c.len_q * c.dim_v, c.len_q * c.dim_v, c.dim_v};
        d.causal = c.causal;
        d.dropout_p = c.dropout;
        d.dropout_seed = 77;
        if (!c.kv_len.empty()) d.kv_len = c.kv_len.data();
        q = random_tensor(size_t(c.batch * c.heads_q * c.len_q * c.dim_qk), 21);
        k = random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_qk), 22);
        v = random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_v), 23);
        dout = random_tensor(size_t(c.batch * c.heads_q * c.len_q * c.dim_v), 24);
        if (c.mask) {  // [Lq, Lk] broadcast over batch and heads, with -inf entries
            mask = random_tensor(size_t(c.len_q * c.len_kv), 25);
            for (size_t e = 0; e < mask.size(); e += 5) mask[e] = -INFINITY;
            d.mask = mask.data();
            d.mask_strides = {0, 0, c.len_kv};
        }
        // out and lse from the reference forward
        out.resize(dout.size());
        lse.resize(size_t(c.batch * c.heads_q * c.len_q));
        attn_sdpa_desc fwd = d;
        fwd.lse = lse.data();
        auto ref = attn_test::make_context(ATTN_IMPL_REFERENCE);
        EXPECT_EQ(attn_sdpa_f32(ref.get(), &fwd, q.data(), k.data(), v.data(), out.data()),
                  ATTN_OK);
    }
};

struct float_grads {
    std::vector<float> dq, dk, dv;
    bool operator==(const float_grads &o) const {
        using attn_test::bitwise_equal;
        return bitwise_equal(dq, o.dq) && bitwise_equal(dk, o.dk) && bitwise_equal(dv, o.dv);
    }
};

float_grads run(attn_context *ctx, const problem &p, bool with_lse) {
    float_grads g{std::vector<float>(p.q.size(), NAN), std::vector<float>(p.k.size(), NAN),
                  std::vector<float>(p.v.size(), NAN)};
    EXPECT_EQ(attn_sdpa_backward_f32(ctx, &p.d, p.q.data(), p.k.data(), p.v.data(), p.out.data(),
                                     p.dout.data(), with_lse ? p.lse.data() : nullptr,
                                     g.dq.data(), g.dk.data(), g.dv.data()),
              ATTN_OK)
        << attn_last_error();
    return g;
}

std::vector<backward_case> cases() {
    std::vector<backward_case> out;
    out.push_back({"plain", 1, 2, 2, 70, 90, 32, 32});
    out.push_back({"dims_odd_gqa", 2, 4, 2, 33, 65, 17, 9});
    out.push_back({"causal_top_left_blocks", 1, 2, 1, 150, 150, 64, 64, ATTN_CAUSAL_TOP_LEFT});
    backward_case c{"causal_bottom_right_mask_no_lse", 1, 2, 2, 40, 100, 16, 24,
                    ATTN_CAUSAL_BOTTOM_RIGHT};
    c.mask = true;
    c.with_lse = false;
    out.push_back(c);
    c = {"kv_len_dropout", 3, 2, 2, 30, 80, 32, 32};
    c.kv_len = {0, 41, 80};
    c.dropout = 0.2f;
    out.push_back(c);
    c = {"tall_bottom_right_fully_masked_rows", 1, 1, 1, 90, 20, 8, 8, ATTN_CAUSAL_BOTTOM_RIGHT};
    out.push_back(c);
    return out;
}

// Every path, the reference included, against the float64 gradients with the plain f32
// ones as the yardstick.
class SdpaBackwardOracle : public testing::TestWithParam<attn_test::path> {};

TEST_P(SdpaBackwardOracle, WithinYardstick) {
    auto ctx = attn_test::make_context(GetParam().impl, GetParam().isa);
    ASSERT_TRUE(ctx);
    for (const backward_case &c : cases()) {
        SCOPED_TRACE(c.name);
        problem p(c);
        const float_grads got = run(ctx.get(), p, c.with_lse);
        using attn_test::to_double;
        const grads<double> exact = backward_in<double>(p.d, to_double(p.q), to_double(p.k),
                                                        to_double(p.v), to_double(p.dout));
        const grads<float> plain = backward_in<float>(p.d, p.q, p.k, p.v, p.dout);
        EXPECT_TRUE(attn_test::within_yardstick(got.dq, plain.dq, exact.dq, floor_tolerance)) << "dq";
        EXPECT_TRUE(attn_test::within_yardstick(got.dk, plain.dk, exact.dk, floor_tolerance)) << "dk";
        EXPECT_TRUE(attn_test::within_yardstick(got.dv, plain.dv, exact.dv, floor_tolerance)) << "dv";
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, SdpaBackwardOracle, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

class SdpaBackwardSimd : public testing::TestWithParam<attn_test::path> {};

TEST_P(SdpaBackwardSimd, BitwiseIdenticalAcrossThreadCounts) {
    ATTN_SKIP_UNLESS_THREADS(2);
    backward_case c{"gqa_causal_dropout", 2, 4, 2, 200, 200, 32, 32, ATTN_CAUSAL_TOP_LEFT};
    c.dropout = 0.1f;
    problem p(c);
    std::vector<float_grads> results;
    for (int threads : {1, 2, 3}) {
        auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa, threads);
        results.push_back(run(ctx.get(), p, true));
    }
    EXPECT_TRUE(results[0] == results[1]);
    EXPECT_TRUE(results[0] == results[2]);
}

INSTANTIATE_TEST_SUITE_P(PerIsa, SdpaBackwardSimd, testing::ValuesIn(attn_test::simd_paths()),
                         attn_test::path_name);

}  // namespace
