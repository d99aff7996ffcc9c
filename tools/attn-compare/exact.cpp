// The oracle in double precision: the same maths as the C API, written as directly as
// possible, so the fp32 reference's own rounding error can be measured against it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "compare.hpp"
#include "ref/dropout.hpp"

namespace attn_compare {

namespace {

constexpr double neg_inf = -std::numeric_limits<double>::infinity();

// Element (b, h, s, x) of a tensor with layout l.
inline int64_t at(attn_layout l, int64_t b, int64_t h, int64_t s) {
    return b * l.batch + h * l.head + s * l.seq;
}

// The masked, scaled scores of query row (b, h, i) and their softmax.
// Returns false when every key is masked (A and lse are then left to the caller).
// x rounded to the nearest bf16 (ties to even), through its f32 rounding.
double bf16_round(double x) {
    const float f = float(x);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
}

struct row_softmax {
    std::vector<double> a;     // A[j], softmax probabilities before dropout
    std::vector<double> keep;  // dropout factor: 0 or 1/(1-p); 1 without dropout
    std::vector<double> g;     // d s_j / d (scale q.k_j): 1 - tanh^2 with softcap, else 1
    double lse = neg_inf;
};

// i' - i: query i's position on the key axis, by the alignment attn.h gives (attn_sdpa_desc).
inline int64_t query_offset(const attn_sdpa_desc &d, int64_t b) {
    if (d.causal == ATTN_CAUSAL_TOP_LEFT) return 0;
    if (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN) return d.kv_len[b] - d.len_q;
    return d.len_kv - d.len_q;
}

bool attention_row(const attn_sdpa_desc &d, const double *q, const double *k, int64_t b,
                   int64_t h, int64_t i, row_softmax &r) {
    const int64_t group = d.heads_q / d.heads_kv;
    const int64_t hk = h / group;
    const double *qi = q + at(d.q, b, h, i);
    r.a.assign(d.len_kv, neg_inf);
    r.keep.assign(d.len_kv, 1.0);
    r.g.assign(d.len_kv, 1.0);
    const double sink = d.sinks ? double(d.sinks[h]) : neg_inf;
    const int64_t ip = i + query_offset(d, b);
    double m = neg_inf;
    for (int64_t j = 0; j < d.len_kv; ++j) {
        if (d.kv_len && j >= d.kv_len[b]) continue;
        if (d.causal != ATTN_CAUSAL_NONE && j > ip) continue;
        if (d.window_left >= 0 && j < ip - d.window_left) continue;
        if (d.window_right >= 0 && j > ip + d.window_right) continue;
        // s_j = softcap(scale * q_i . k_j) + mask(b, h, i, j) - slope_h |i' - j|
        const double *kj = k + at(d.k, b, hk, j);
        double dot = 0.0;
        for (int64_t x = 0; x < d.dim_qk; ++x) dot += qi[x] * kj[x];
        double s = double(d.scale) * dot;
        if (d.softcap > 0.0f) {
            const double t = std::tanh(s / double(d.softcap));
            s = double(d.softcap) * t;
            r.g[j] = 1.0 - t * t;
        }
        if (d.mask)
            s += d.mask[b * d.mask_strides.batch + h * d.mask_strides.head +
                        i * d.mask_strides.seq + j];
        if (d.alibi_slopes) s -= double(d.alibi_slopes[h]) * std::fabs(double(ip - j));
        r.a[j] = s;
        if (s > m) m = s;
    }
    if (m == neg_inf) {  // no visible key: zeros, lse = the sink
        r.a.assign(d.len_kv, 0.0);
        r.lse = sink;
        return false;
    }
    m = std::max(m, sink);
    double sum = sink == neg_inf ? 0.0 : std::exp(sink - m);  // the sink: a logit with no value
    for (auto &s : r.a) {
        s = (s == neg_inf) ? 0.0 : std::exp(s - m);
        sum += s;
    }
    for (auto &s : r.a) s /= sum;
    r.lse = m + std::log(sum);
    if (d.dropout_p > 0.0f) {
        const uint32_t key = attn::dropout::row_key(d.dropout_seed, b, h, i);
        const uint32_t thresh = attn::dropout::threshold(d.dropout_p);
        const double kept = 1.0 / (1.0 - double(d.dropout_p));
        for (int64_t j = 0; j < d.len_kv; ++j)
            r.keep[j] = attn::dropout::dropped(key, j, thresh) ? 0.0 : kept;
    }
    return true;
}

}  // namespace

void gemm_exact(attn_trans ta, attn_trans tb, int64_t m, int64_t n, int64_t k, double alpha,
                const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                double *c, int64_t ldc) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            // sum_p op(A)[i,p] op(B)[p,j]
            double acc = 0.0;
            for (int64_t p = 0; p < k; ++p) {
                const double aip = ta == ATTN_NO_TRANS ? a[i * lda + p] : a[p * lda + i];
                const double bpj = tb == ATTN_NO_TRANS ? b[p * ldb + j] : b[j * ldb + p];
                acc += aip * bpj;
            }
            double &cij = c[i * ldc + j];
            cij = alpha * acc + (beta == 0.0 ? 0.0 : beta * cij);
        }
    }
}

void softmax_exact(int64_t rows, int64_t cols, double scale, const double *x, int64_t ldx,
                   double *y) {
    for (int64_t i = 0; i < rows; ++i) {
        const double *xi = x + i * ldx;
        double *yi = y + i * cols;
        double m = neg_inf;
        bool has_nan = false;
        for (int64_t j = 0; j < cols; ++j) {
            if (std::isnan(xi[j])) has_nan = true;
            m = std::max(m, scale * xi[j]);
        }
        if (has_nan) {
            for (int64_t j = 0; j < cols; ++j) yi[j] = std::nan("");
            continue;
        }
        if (m == neg_inf) {
            for (int64_t j = 0; j < cols; ++j) yi[j] = 0.0;
            continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < cols; ++j) {
            const double s = scale * xi[j];
            yi[j] = s == neg_inf ? 0.0 : std::exp(s - m);
            sum += yi[j];
        }
        for (int64_t j = 0; j < cols; ++j) yi[j] /= sum;
    }
}

void sdpa_exact(const attn_sdpa_desc &d, const double *q, const double *k, const double *v,
                double *out, double *weights, double *lse, bool round_p) {
    const int64_t group = d.heads_q / d.heads_kv;
    row_softmax r;
    for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t h = 0; h < d.heads_q; ++h)
            for (int64_t i = 0; i < d.len_q; ++i) {
                const int64_t row = (b * d.heads_q + h) * d.len_q + i;
                const bool any = attention_row(d, q, k, b, h, i, r);
                // out_i = sum_j A_ij keep_ij v_j
                double *oi = out + row * d.dim_v;
                for (int64_t x = 0; x < d.dim_v; ++x) oi[x] = 0.0;
                if (any) {
                    for (int64_t j = 0; j < d.len_kv; ++j) {
                        double w = r.a[j] * r.keep[j];
                        if (round_p) w = bf16_round(w);
                        if (w == 0.0) continue;
                        const double *vj = v + at(d.v, b, h / group, j);
                        for (int64_t x = 0; x < d.dim_v; ++x) oi[x] += w * vj[x];
                    }
                }
                if (weights)
                    for (int64_t j = 0; j < d.len_kv; ++j) weights[row * d.len_kv + j] = r.a[j];
                if (lse) lse[row] = r.lse;
            }
}

void sdpa_backward_exact(const attn_sdpa_desc &d, const double *q, const double *k,
                         const double *v, const double *dout, double *dq, double *dk,
                         double *dv) {
    const int64_t group = d.heads_q / d.heads_kv;
    const int64_t dqk = d.dim_qk, dvd = d.dim_v;
    std::fill(dq, dq + d.batch * d.heads_q * d.len_q * dqk, 0.0);
    std::fill(dk, dk + d.batch * d.heads_kv * d.len_kv * dqk, 0.0);
    std::fill(dv, dv + d.batch * d.heads_kv * d.len_kv * dvd, 0.0);
    row_softmax r;
    std::vector<double> da(d.len_kv);
    for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t h = 0; h < d.heads_q; ++h)
            for (int64_t i = 0; i < d.len_q; ++i) {
                if (!attention_row(d, q, k, b, h, i, r)) continue;
                const int64_t hk = h / group;
                const double *qi = q + at(d.q, b, h, i);
                const double *doi = dout + at(d.out, b, h, i);
                double *dqi = dq + ((b * d.heads_q + h) * d.len_q + i) * dqk;
                // dA_j = keep_j (dO_i . v_j);  D = sum_j A_j dA_j
                double dsum = 0.0;
                for (int64_t j = 0; j < d.len_kv; ++j) {
                    const double *vj = v + at(d.v, b, hk, j);
                    double dot = 0.0;
                    for (int64_t x = 0; x < dvd; ++x) dot += doi[x] * vj[x];
                    da[j] = r.keep[j] * dot;
                    dsum += r.a[j] * da[j];
                }
                for (int64_t j = 0; j < d.len_kv; ++j) {
                    if (r.a[j] == 0.0) continue;
                    const int64_t kv_row = (b * d.heads_kv + hk) * d.len_kv + j;
                    // dV_j += A_j keep_j dO_i
                    const double w = r.a[j] * r.keep[j];
                    double *dvj = dv + kv_row * dvd;
                    for (int64_t x = 0; x < dvd; ++x) dvj[x] += w * doi[x];
                    // dS_j = A_j (dA_j - D);  dQ_i += scale dS_j k_j;  dK_j += scale dS_j q_i
                    const double ds = double(d.scale) * r.a[j] * (da[j] - dsum) * r.g[j];
                    const double *kj = k + at(d.k, b, hk, j);
                    double *dkj = dk + kv_row * dqk;
                    for (int64_t x = 0; x < dqk; ++x) {
                        dqi[x] += ds * kj[x];
                        dkj[x] += ds * qi[x];
                    }
                }
            }
}

void merge_exact(int64_t parts, int64_t rows, int64_t dim_v,
                 const std::vector<std::vector<double>> &outs,
                 const std::vector<std::vector<double>> &lses, double *out, double *lse) {
    for (int64_t r = 0; r < rows; ++r) {
        // lse = log sum_p exp(lse_p), computed around the largest term
        double m = neg_inf;
        for (int64_t p = 0; p < parts; ++p) m = std::max(m, lses[p][r]);
        double *o = out + r * dim_v;
        for (int64_t x = 0; x < dim_v; ++x) o[x] = 0.0;
        if (m == neg_inf) {
            if (lse) lse[r] = neg_inf;
            continue;
        }
        double sum = 0.0;
        for (int64_t p = 0; p < parts; ++p) sum += std::exp(lses[p][r] - m);
        const double total = m + std::log(sum);
        // out = sum_p exp(lse_p - lse) out_p
        for (int64_t p = 0; p < parts; ++p) {
            const double w = std::exp(lses[p][r] - total);
            for (int64_t x = 0; x < dim_v; ++x) o[x] += w * outs[p][r * dim_v + x];
        }
        if (lse) lse[r] = total;
    }
}

}  // namespace attn_compare
