// The yardstick and the oracle of tests/test_precision.cpp: attention and multi-head attention,
// forward and backward, by the textbook formulas (GEMM, softmax by e^(s - max) / sum, GEMM, and
// the standard backward), written once as templates on the number type T. T = float is "a
// plain float32 computation of the same thing"; T = double is the oracle.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "attn/attn.h"
#include "ref/dropout.hpp"

namespace attn_precision {

template <class T>
using vec = std::vector<T>;

// Normwise relative error ||got - want||_2 / ||want||_2.
template <class G>
double normwise_error(const std::vector<G> &got, const vec<double> &want) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double e = double(got[i]) - want[i];
        num += e * e;
        den += want[i] * want[i];
    }
    return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

template <class T>
vec<T> cast(const std::vector<float> &x) {
    return vec<T>(x.begin(), x.end());
}

template <class T>
struct sdpa_result {
    vec<T> out, dq, dk, dv;
};

// Dense BHSD, dim_qk == dim_v; d's heads_kv (grouped-query attention: a K/V head's gradients
// sum over its group of query heads), causal, kv_len and dropout (src/ref/dropout.hpp's
// generator, the API's); loss sum(out * dout).
template <class T>
sdpa_result<T> plain_sdpa(const attn_sdpa_desc &d, const vec<T> &q, const vec<T> &k,
                          const vec<T> &v, const vec<T> &dout) {
    const int64_t H = d.batch * d.heads_q, Lq = d.len_q, Lk = d.len_kv, D = d.dim_qk;
    const int64_t group = d.heads_q / d.heads_kv;
    const T scale = T(d.scale);
    const uint32_t thresh = attn::dropout::threshold(d.dropout_p);
    sdpa_result<T> r{vec<T>(q.size(), T(0)), vec<T>(q.size(), T(0)), vec<T>(k.size(), T(0)),
                     vec<T>(v.size(), T(0))};
    vec<T> p(static_cast<size_t>(Lk)), dp(static_cast<size_t>(Lk));
    for (int64_t bh = 0; bh < H; ++bh) {
        const int64_t b = bh / d.heads_q, h = bh % d.heads_q;
        const int64_t kv_bh = b * d.heads_kv + h / group;
        const T *K = &k[size_t(kv_bh * Lk * D)], *V = &v[size_t(kv_bh * Lk * D)];
        for (int64_t i = 0; i < Lq; ++i) {
            const T *Q = &q[size_t((bh * Lq + i) * D)], *G = &dout[size_t((bh * Lq + i) * D)];
            int64_t n = d.kv_len ? d.kv_len[b] : Lk;
            if (d.causal == ATTN_CAUSAL_TOP_LEFT) n = std::min<int64_t>(n, i + 1);
            if (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT) n = std::min<int64_t>(n, i + 1 + Lk - Lq);
            if (n <= 0) continue;
            T m = -INFINITY, sum = T(0);
            for (int64_t j = 0; j < n; ++j) {
                T dot = T(0);
                for (int64_t c = 0; c < D; ++c) dot += Q[c] * K[j * D + c];
                p[j] = scale * dot;
                m = std::max(m, p[j]);
            }
            for (int64_t j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - m));
            T big_d = T(0);
            const uint32_t key = attn::dropout::row_key(d.dropout_seed, b, h, i);
            for (int64_t j = 0; j < n; ++j) {
                p[j] /= sum;
                // z: 0 for a dropped weight, 1 / (1 - p_drop) for a kept one
                T z = T(1);
                if (d.dropout_p > 0.0f)
                    z = attn::dropout::dropped(key, j, thresh) ? T(0) : T(1) / (T(1) - T(d.dropout_p));
                T dot = T(0);
                for (int64_t c = 0; c < D; ++c) {
                    r.out[size_t((bh * Lq + i) * D + c)] += p[j] * z * V[j * D + c];
                    r.dv[size_t((kv_bh * Lk + j) * D + c)] += p[j] * z * G[c];
                    dot += G[c] * V[j * D + c];
                }
                dp[j] = z * dot;
                big_d += p[j] * dp[j];
            }
            for (int64_t j = 0; j < n; ++j) {
                const T ds = scale * p[j] * (dp[j] - big_d);
                for (int64_t c = 0; c < D; ++c) {
                    r.dq[size_t((bh * Lq + i) * D + c)] += ds * K[j * D + c];
                    r.dk[size_t((kv_bh * Lk + j) * D + c)] += ds * Q[c];
                }
            }
        }
    }
    return r;
}

// C[m x n] (+)= A B, A [m x k] or (ta) A^T stored [k x m], B [k x n] or (tb) B^T stored [n x k].
template <class T>
void matmul(const T *a, const T *b, T *c, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
            bool accumulate = false) {
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            T s = T(0);
            for (int64_t x = 0; x < k; ++x) s += (ta ? a[x * m + i] : a[i * k + x]) * (tb ? b[j * k + x] : b[x * n + j]);
            c[i * n + j] = accumulate ? c[i * n + j] + s : s;
        }
}

template <class T>
struct mha_result {
    vec<T> y, dx_q, dx_kv, dw_q, dw_k, dw_v, dw_o, db_q, db_k, db_v, db_o;
};

// attn_mha_desc's computation (heads_kv K/V heads, dropout; biases present: pass zeros for a
// layer without them) and its gradients for the loss sum(y * dy); x_kv may equal x_q
// (self-attention: dx_kv then holds the K, V part).
template <class T>
mha_result<T> plain_mha(const attn_mha_desc &d, const vec<T> &xq, const vec<T> &xkv,
                        const vec<T> &wq, const vec<T> &wk, const vec<T> &wv, const vec<T> &wo,
                        const vec<T> &bq, const vec<T> &bk, const vec<T> &bv, const vec<T> &bo,
                        const vec<T> &dy) {
    const int64_t B = d.batch, Lq = d.len_q, Lk = d.len_kv, dm = d.d_model, H = d.heads,
                  hd = d.head_dim, w = H * hd, Hkv = d.heads_kv > 0 ? d.heads_kv : H,
                  wkv = Hkv * hd;
    auto proj = [&](const vec<T> &x, int64_t rows, const vec<T> &W, const vec<T> &bias, int64_t n) {
        vec<T> out(size_t(rows * n));
        matmul(x.data(), W.data(), out.data(), rows, n, dm, false, true);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < n; ++c) out[size_t(r * n + c)] += bias[size_t(c)];
        return out;
    };
    const vec<T> Q = proj(xq, B * Lq, wq, bq, w), K = proj(xkv, B * Lk, wk, bk, wkv),
                 V = proj(xkv, B * Lk, wv, bv, wkv);
    // to BHSD and back, for the query heads or (heads = Hkv) the K/V heads
    auto bhsd = [&](const vec<T> &x, int64_t L, int64_t heads = 0) {
        if (heads == 0) heads = H;
        const int64_t width = heads * hd;
        vec<T> out(x.size());
        for (int64_t b = 0; b < B; ++b)
            for (int64_t l = 0; l < L; ++l)
                for (int64_t h = 0; h < heads; ++h)
                    for (int64_t c = 0; c < hd; ++c)
                        out[size_t(((b * heads + h) * L + l) * hd + c)] = x[size_t((b * L + l) * width + h * hd + c)];
        return out;
    };
    auto bshd = [&](const vec<T> &x, int64_t L, int64_t heads = 0) {
        if (heads == 0) heads = H;
        const int64_t width = heads * hd;
        vec<T> out(x.size());
        for (int64_t b = 0; b < B; ++b)
            for (int64_t l = 0; l < L; ++l)
                for (int64_t h = 0; h < heads; ++h)
                    for (int64_t c = 0; c < hd; ++c)
                        out[size_t((b * L + l) * width + h * hd + c)] = x[size_t(((b * heads + h) * L + l) * hd + c)];
        return out;
    };
    attn_sdpa_desc s;
    attn_sdpa_desc_init(&s, B, H, Lq, Lk, hd);
    s.heads_kv = Hkv;
    s.causal = d.causal;
    s.kv_len = d.kv_len;
    s.dropout_p = d.dropout_p;
    s.dropout_seed = d.dropout_seed;
    // the context's gradient dC = dy W_o comes first: the attention needs it as its dout
    vec<T> dC(size_t(B * Lq * w));
    matmul(dy.data(), wo.data(), dC.data(), B * Lq, w, dm, false, false);
    const sdpa_result<T> a =
        plain_sdpa<T>(s, bhsd(Q, Lq), bhsd(K, Lk, Hkv), bhsd(V, Lk, Hkv), bhsd(dC, Lq));
    const vec<T> C = bshd(a.out, Lq), dQ = bshd(a.dq, Lq), dK = bshd(a.dk, Lk, Hkv),
                 dV = bshd(a.dv, Lk, Hkv);
    mha_result<T> r;
    r.y.assign(size_t(B * Lq * dm), T(0));
    matmul(C.data(), wo.data(), r.y.data(), B * Lq, dm, w, false, true);
    for (int64_t x = 0; x < B * Lq; ++x)
        for (int64_t c = 0; c < dm; ++c) r.y[size_t(x * dm + c)] += bo[size_t(c)];
    auto col_sums = [](const vec<T> &x, int64_t rows, int64_t cols) {
        vec<T> s(size_t(cols), T(0));
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t c = 0; c < cols; ++c) s[size_t(c)] += x[size_t(i * cols + c)];
        return s;
    };
    r.dw_o.assign(size_t(dm * w), T(0));
    matmul(dy.data(), C.data(), r.dw_o.data(), dm, w, B * Lq, true, false);
    r.db_o = col_sums(dy, B * Lq, dm);
    r.dw_q.assign(size_t(w * dm), T(0));
    r.dw_k.assign(size_t(wkv * dm), T(0));
    r.dw_v = r.dw_k;
    matmul(dQ.data(), xq.data(), r.dw_q.data(), w, dm, B * Lq, true, false);
    matmul(dK.data(), xkv.data(), r.dw_k.data(), wkv, dm, B * Lk, true, false);
    matmul(dV.data(), xkv.data(), r.dw_v.data(), wkv, dm, B * Lk, true, false);
    r.db_q = col_sums(dQ, B * Lq, w);
    r.db_k = col_sums(dK, B * Lk, wkv);
    r.db_v = col_sums(dV, B * Lk, wkv);
    r.dx_q.assign(size_t(B * Lq * dm), T(0));
    r.dx_kv.assign(size_t(B * Lk * dm), T(0));
    matmul(dQ.data(), wq.data(), r.dx_q.data(), B * Lq, dm, w, false, false);
    matmul(dK.data(), wk.data(), r.dx_kv.data(), B * Lk, dm, wkv, false, false);
    matmul(dV.data(), wv.data(), r.dx_kv.data(), B * Lk, dm, wkv, false, false, true);
    return r;
}

}  // namespace attn_precision
