// What the backward benchmarks share (bench_sdpa_backward.cpp, bench_backward_features.cpp):
// timing the f32 backward, fused or composed.
#pragma once

#include <benchmark/benchmark.h>

#include "attn/attn.h"
#include "bench_common.hpp"
#include "ops/backward_switch.hpp"

namespace attn_bench {

// The f32 backward of problem d (d.lse null), timed: lse and out come from one forward first;
// `composed` picks the composed backward over the fused one. Returns false (the benchmark
// skipped with the error) when a call fails.
inline bool time_backward_f32(benchmark::State &state, attn_context *ctx, attn_sdpa_desc d,
                              const float *q, const float *k, const float *v, float *out,
                              const float *dout, float *lse, float *dq, float *dk, float *dv,
                              bool composed) {
    attn_sdpa_desc fwd = d;  // the forward writes lse and knows nothing of dsinks
    fwd.lse = lse;
    fwd.dsinks = nullptr;
    if (!check(state, attn_sdpa_f32(ctx, &fwd, q, k, v, out))) return false;
    attn::ops::set_backward_composed(composed);
    bool ok = true;
    for (auto _ : state) {
        if (!check(state, attn_sdpa_backward_f32(ctx, &d, q, k, v, out, dout, lse, dq, dk, dv))) {
            ok = false;
            break;
        }
        benchmark::ClobberMemory();
    }
    attn::ops::set_backward_composed(false);
    return ok;
}

}  // namespace attn_bench
