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

inline std::vector<float> random_tensor(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
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

// Attention in double over dense BHSD tensors q [B,Hq,Lq,Dqk], k [B,Hkv,Lkv,Dqk],
// v [B,Hkv,Lkv,Dv]; returns out [B,Hq,Lq,Dv]. Takes from d: the shapes, scale, causal,
// mask (with its strides), kv_len and dropout (through src/ref/dropout.hpp, the generator
// the API specifies); d's layouts, weights and lse are ignored. Fills *lse ([B,Hq,Lq],
// -inf for a fully masked row) when given.
inline std::vector<double> sdpa_double(const attn_sdpa_desc &d, const std::vector<double> &q,
                                       const std::vector<double> &k,
                                       const std::vector<double> &v,
                                       std::vector<double> *lse = nullptr) {
    const int64_t B = d.batch, Hq = d.heads_q, Hkv = d.heads_kv, Lq = d.len_q, Lk = d.len_kv;
    const int64_t Dk = d.dim_qk, Dv = d.dim_v, group = Hq / Hkv;
    std::vector<double> out(size_t(B * Hq * Lq * Dv), 0.0);
    if (lse) lse->assign(size_t(B * Hq * Lq), -INFINITY);
    std::vector<double> s(static_cast<size_t>(Lk));
    std::vector<bool> seen(static_cast<size_t>(Lk));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Lq; ++i) {
                const int64_t hk = h / group;
                double m = -INFINITY;
                for (int64_t j = 0; j < Lk; ++j) {
                    bool visible = true;
                    if (d.causal == ATTN_CAUSAL_TOP_LEFT) visible = j <= i;
                    if (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT) visible = j <= i + Lk - Lq;
                    if (d.kv_len && j >= d.kv_len[b]) visible = false;
                    double dot = 0.0;
                    for (int64_t c = 0; c < Dk; ++c)
                        dot += q[size_t(((b * Hq + h) * Lq + i) * Dk + c)] *
                               k[size_t(((b * Hkv + hk) * Lk + j) * Dk + c)];
                    s[j] = double(d.scale) * dot;
                    if (d.mask)
                        s[j] += d.mask[b * d.mask_strides.batch + h * d.mask_strides.head +
                                       i * d.mask_strides.seq + j];
                    seen[j] = visible && s[j] != -INFINITY;
                    if (seen[j]) m = std::max(m, s[j]);
                }
                if (m == -INFINITY) continue;  // fully masked: zeros, lse -inf
                double sum = 0.0;
                for (int64_t j = 0; j < Lk; ++j) sum += seen[j] ? std::exp(s[j] - m) : 0.0;
                const uint32_t key = attn::dropout::row_key(d.dropout_seed, b, h, i);
                const uint32_t thresh = attn::dropout::threshold(d.dropout_p);
                for (int64_t j = 0; j < Lk; ++j) {
                    if (!seen[j]) continue;
                    double w = std::exp(s[j] - m) / sum;
                    if (d.dropout_p > 0.0f)
                        w = attn::dropout::dropped(key, j, thresh) ? 0.0 : w / (1.0 - d.dropout_p);
                    for (int64_t c = 0; c < Dv; ++c)
                        out[size_t(((b * Hq + h) * Lq + i) * Dv + c)] +=
                            w * v[size_t(((b * Hkv + hk) * Lk + j) * Dv + c)];
                }
                if (lse) (*lse)[size_t((b * Hq + h) * Lq + i)] = m + std::log(sum);
            }
    return out;
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

}  // namespace attn_test
