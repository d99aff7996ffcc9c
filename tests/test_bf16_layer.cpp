// One multi-head attention layer forward in bf16, composed from the public parts: attn_gemm
// projects x [B, L, d_model] (bf16) by W^T straight into Q, K, V of [B*L, heads*head_dim]
// bf16, which attn_sdpa reads in place as BSHD (no copies, no transposes) and writes its
// output in BSHD bf16; attn_gemm projects that by W_o^T into y (bf16). Checked on every path
// against the layer in float64 on the same values (x and the weights rounded to bf16 once),
// computed in the tests (test_precision_plain.hpp), causal and not, with grouped-query
// attention.
//
// Tolerance: a plain bf16 computation written here (the same roundings: Q, K, V, the
// attention output and y rounded once to bf16; products summed in f32; softmax in f32, P not
// rounded) sets the scale: normwise, the library's error is at most twice the plain one, the
// rule of attn_sdpa and attn_gemm carried through the layer (measured: 1.0x on the f32-panel
// levels, 1.1-1.2x on avx512_bf16, where attn_sdpa also rounds P to bf16 before P V).
#include <cmath>
#include <cstdint>
#include <vector>

#include "ref/convert.hpp"
#include "test_precision_plain.hpp"
#include "test_util.hpp"

namespace {

using attn_test::path_test;
namespace cv = attn::convert;
using bits = std::vector<uint16_t>;

float round_bf16(float x) { return cv::bf16_to_f32(cv::f32_to_bf16(x)); }

bits to_bits(const std::vector<float> &x) {
    bits out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = cv::f32_to_bf16(x[i]);
    return out;
}
std::vector<float> to_floats(const bits &x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = cv::bf16_to_f32(x[i]);
    return out;
}

struct layer {
    int64_t batch, len_q, len_kv, d_model, heads, heads_kv, head_dim;
    attn_causal causal;
    int64_t wq() const { return heads * head_dim; }
    int64_t wkv() const { return heads_kv * head_dim; }
};

// Values already bf16 (as floats): x_q, x_kv and the four nn.Linear weights.
struct params {
    std::vector<float> x_q, x_kv, w_q, w_k, w_v, w_o;
};

params make_params(const layer &l, uint32_t seed) {
    const float ws = 1.0f / std::sqrt(float(l.d_model));
    auto rounded = [](std::vector<float> v) {
        for (float &x : v) x = round_bf16(x);
        return v;
    };
    params p;
    p.x_q = rounded(attn_test::random_tensor(size_t(l.batch * l.len_q * l.d_model), seed, -2.0f, 2.0f));
    p.x_kv = rounded(attn_test::random_tensor(size_t(l.batch * l.len_kv * l.d_model), seed + 1, -2.0f, 2.0f));
    p.w_q = rounded(attn_test::random_tensor(size_t(l.wq() * l.d_model), seed + 2, -ws, ws));
    p.w_k = rounded(attn_test::random_tensor(size_t(l.wkv() * l.d_model), seed + 3, -ws, ws));
    p.w_v = rounded(attn_test::random_tensor(size_t(l.wkv() * l.d_model), seed + 4, -ws, ws));
    p.w_o = rounded(attn_test::random_tensor(size_t(l.d_model * l.wq()), seed + 5, -ws, ws));
    return p;
}

// The bf16 layer from attn_gemm and attn_sdpa; returns y [B*Lq, d_model] (bf16 bits).
bits bf16_layer(attn_context *ctx, const layer &l, const params &p) {
    const bits xq = to_bits(p.x_q), xkv = to_bits(p.x_kv), wq = to_bits(p.w_q),
               wk = to_bits(p.w_k), wv = to_bits(p.w_v), wo = to_bits(p.w_o);
    const int64_t rq = l.batch * l.len_q, rkv = l.batch * l.len_kv, dm = l.d_model;
    bits q(size_t(rq * l.wq())), k(size_t(rkv * l.wkv())), v(k.size()), o(q.size()),
        y(size_t(rq * dm));
    const attn_dtype bf = ATTN_DTYPE_BF16;
    // C [rows, out] = X [rows, dm] W^T, W stored [out, dm] (nn.Linear): B transposed.
    auto project = [&](const bits &x, int64_t rows, const bits &w, int64_t out, bits &c) {
        EXPECT_EQ(attn_gemm(ctx, ATTN_NO_TRANS, ATTN_TRANS, rows, out, dm, 1.0f, x.data(), bf, dm,
                            w.data(), bf, dm, 0.0f, c.data(), bf, out),
                  ATTN_OK)
            << attn_last_error();
    };
    project(xq, rq, wq, l.wq(), q);
    project(xkv, rkv, wk, l.wkv(), k);
    project(xkv, rkv, wv, l.wkv(), v);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, l.batch, l.heads, l.len_q, l.len_kv, l.head_dim);
    d.heads_kv = l.heads_kv;
    // BSHD: the projections' rows are (b, s), their columns (h, dim).
    d.q = d.out = {l.len_q * l.wq(), l.head_dim, l.wq()};
    d.k = d.v = {l.len_kv * l.wkv(), l.head_dim, l.wkv()};
    d.causal = l.causal;
    d.q_type = d.kv_type = d.out_type = bf;
    EXPECT_EQ(attn_sdpa(ctx, &d, q.data(), k.data(), v.data(), o.data()), ATTN_OK)
        << attn_last_error();
    EXPECT_EQ(attn_gemm(ctx, ATTN_NO_TRANS, ATTN_TRANS, rq, dm, l.wq(), 1.0f, o.data(), bf,
                        l.wq(), wo.data(), bf, l.wq(), 0.0f, y.data(), bf, dm),
              ATTN_OK)
        << attn_last_error();
    return y;
}

// The plain bf16 computation (see the header): f32 sums in index order, bf16 roundings at
// Q, K, V, the attention output and y.
std::vector<float> plain_bf16_layer(const layer &l, const params &p) {
    const int64_t dm = l.d_model, D = l.head_dim, group = l.heads / l.heads_kv;
    auto linear = [&](const std::vector<float> &x, int64_t rows, const std::vector<float> &w,
                      int64_t out) {
        std::vector<float> c(size_t(rows * out));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < out; ++j) {
                float acc = 0.0f;
                for (int64_t m = 0; m < dm; ++m) acc += x[size_t(r * dm + m)] * w[size_t(j * dm + m)];
                c[size_t(r * out + j)] = round_bf16(acc);
            }
        return c;
    };
    const std::vector<float> q = linear(p.x_q, l.batch * l.len_q, p.w_q, l.wq());
    const std::vector<float> k = linear(p.x_kv, l.batch * l.len_kv, p.w_k, l.wkv());
    const std::vector<float> v = linear(p.x_kv, l.batch * l.len_kv, p.w_v, l.wkv());
    std::vector<float> o(q.size(), 0.0f), s(size_t(l.len_kv));
    const float scale = 1.0f / std::sqrt(float(D));
    for (int64_t b = 0; b < l.batch; ++b)
        for (int64_t h = 0; h < l.heads; ++h)
            for (int64_t i = 0; i < l.len_q; ++i) {
                const float *qi = &q[size_t((b * l.len_q + i) * l.wq() + h * D)];
                float top = -INFINITY;
                int64_t visible = l.len_kv;
                if (l.causal == ATTN_CAUSAL_TOP_LEFT) visible = std::min(l.len_kv, i + 1);
                if (l.causal == ATTN_CAUSAL_BOTTOM_RIGHT)
                    visible = std::min(l.len_kv, i + 1 + l.len_kv - l.len_q);
                for (int64_t j = 0; j < visible; ++j) {
                    const float *kj = &k[size_t((b * l.len_kv + j) * l.wkv() + h / group * D)];
                    float dot = 0.0f;
                    for (int64_t c = 0; c < D; ++c) dot += qi[c] * kj[c];
                    s[size_t(j)] = scale * dot;
                    top = std::max(top, s[size_t(j)]);
                }
                float sum = 0.0f;
                for (int64_t j = 0; j < visible; ++j) sum += s[size_t(j)] = std::exp(s[size_t(j)] - top);
                float *oi = &o[size_t((b * l.len_q + i) * l.wq() + h * D)];
                for (int64_t c = 0; c < D && visible > 0; ++c) {
                    float acc = 0.0f;
                    for (int64_t j = 0; j < visible; ++j)
                        acc += s[size_t(j)] * v[size_t((b * l.len_kv + j) * l.wkv() + h / group * D + c)];
                    oi[c] = round_bf16(acc / sum);
                }
            }
    std::vector<float> y(size_t(l.batch * l.len_q * dm));
    for (int64_t r = 0; r < l.batch * l.len_q; ++r)
        for (int64_t j = 0; j < dm; ++j) {
            float acc = 0.0f;
            for (int64_t m = 0; m < l.wq(); ++m) acc += o[size_t(r * l.wq() + m)] * p.w_o[size_t(j * l.wq() + m)];
            y[size_t(r * dm + j)] = round_bf16(acc);
        }
    return y;
}

class bf16_layer_test : public path_test {};

TEST_P(bf16_layer_test, matches_the_f32_layer) {
    const layer layers[] = {
        {2, 33, 33, 64, 4, 4, 16, ATTN_CAUSAL_NONE},          // self-attention
        {2, 33, 33, 64, 4, 2, 16, ATTN_CAUSAL_TOP_LEFT},      // GQA, causal
        {1, 17, 40, 48, 6, 2, 8, ATTN_CAUSAL_BOTTOM_RIGHT},   // cross, GQA, causal
        {2, 20, 45, 96, 3, 1, 32, ATTN_CAUSAL_NONE},          // one KV head
    };
    uint32_t seed = 50;
    for (const layer &l : layers) {
        const params p = make_params(l, seed);
        seed += 10;
        attn_mha_desc d;
        attn_mha_desc_init(&d, l.batch, l.len_q, l.len_kv, l.d_model, l.heads);
        d.heads_kv = l.heads_kv;
        d.head_dim = l.head_dim;
        d.w_q = p.w_q.data();
        d.w_k = p.w_k.data();
        d.w_v = p.w_v.data();
        d.w_o = p.w_o.data();
        d.causal = l.causal;
        // the oracle: the layer in float64 on the same (bf16-valued) x and weights, written in
        // the tests (test_precision_plain.hpp; no biases: zeros, which add exactly)
        using attn_precision::cast;
        const std::vector<float> zeros_w(size_t(l.wq()), 0.0f), zeros_kv(size_t(l.wkv()), 0.0f),
            zeros_dm(size_t(l.d_model), 0.0f), dy(size_t(l.batch * l.len_q * l.d_model), 0.0f);
        const std::vector<double> want =
            attn_precision::plain_mha<double>(d, cast<double>(p.x_q), cast<double>(p.x_kv),
                                              cast<double>(p.w_q), cast<double>(p.w_k),
                                              cast<double>(p.w_v), cast<double>(p.w_o),
                                              cast<double>(zeros_w), cast<double>(zeros_kv),
                                              cast<double>(zeros_kv), cast<double>(zeros_dm),
                                              cast<double>(dy))
                .y;
        const std::vector<float> got = to_floats(bf16_layer(ctx(), l, p));
        ASSERT_FALSE(HasFailure());
        const double err = attn_precision::normwise_error(got, want);
        const double plain = attn_precision::normwise_error(plain_bf16_layer(l, p), want);
        EXPECT_GT(plain, 1e-4) << "the plain computation must show bf16's error";
        EXPECT_LE(err, 2.0 * plain) << "heads " << l.heads << " kv " << l.heads_kv << " causal "
                                    << l.causal << " (plain " << plain << ")";
    }
}

INSTANTIATE_TEST_SUITE_P(paths, bf16_layer_test, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
