// A packed training batch against one dense call of its longest sequence, fp32, causal, H8 D64,
// rows [tokens, heads, dim] (BSHD) for both:
//   packed_training/<simd|composed>/<isa>/threads:{1,2}/packed8_H8_D64_<phase>
//       8 sequences of 64, 128, 256, 512, 768, 1024, 1536 and 2048 tokens in one call
//       (q_start = kv_start)
//   packed_training/<simd|composed>/<isa>/threads:{1,2}/dense_L2048_H8_D64_<phase>
//       one sequence of 2048 tokens
// phase: fwd (attn_sdpa_f32 with lse), bwd (attn_sdpa_backward_f32 from that lse), fwd_bwd
// (both, the training step). simd / composed: the backward's implementation, the fused one or
// the composed one (ops/backward_switch.hpp); the forward is the same. GFLOP/s counts the visible (query, key)
// pairs only, 4 D flops each for the forward (S and P V) and 2.5 times that for the backward
// (S, dP, dV, dK, dQ), so the packed and dense figures compare directly: the target is
// packed / dense >= 0.9 on fwd_bwd, measured in one run (the ISA is the widest f32 one).
#include <cstdint>
#include <string>
#include <vector>

#include "bench_backward.hpp"
#include "bench_common.hpp"

namespace attn_bench {
namespace {

constexpr int64_t heads = 8, dim = 64;

enum class phase { fwd, bwd, fwd_bwd };

const char *phase_name(phase p) {
    return p == phase::fwd ? "fwd" : p == phase::bwd ? "bwd" : "fwd_bwd";
}

struct batch_shape {
    std::string name;
    std::vector<int32_t> lengths;
};

void packed_training(benchmark::State &state, batch_shape s, attn_isa isa, int threads,
                     phase ph, bool composed) {
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    std::vector<int32_t> starts{0};
    int32_t longest = 0;
    double pairs = 0.0;  // causal: query i of a sequence sees keys 0..i
    for (int32_t n : s.lengths) {
        starts.push_back(starts.back() + n);
        longest = n > longest ? n : longest;
        pairs += 0.5 * double(n) * double(n + 1);
    }
    const int64_t tokens = starts.back();
    const size_t n = size_t(tokens * heads * dim);
    std::vector<float> q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3),
                       dout = random_floats(n, 4), out(n), lse(size_t(tokens * heads)), dq(n),
                       dk(n), dv(n);
    attn_sdpa_desc d;
    const bool packed = s.lengths.size() > 1;
    attn_sdpa_desc_init(&d, packed ? int64_t(s.lengths.size()) : 1, heads, longest, longest, dim);
    d.q = d.k = d.v = d.out = attn_layout{tokens * heads * dim, dim, heads * dim};
    if (packed) d.q_start = d.kv_start = starts.data();
    d.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_sdpa_desc fwd = d;
    fwd.lse = lse.data();
    if (!check(state, attn_sdpa_f32(ctx, &fwd, q.data(), k.data(), v.data(), out.data())))
        return;
    attn::ops::set_backward_composed(composed);
    for (auto _ : state) {
        if (ph != phase::bwd &&
            !check(state, attn_sdpa_f32(ctx, &fwd, q.data(), k.data(), v.data(), out.data())))
            break;
        if (ph != phase::fwd &&
            !check(state, attn_sdpa_backward_f32(ctx, &d, q.data(), k.data(), v.data(),
                                                 out.data(), dout.data(), lse.data(), dq.data(),
                                                 dk.data(), dv.data())))
            break;
        benchmark::ClobberMemory();
    }
    attn::ops::set_backward_composed(false);
    const double forward_flops = 4.0 * double(heads) * double(dim) * pairs;
    set_flops(state, (ph != phase::bwd ? forward_flops : 0.0) +
                         (ph != phase::fwd ? 2.5 * forward_flops : 0.0));
}

bool register_packed_training() {
    const std::vector<attn_isa> isas = simd_isas();
    if (isas.empty()) return false;
    const attn_isa isa = isas.back();
    const batch_shape shapes[] = {
        {"packed8_H8_D64", {64, 128, 256, 512, 768, 1024, 1536, 2048}},
        {"dense_L2048_H8_D64", {2048}},
    };
    for (int threads : {1, 2})
        for (phase ph : {phase::fwd, phase::bwd, phase::fwd_bwd})
            for (bool composed : {false, true}) {
                // the composed backward: the training step at 1 thread, for its speed-up only
                if (composed && (ph != phase::fwd_bwd || threads != 1)) continue;
                for (const batch_shape &s : shapes)
                    benchmark::RegisterBenchmark(
                        bench_name("packed_training", composed ? "composed" : "simd",
                                   isa_name(isa), threads, s.name + "_" + phase_name(ph))
                            .c_str(),
                        packed_training, s, isa, threads, ph, composed)
                        ->UseRealTime()
                        ->Unit(benchmark::kMillisecond);
            }
    return true;
}

const bool registered = register_packed_training();

}  // namespace
}  // namespace attn_bench
