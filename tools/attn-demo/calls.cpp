// The demo's only contact with the library: matrix products and attention through the
// public C API, every status checked.
#include <stdexcept>
#include <string>
#include <utility>

#include "demo.hpp"

namespace demo {

void check(attn_status s, const char *call) {
    if (s == ATTN_OK) return;
    throw attn_failure(std::string(call) + " failed (" + attn_status_string(s) +
                       "): " + attn_last_error());
}

matrix::matrix(int64_t r, int64_t c, std::vector<float> values)
    : rows(r), cols(c), data(std::move(values)) {
    if (static_cast<int64_t>(data.size()) != r * c)
        throw std::logic_error("matrix: value count does not match the shape");
}

matrix scores(attn_context *ctx, const matrix &q, const matrix &k, float alpha) {
    // S[n, n] = alpha * Q[n, d] K[n, d]^T: B = K is stored [n, d] and used transposed.
    matrix s(q.rows, k.rows);
    check(attn_gemm_f32(ctx, ATTN_NO_TRANS, ATTN_TRANS, q.rows, k.rows, q.cols, alpha,
                        q.data.data(), q.cols, k.data.data(), k.cols, 0.0f, s.data.data(),
                        s.cols),
          "attn_gemm_f32");
    return s;
}

attention_result attention(attn_context *ctx, const matrix &q, const matrix &k, const matrix &v,
                           float scale, attn_causal causal, int64_t window_left) {
    const int64_t len_q = q.rows, len_kv = k.rows, dim_qk = q.cols, dim_v = v.cols;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, len_q, len_kv, dim_qk);
    // One batch, one head: only the seq stride matters, but keep the dense [1,1,seq,dim]
    // strides for V and the output, whose dim may differ from Q's and K's.
    d.dim_v = dim_v;
    d.v = attn_layout{len_kv * dim_v, len_kv * dim_v, dim_v};
    d.out = attn_layout{len_q * dim_v, len_q * dim_v, dim_v};
    d.scale = scale;
    d.causal = causal;
    d.window_left = window_left;

    attention_result r;
    r.weights = matrix(len_q, len_kv);
    r.out = matrix(len_q, dim_v);
    r.lse.assign(static_cast<size_t>(len_q), 0.0f);
    d.weights = r.weights.data.data();
    d.lse = r.lse.data();
    check(attn_sdpa_f32(ctx, &d, q.data.data(), k.data.data(), v.data.data(), r.out.data.data()),
          "attn_sdpa_f32");
    return r;
}

}  // namespace demo
