// Decoding with many query heads over one KV head, 1 thread (and 2 for latent attention as
// planned), B = 1, Lq = 1, bf16 q and cache (unless named _f32), f32 out:
//   latent/<impl>/<isa>/threads:{1,2}/H<H>_KV1_Lk4096_D576_V512_bf16
//       latent attention (MLA, absorbed): H in {16, 128} query heads over one latent head,
//       dim_qk 576, dim_v 512, V the first 512 elements of each cached row (v inside k);
//       2 threads for impl "simd" only: the keys split into chunks the threads share;
//   latent/<impl>/<isa>/threads:1/H<H>_KV<n>_Lk4096_D128_V128_bf16
//       grouped-query decoding with groups of 8, 16 and 32 heads (where heads become tile rows);
//   latent/<impl>/<isa>/threads:1/H16_KV1_..._f32, H32_KV1_..._f32: the same over f32 q and
//       cache (f32 products, the f32 tiles);
// impl "simd" is the library as it plans such a step (a group of 16 heads or more as the rows
// of the tile entries, sdpa_plan.hpp), "decode_entry" the same call with that switched off
// (ops/sdpa_switch.hpp: the decode entry, a few heads a tile) and "tile_rows" with every
// group's heads as tile rows (where the threshold lies), for the ratios in one run.
// GFLOP/s counts 2 H Lk (dim_qk + dim_v); GFLOP/s_cpu the same per CPU second of each thread,
// and of_vdpbf16ps_peak that divided by the VDPBF16PS peak measured per CPU second in the same
// benchmark right after its timing (machine/bf16_peak's loop), so both see the same load.
// On the amx level, of_amx_peak is the fraction of the TDPBF16PS peak measured the same way.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "arch/machine.hpp"
#include "bench_common.hpp"
#include "ops/sdpa_plan.hpp"
#include "ops/sdpa_switch.hpp"

namespace attn_bench {
namespace {

struct latent_shape {
    int64_t heads, heads_kv, len_kv, dim_qk, dim_v;
    bool v_inside_k, bf16 = true;  // bf16 q and cache, else f32 (strict: f32 products)
    std::string name() const {
        return "H" + std::to_string(heads) + "_KV" + std::to_string(heads_kv) + "_Lk" +
               std::to_string(len_kv) + "_D" + std::to_string(dim_qk) + "_V" +
               std::to_string(dim_v) + (bf16 ? "_bf16" : "_f32");
    }
};

// x as stored: bf16 bit patterns or f32 bytes.
std::vector<uint16_t> stored(const std::vector<float> &x, bool bf16) {
    if (bf16) return to_bf16(x);
    std::vector<uint16_t> out(2 * x.size());
    std::memcpy(out.data(), x.data(), 4 * x.size());
    return out;
}

// GFLOP per CPU second of the matrix unit's chains (VDPBF16PS, or AMX tiles), the best of
// three short runs.
double peak_per_cpu_second(const machine_kernels *k, bool amx) {
    const int64_t reps = amx ? 1 << 14 : 1 << 18;
    float (*chains)(int64_t) = amx ? k->amx_chains : k->bf16_chains;
    const double flops = double(reps) * (amx ? k->amx_flops_per_rep : k->bf16_flops_per_rep);
    double best = 0.0;
    for (int run = 0; run < 3; ++run) {
        const double start = process_cpu_seconds();
        benchmark::DoNotOptimize(chains(reps));
        const double seconds = process_cpu_seconds() - start;
        if (seconds > 0.0) best = std::max(best, flops / seconds / 1e9);
    }
    return best;
}

void latent_decode(benchmark::State &state, latent_shape s, attn_isa isa, int64_t rows_from,
                   int threads) {
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    const std::vector<uint16_t> q = stored(random_floats(size_t(s.heads * s.dim_qk), 1), s.bf16);
    const int64_t k_n = s.heads_kv * s.len_kv * s.dim_qk, v_n = s.heads_kv * s.len_kv * s.dim_v;
    const std::vector<uint16_t> k = stored(random_floats(size_t(k_n), 2), s.bf16);
    const std::vector<uint16_t> v = stored(random_floats(size_t(s.v_inside_k ? 1 : v_n), 3), s.bf16);
    std::vector<float> out(size_t(s.heads * s.dim_v));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, s.heads, 1, s.len_kv, s.dim_qk);
    d.heads_kv = s.heads_kv;
    d.dim_v = s.dim_v;
    d.q_type = d.kv_type = s.bf16 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
    d.k = {k_n, s.len_kv * s.dim_qk, s.dim_qk};
    d.v = s.v_inside_k ? d.k : attn_layout{v_n, s.len_kv * s.dim_v, s.dim_v};
    d.out = {s.heads * s.dim_v, s.dim_v, s.dim_v};
    const void *v_at = s.v_inside_k ? static_cast<const void *>(k.data()) : v.data();
    attn::ops::set_heads_as_rows_from(rows_from);
    const double cpu_seconds = time_calls(state, [&] {
        return attn_sdpa(ctx, &d, q.data(), k.data(), v_at, out.data());
    });
    attn::ops::set_heads_as_rows_from(attn::ops::heads_as_rows_min_group);
    const double flops = 2.0 * double(s.heads * s.len_kv * (s.dim_qk + s.dim_v));
    set_flops(state, flops);
    set_flops_per_cpu_second(state, flops * double(state.iterations()), cpu_seconds, threads);
    const double rate = flops * double(state.iterations()) / cpu_seconds / 1e9;
    const machine_kernels *mk = machine_kernels_for(isa);
    if (mk && mk->bf16_chains && cpu_seconds > 0.0) {
        const double peak = peak_per_cpu_second(mk, false);
        state.counters["vdpbf16ps_peak_GFLOP/s_cpu"] = peak;
        state.counters["of_vdpbf16ps_peak"] = rate / peak;
    }
    if (mk && mk->amx_chains && isa == ATTN_ISA_AMX && cpu_seconds > 0.0)
        state.counters["of_amx_peak"] = rate / peak_per_cpu_second(mk, true);
}

bool register_latent() {
    const latent_shape shapes[] = {
        {16, 1, 4096, 576, 512, true}, {128, 1, 4096, 576, 512, true},
        {64, 8, 4096, 128, 128, false}, {32, 2, 4096, 128, 128, false},
        {32, 1, 4096, 128, 128, false},
        {16, 1, 4096, 576, 512, true, false}, {32, 1, 4096, 128, 128, false, false}};
    const std::pair<const char *, int64_t> plans[] = {
        {"simd", attn::ops::heads_as_rows_min_group}, {"decode_entry", 0}, {"tile_rows", 2}};
    for (const latent_shape &s : shapes)
        for (attn_isa isa : s.bf16 ? bf16_isas() : simd_isas())
            for (const auto &[impl, rows_from] : plans)
                for (int threads : {1, 2}) {
                    const bool latent = s.dim_qk != s.dim_v && s.bf16;
                    if (threads == 2 && (!latent || rows_from != plans[0].second)) continue;
                    benchmark::RegisterBenchmark(
                        bench_name("latent", impl, isa_name(isa), threads, s.name()).c_str(),
                        latent_decode, s, isa, rows_from, threads)
                        ->UseRealTime()
                        ->Unit(benchmark::kMillisecond);
                }
    return true;
}

const bool registered = register_latent();

}  // namespace
}  // namespace attn_bench
