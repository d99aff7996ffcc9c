// Shared test helpers: contexts for every implementation and ISA this machine can run,
// deterministic random tensors, and tolerance comparisons.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attn/attn.h"

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

// The reference first, then every SIMD ISA this CPU supports (so a bug in the AVX2 path
// cannot hide on an AVX-512 machine).
inline std::vector<path> all_paths() {
    std::vector<path> out{{ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, "reference"}};
    const std::pair<attn_isa, const char *> isas[] = {
        {ATTN_ISA_SSE4, "simd_sse4"}, {ATTN_ISA_AVX2, "simd_avx2"}, {ATTN_ISA_AVX512, "simd_avx512"}};
    for (auto [isa, name] : isas) {
        if (make_context(ATTN_IMPL_SIMD, isa)) out.push_back({ATTN_IMPL_SIMD, isa, name});
    }
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

}  // namespace attn_test
