// The backward of scaled dot-product attention, B = 1, fp32, lse from the forward:
//   sdpa_bwd/simd/<isa>/threads:{1,2}/H8_L<L>_D<D>[_causal]      the fused backward
//   sdpa_bwd/composed/<isa>/threads:{1,2}/H8_L2048_D<D>[_causal]  the composed one (GEMM, exp,
//       GEMM; ops/backward_switch.hpp), for the speed-up
// GFLOP/s counts 2.5x the forward's FLOPs (4 H L^2 D, half for causal): the five products
// S, dP, dV, dK, dQ of the backward against the forward's two. Compare with
// machine/fma_peak/<isa>/threads:1 and with sdpa/simd/<isa>/threads:1/<same shape>.
#include <cstdint>
#include <string>
#include <vector>

#include "bench_backward.hpp"
#include "bench_common.hpp"

namespace attn_bench {
namespace {

struct bwd_shape {
    int64_t heads, len, dim;
    bool causal;
    std::string name() const {
        return "H" + std::to_string(heads) + "_L" + std::to_string(len) + "_D" +
               std::to_string(dim) + (causal ? "_causal" : "");
    }
    double flops() const {
        return 2.5 * 4.0 * double(heads) * double(len) * double(len) * double(dim) *
               (causal ? 0.5 : 1.0);
    }
};

void sdpa_bwd(benchmark::State &state, bwd_shape s, attn_isa isa, int threads, bool composed) {
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    const size_t n = size_t(s.heads * s.len * s.dim);
    std::vector<float> q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3),
                       dout = random_floats(n, 4), out(n), lse(size_t(s.heads * s.len)), dq(n),
                       dk(n), dv(n);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, s.heads, s.len, s.len, s.dim);
    d.causal = s.causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    if (!time_backward_f32(state, ctx, d, q.data(), k.data(), v.data(), out.data(), dout.data(),
                           lse.data(), dq.data(), dk.data(), dv.data(), composed))
        return;
    set_flops(state, s.flops());
}

bool register_sdpa_backward() {
    std::vector<bwd_shape> shapes;
    for (int64_t len : {512, 2048})
        for (int64_t dim : {64, 128})
            for (bool causal : {false, true}) shapes.push_back({8, len, dim, causal});
    for (const bwd_shape &s : shapes)
        for (attn_isa isa : simd_isas())
            for (int threads : {1, 2}) {
                benchmark::RegisterBenchmark(
                    bench_name("sdpa_bwd", "simd", isa_name(isa), threads, s.name()).c_str(),
                    sdpa_bwd, s, isa, threads, false)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
                if (s.len == 2048 && threads == 1)
                    benchmark::RegisterBenchmark(
                        bench_name("sdpa_bwd", "composed", isa_name(isa), threads, s.name()).c_str(),
                        sdpa_bwd, s, isa, threads, true)
                        ->UseRealTime()
                        ->Unit(benchmark::kMillisecond);
            }
    return true;
}

const bool registered = register_sdpa_backward();

}  // namespace
}  // namespace attn_bench
