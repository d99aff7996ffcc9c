// The backward in 16 bits beside f32 and beside the 16-bit forward, in one run, on each 16-bit
// level (avx512_bf16, amx), lse from the forward:
//   sdpa_bwd_typed/simd/<isa>/threads:1/H8_L2048_D<D>_{bf16,f32}   attn_sdpa_backward with
//       q, k, v, out of that type (f32: attn_sdpa_backward_f32's work, the f32 fused
//       backward); bf16 on amx takes the fused backward with its products on AMX tiles, on
//       avx512_bf16 the f32 fused backward on widened copies
//   sdpa_bwd_typed/simd/<isa>/threads:1/H8_L2048_D<D>_bf16_causal   the same, causal (top-left)
//   sdpa_bwd_typed/simd/<isa>/threads:2/H8_L2048_D<D>_bf16          the same on 2 threads
//   sdpa_fwd_typed/simd/<isa>/threads:1/H8_L2048_D<D>_bf16          attn_sdpa, for the ratio
// GFLOP/s counts 10 D flops per (query, key) pair for the backward (S, dP, dV, dK, dQ) and 4 D
// for the forward (S, P V), of the full square also when causal (about half is computed).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace attn_bench {
namespace {


void typed(benchmark::State &state, bool backward, attn_dtype type, int64_t dim, attn_isa isa,
           bool causal, int threads) {
    const int64_t heads = 8, len = 2048;
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    const size_t n = size_t(heads * len * dim);
    const std::vector<float> qf = random_floats(n, 1), kf = random_floats(n, 2),
                             vf = random_floats(n, 3), gf = random_floats(n, 4);
    const size_t bytes = n * attn_dtype_size(type);
    std::vector<uint8_t> q(bytes), k(bytes), v(bytes), g(bytes), out(bytes), dq(bytes), dk(bytes),
        dv(bytes);
    auto fill = [&](std::vector<uint8_t> &dst, const std::vector<float> &src) {
        if (type == ATTN_DTYPE_F32) std::memcpy(dst.data(), src.data(), bytes);
        else std::memcpy(dst.data(), to_bf16(src).data(), bytes);
    };
    fill(q, qf), fill(k, kf), fill(v, vf), fill(g, gf);
    std::vector<float> lse(size_t(heads * len));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, heads, len, len, dim);
    d.q_type = d.kv_type = d.out_type = type;
    if (causal) d.causal = ATTN_CAUSAL_TOP_LEFT;
    d.lse = lse.data();
    if (!check(state, attn_sdpa(ctx, &d, q.data(), k.data(), v.data(), out.data()))) return;
    if (backward) d.lse = nullptr;
    for (auto _ : state) {
        const attn_status s =
            backward ? attn_sdpa_backward(ctx, &d, q.data(), k.data(), v.data(), out.data(),
                                          g.data(), lse.data(), dq.data(), dk.data(), dv.data())
                     : attn_sdpa(ctx, &d, q.data(), k.data(), v.data(), out.data());
        if (!check(state, s)) break;
        benchmark::ClobberMemory();
    }
    set_flops(state,
              (backward ? 10.0 : 4.0) * double(dim) * double(len) * double(len) * double(heads));
}

bool register_backward_typed() {
    for (attn_isa isa : bf16_isas())
        for (int64_t dim : {64, 128}) {
            const std::string shape = "H8_L2048_D" + std::to_string(dim);
            for (attn_dtype type : {ATTN_DTYPE_BF16, ATTN_DTYPE_F32})
                benchmark::RegisterBenchmark(
                    bench_name("sdpa_bwd_typed", "simd", isa_name(isa), 1,
                               shape + (type == ATTN_DTYPE_F32 ? "_f32" : "_bf16")).c_str(),
                    typed, true, type, dim, isa, false, 1)
                    ->UseRealTime()->Unit(benchmark::kMillisecond);
            benchmark::RegisterBenchmark(
                bench_name("sdpa_bwd_typed", "simd", isa_name(isa), 1, shape + "_bf16_causal")
                    .c_str(),
                typed, true, ATTN_DTYPE_BF16, dim, isa, true, 1)
                ->UseRealTime()->Unit(benchmark::kMillisecond);
            benchmark::RegisterBenchmark(
                bench_name("sdpa_bwd_typed", "simd", isa_name(isa), 2, shape + "_bf16").c_str(),
                typed, true, ATTN_DTYPE_BF16, dim, isa, false, 2)
                ->UseRealTime()->Unit(benchmark::kMillisecond);
            benchmark::RegisterBenchmark(
                bench_name("sdpa_fwd_typed", "simd", isa_name(isa), 1, shape + "_bf16").c_str(),
                typed, false, ATTN_DTYPE_BF16, dim, isa, false, 1)
                ->UseRealTime()->Unit(benchmark::kMillisecond);
        }
    return true;
}

const bool registered = register_backward_typed();

}  // namespace
}  // namespace attn_bench
