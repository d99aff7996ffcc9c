// The score features in the fused backward, each beside the plain case in one run (ratios
// survive a noisy machine), f32, lse from the forward, on the best f32 level:
//   features_bwd/simd/<isa>/threads:<n>/{plain,softcap,alibi,sinks}_H8_L2048_D128: the cost of
//     each score term (softcap 30, ALiBi with geometric slopes, sinks with dsinks) over the
//     plain backward (no causal); the same flop count, so equal rates mean equal times.
//   features_bwd/.../window_H8_L8192_D128_left256 vs .../causal_H8_L8192_D128: a sliding
//     window of 256 keys with causal against full causal; GFLOP/s counted on visible
//     (query, key) pairs, 10 D flops each (the five products S, dP, dV, dK, dQ), so equal
//     rates mean the window's skipped work costs nothing.
//   Composed (ops/backward_switch.hpp) rows of the four L2048 cases, threads:1, for how far the
//     fused kernel moved them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_backward.hpp"
#include "bench_common.hpp"

namespace attn_bench {
namespace {

enum class variant { plain, softcap, alibi, sinks, causal, window };

// Visible (query, key) pairs of one head: causal, with a left window when window_left >= 0.
double visible_pairs(int64_t len, int64_t window_left) {
    double pairs = 0.0;
    for (int64_t i = 0; i < len; ++i)
        pairs += double(window_left < 0 ? i + 1 : std::min<int64_t>(i + 1, window_left + 1));
    return pairs;
}

void backward(benchmark::State &state, variant which, int64_t heads, int64_t len, int64_t dim,
              attn_isa isa, int threads, bool composed) {
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    const size_t n = size_t(heads * len * dim);
    const std::vector<float> q = random_floats(n, 1), k = random_floats(n, 2),
                             v = random_floats(n, 3), dout = random_floats(n, 4);
    std::vector<float> out(n), lse(size_t(heads * len)), dq(n), dk(n), dv(n);
    const size_t n_heads = static_cast<size_t>(heads);
    std::vector<float> slopes(n_heads), sinks(n_heads, 1.0f), dsinks(n_heads);
    for (int64_t h = 0; h < heads; ++h) slopes[size_t(h)] = std::exp2(-8.0f * float(h + 1) / float(heads));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, heads, len, len, dim);
    double pairs = double(len) * double(len);
    switch (which) {
    case variant::softcap: d.softcap = 30.0f; break;
    case variant::alibi: d.alibi_slopes = slopes.data(); break;
    case variant::sinks: d.sinks = sinks.data(); break;
    case variant::causal: d.causal = ATTN_CAUSAL_TOP_LEFT, pairs = visible_pairs(len, -1); break;
    case variant::window:
        d.causal = ATTN_CAUSAL_TOP_LEFT, d.window_left = 256, pairs = visible_pairs(len, 256);
        break;
    default: break;
    }
    if (d.sinks) d.dsinks = dsinks.data();
    if (!time_backward_f32(state, ctx, d, q.data(), k.data(), v.data(), out.data(), dout.data(),
                           lse.data(), dq.data(), dk.data(), dv.data(), composed))
        return;
    set_flops(state, 10.0 * double(dim) * pairs * double(heads));
}

bool register_backward_features() {
    const std::vector<attn_isa> isas = simd_isas();
    if (isas.empty()) return false;
    const attn_isa isa = isas.back();
    const int threads = 1;
    const std::pair<variant, const char *> terms[] = {{variant::plain, "plain_H8_L2048_D128"},
                                                     {variant::softcap, "softcap_H8_L2048_D128"},
                                                     {variant::alibi, "alibi_H8_L2048_D128"},
                                                     {variant::sinks, "sinks_H8_L2048_D128"}};
    for (bool composed : {false, true})
        for (auto [which, name] : terms)
            benchmark::RegisterBenchmark(
                bench_name("features_bwd", composed ? "composed" : "simd", isa_name(isa), threads,
                           name).c_str(),
                backward, which, int64_t(8), int64_t(2048), int64_t(128), isa, threads, composed)
                ->UseRealTime()->Unit(benchmark::kMillisecond);
    const std::pair<variant, const char *> long_ones[] = {{variant::causal, "causal_H8_L8192_D128"},
                                                         {variant::window, "window_H8_L8192_D128_left256"}};
    for (auto [which, name] : long_ones)
        benchmark::RegisterBenchmark(
            bench_name("features_bwd", "simd", isa_name(isa), threads, name).c_str(), backward,
            which, int64_t(8), int64_t(8192), int64_t(128), isa, threads, false)
            ->UseRealTime()->Unit(benchmark::kMillisecond);
    return true;
}

const bool registered = register_backward_features();

}  // namespace
}  // namespace attn_bench
