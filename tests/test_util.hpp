// Shared test helpers: contexts for every implementation and ISA this machine can run,
// deterministic random tensors, and tolerance comparisons.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attn/attn.h"
#include "ref/dropout.hpp"

namespace attn_test {

struct context_deleter {
    void operator()(attn_context *c) const { attn_context_destroy(c); }
};
using context_ptr = std::unique_ptr<attn_context, context_deleter>;

inline context_ptr make_context(attn_impl impl, attn_isa isa = ATTN_ISA_AUTO, int threads = 0) {
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = impl;
    cfg.max_isa = isa;
    cfg.num_threads = threads;
    attn_context *c = nullptr;
    if (attn_context_create(&cfg, &c) != ATTN_OK) return context_ptr();
    return context_ptr(c);
}

// The hardware threads a context may use: the library caps a context's threads at this count
// (a context asking for all threads reports it).
inline int hardware_threads() {
    const context_ptr all = make_context(ATTN_IMPL_SIMD, ATTN_ISA_AUTO, 0);
    return all ? attn_context_num_threads(all.get()) : 1;
}

// A test that compares results for different thread counts compares something only when the
// machine runs at least 2 threads: with fewer, every count is capped to the same one and the
// comparison would pass whatever the code does. Skips the test, by name, with the reason.
#define ATTN_SKIP_UNLESS_THREADS(n)                                                            \
    do {                                                                                       \
        const int attn_hw_ = attn_test::hardware_threads();                                    \
        if (attn_hw_ < (n))                                                                    \
            GTEST_SKIP() << "needs " << (n) << " hardware threads to compare thread counts; "  \
                         << "this machine runs " << attn_hw_                                   \
                         << " (a context's threads are capped at the hardware's)";             \
    } while (0)

// One configuration a test runs under: the reference, or the SIMD path capped at one ISA.
struct path {
    attn_impl impl;
    attn_isa isa;
    std::string name;  // "reference", "simd_sse4", "simd_avx2", "simd_avx512"
};

// GoogleTest prints a parameter with this instead of its bytes.
inline void PrintTo(const path &p, std::ostream *os) { *os << p.name; }

// Every SIMD level the library has, in order, with its test name.
inline const std::vector<std::pair<attn_isa, const char *>> &simd_levels() {
    static const std::vector<std::pair<attn_isa, const char *>> levels = {
        {ATTN_ISA_SSE4, "simd_sse4"},
        {ATTN_ISA_AVX2, "simd_avx2"},
        {ATTN_ISA_AVX512, "simd_avx512"},
        {ATTN_ISA_AVX512_BF16, "simd_avx512_bf16"},
        {ATTN_ISA_AMX, "simd_amx"},
        {ATTN_ISA_AMX_EMULATED, "simd_amx_emulated"}};
    return levels;
}

// The reference first, then every SIMD ISA this CPU supports (so a bug in the AVX2 path
// cannot hide on an AVX-512 machine). The levels this CPU lacks are named once on stderr,
// and tests/test_isa_levels.cpp reports each as a skipped test.
inline std::vector<path> all_paths() {
    std::vector<path> out{{ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, "reference"}};
    static bool told = false;
    for (auto [isa, name] : simd_levels()) {
        if (make_context(ATTN_IMPL_SIMD, isa))
            out.push_back({ATTN_IMPL_SIMD, isa, name});
        else if (!told)
            std::fprintf(stderr, "attn tests: %s skipped: this CPU (or its OS) lacks the level\n",
                         name);
    }
    told = true;
    return out;
}

// Only the SIMD ISAs this CPU supports.
inline std::vector<path> simd_paths() {
    std::vector<path> out;
    for (auto &p : all_paths())
        if (p.impl == ATTN_IMPL_SIMD) out.push_back(p);
    return out;
}

inline std::string path_name(const testing::TestParamInfo<path> &info) { return info.param.name; }

// The value std::uniform_real_distribution<float>(lo, hi) draws from gen in libstdc++, bit for
// bit (one 32-bit draw times 2^-32, kept below 1, then lo + (hi - lo) u), without its per-draw
// long double logarithm of the generator's range: a sanitized test build (-O1) does not fold
// it away, and it took a third of the decode sweep's time there.
inline float uniform_float(std::mt19937 &gen, float lo, float hi) {
    float u = float(gen()) * 0x1p-32f;
    if (u >= 1.0f) u = std::nextafter(1.0f, 0.0f);
    return u * (hi - lo) + lo;
}

inline std::vector<float> random_tensor(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::vector<float> v(n);
    for (auto &x : v) x = uniform_float(gen, lo, hi);
    return v;
}

// n values drawn from N(0, sigma^2), seeded.
inline std::vector<float> normal_tensor(size_t n, uint32_t seed, float sigma) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(n);
    for (auto &x : v) x = dist(gen);
    return v;
}

// A dense BHSD descriptor with separate head counts and value width (defaults otherwise as
// attn_sdpa_desc_init).
inline attn_sdpa_desc make_desc(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t len_q,
                                int64_t len_kv, int64_t dim_qk, int64_t dim_v) {
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, batch, heads_q, len_q, len_kv, dim_qk);
    d.heads_kv = heads_kv;
    d.dim_v = dim_v;
    d.k = {heads_kv * len_kv * dim_qk, len_kv * dim_qk, dim_qk};
    d.v = {heads_kv * len_kv * dim_v, len_kv * dim_v, dim_v};
    d.out = {heads_q * len_q * dim_v, len_q * dim_v, dim_v};
    return d;
}

// The same bits in the same number of elements (NaN payloads included); empty equals empty.
inline bool bitwise_equal(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// max |got - want| / (1 + |want|) over the n elements; NaN if the NaN patterns differ.
inline double max_rel_error(const float *got, const float *want, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; ++i) {
        if (std::isnan(got[i]) != std::isnan(want[i])) return NAN;
        if (std::isnan(want[i])) continue;
        if (std::isinf(want[i]) || std::isinf(got[i])) {
            if (got[i] != want[i]) return INFINITY;
            continue;
        }
        double e = std::fabs(double(got[i]) - double(want[i])) / (1.0 + std::fabs(double(want[i])));
        if (e > worst) worst = e;
    }
    return worst;
}

// ---------------------------------------------------------------------------------------
// Value-test helpers: a fixture holding a context for the path under test, and a
// double-precision attention forward written independently of the library (the oracle's
// oracle), used by the sdpa, backward and merge tests.

// Parameterised fixture: ctx() is a context for GetParam() (all hardware threads).
class path_test : public testing::TestWithParam<path> {
  protected:
    void SetUp() override {
        ctx_ = make_context(GetParam().impl, GetParam().isa);
        ASSERT_TRUE(ctx_) << "cannot create a context for " << GetParam().name;
    }
    attn_context *ctx() const { return ctx_.get(); }

  private:
    context_ptr ctx_;
};

inline std::vector<double> to_double(const std::vector<float> &x) {
    return std::vector<double>(x.begin(), x.end());
}

// Attention over dense BHSD tensors q [B,Hq,Lq,Dqk], k [B,Hkv,Lkv,Dqk], v [B,Hkv,Lkv,Dv] in the
// number type T, by the textbook formula (scores, softmax as e^(s - max) / sum, P V, one
// rounding per operation in T); returns out [B,Hq,Lq,Dv]. Takes from d: the shapes, scale,
// causal, mask (with its strides), kv_len and dropout (through src/ref/dropout.hpp, the
// generator the API specifies); d's layouts, weights and lse are ignored. Fills *lse
// ([B,Hq,Lq], -inf for a fully masked row) when given, and *weights ([B,Hq,Lq,Lkv], the
// weights before dropout, 0 where a key is not seen) when given. T = double is the oracle
// (sdpa_double); T = float is the plain float32 computation, the yardstick (sdpa_float).
template <class T>
std::vector<T> sdpa_in(const attn_sdpa_desc &d, const std::vector<T> &q, const std::vector<T> &k,
                       const std::vector<T> &v, std::vector<T> *lse = nullptr,
                       std::vector<T> *weights = nullptr) {
    const int64_t B = d.batch, Hq = d.heads_q, Hkv = d.heads_kv, Lq = d.len_q, Lk = d.len_kv;
    const int64_t Dk = d.dim_qk, Dv = d.dim_v, group = Hq / Hkv;
    std::vector<T> out(size_t(B * Hq * Lq * Dv), T(0));
    if (lse) lse->assign(size_t(B * Hq * Lq), T(-INFINITY));
    if (weights) weights->assign(size_t(B * Hq * Lq * Lk), T(0));
    std::vector<T> s(static_cast<size_t>(Lk));
    std::vector<bool> seen(static_cast<size_t>(Lk));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Lq; ++i) {
                const int64_t hk = h / group;
                T m = T(-INFINITY);
                for (int64_t j = 0; j < Lk; ++j) {
                    bool visible = true;
                    if (d.causal == ATTN_CAUSAL_TOP_LEFT) visible = j <= i;
                    if (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT) visible = j <= i + Lk - Lq;
                    if (d.kv_len && j >= d.kv_len[b]) visible = false;
                    T dot = T(0);
                    for (int64_t c = 0; c < Dk; ++c)
                        dot += q[size_t(((b * Hq + h) * Lq + i) * Dk + c)] *
                               k[size_t(((b * Hkv + hk) * Lk + j) * Dk + c)];
                    s[size_t(j)] = T(d.scale) * dot;
                    if (d.mask)
                        s[size_t(j)] += T(d.mask[b * d.mask_strides.batch + h * d.mask_strides.head +
                                                 i * d.mask_strides.seq + j]);
                    seen[size_t(j)] = visible && s[size_t(j)] != T(-INFINITY);
                    if (seen[size_t(j)]) m = std::max(m, s[size_t(j)]);
                }
                if (m == T(-INFINITY)) continue;  // fully masked: zeros, lse -inf
                T sum = T(0);
                for (int64_t j = 0; j < Lk; ++j)
                    sum += seen[size_t(j)] ? T(std::exp(s[size_t(j)] - m)) : T(0);
                const uint32_t key = attn::dropout::row_key(d.dropout_seed, b, h, i);
                const uint32_t thresh = attn::dropout::threshold(d.dropout_p);
                for (int64_t j = 0; j < Lk; ++j) {
                    if (!seen[size_t(j)]) continue;
                    T w = T(std::exp(s[size_t(j)] - m)) / sum;
                    if (weights) (*weights)[size_t(((b * Hq + h) * Lq + i) * Lk + j)] = w;
                    if (d.dropout_p > 0.0f)
                        w = attn::dropout::dropped(key, j, thresh) ? T(0)
                                                                   : w / (T(1) - T(d.dropout_p));
                    for (int64_t c = 0; c < Dv; ++c)
                        out[size_t(((b * Hq + h) * Lq + i) * Dv + c)] +=
                            w * v[size_t(((b * Hkv + hk) * Lk + j) * Dv + c)];
                }
                if (lse) (*lse)[size_t((b * Hq + h) * Lq + i)] = m + T(std::log(sum));
            }
    return out;
}

inline std::vector<double> sdpa_double(const attn_sdpa_desc &d, const std::vector<double> &q,
                                       const std::vector<double> &k,
                                       const std::vector<double> &v,
                                       std::vector<double> *lse = nullptr,
                                       std::vector<double> *weights = nullptr) {
    return sdpa_in<double>(d, q, k, v, lse, weights);
}

inline std::vector<float> sdpa_float(const attn_sdpa_desc &d, const std::vector<float> &q,
                                     const std::vector<float> &k, const std::vector<float> &v,
                                     std::vector<float> *lse = nullptr,
                                     std::vector<float> *weights = nullptr) {
    return sdpa_in<float>(d, q, k, v, lse, weights);
}

inline std::vector<float> to_float(const std::vector<double> &x) {
    return std::vector<float>(x.begin(), x.end());
}

// max |got - want| / (1 + |want|) of a float result against a double oracle.
inline double max_rel_error(const std::vector<float> &got, const std::vector<double> &want) {
    if (got.size() != want.size()) return INFINITY;
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::isinf(want[i]) || std::isinf(got[i])) {
            if (double(got[i]) != want[i]) return INFINITY;
            continue;
        }
        const double e = std::fabs(double(got[i]) - want[i]) / (1.0 + std::fabs(want[i]));
        if (std::isnan(e)) return NAN;
        if (e > worst) worst = e;
    }
    return worst;
}

// ---------------------------------------------------------------------------------------
// The yardstick rule of every accuracy test, applied to every path, the reference included.
// A result `got` is judged against `exact`, float64 computed in the test (the oracle), never
// against another path of the library. Its error e(x) = max |x - exact| / (1 + |exact|) may
// be at most twice that of `plain`, the same computation in plain float32 written in the test
// (the textbook order, one rounding per operation: what f32 arithmetic of this problem errs
// by), plus `floor`: a few float32 units in the last place at 1 (2^-23 = 1.2e-7 each) for an
// equally valid summation order or a few-ulp exp where the plain computation happens to be
// nearly exact. A wrong reference cannot widen the bound: the plain computation does not
// call the library.
inline testing::AssertionResult within_yardstick(const float *got, size_t n,
                                                 const std::vector<float> &plain,
                                                 const std::vector<double> &exact, double floor) {
    if (plain.size() != n || exact.size() != n)
        return testing::AssertionFailure() << "sizes differ: got " << n << ", plain "
                                           << plain.size() << ", exact " << exact.size();
    const std::vector<float> g(got, got + n);
    const double e_got = max_rel_error(g, exact), e_plain = max_rel_error(plain, exact);
    if (e_got <= 2.0 * e_plain + floor)
        return testing::AssertionSuccess() << "error " << e_got << ", plain f32 " << e_plain;
    return testing::AssertionFailure() << "error " << e_got << " against float64 exceeds 2 x "
                                       << e_plain << " (the plain f32 computation's) + " << floor;
}

inline testing::AssertionResult within_yardstick(const std::vector<float> &got,
                                                 const std::vector<float> &plain,
                                                 const std::vector<double> &exact, double floor) {
    return within_yardstick(got.data(), got.size(), plain, exact, floor);
}

// dq, dk, dv and dsinks (n_sinks elements; none without sinks) of one attn_sdpa_backward_f32
// call over d, every element starting as NaN so that one left unwritten shows; lse null: the
// call recomputes the statistics.
inline std::vector<std::vector<float>> sdpa_backward_f32_grads(
    attn_context *ctx, const attn_sdpa_desc &d, const std::vector<float> &q, const std::vector<float> &k,
    const std::vector<float> &v, const std::vector<float> &out, const std::vector<float> &dout,
    const float *lse, size_t n_sinks) {
    std::vector<float> dq(q.size(), NAN), dk(k.size(), NAN), dv(v.size(), NAN), dsinks(n_sinks, NAN);
    attn_sdpa_desc b = d;
    if (n_sinks) b.dsinks = dsinks.data();
    EXPECT_EQ(attn_sdpa_backward_f32(ctx, &b, q.data(), k.data(), v.data(), out.data(), dout.data(), lse,
                                     dq.data(), dk.data(), dv.data()),
              ATTN_OK)
        << attn_last_error();
    return {dq, dk, dv, dsinks};
}

}  // namespace attn_test
