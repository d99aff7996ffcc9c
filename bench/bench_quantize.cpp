// attn_quantize: 8192 f32 rows of 128 (a block of new keys for 64 heads of 128 tokens), into
// each quantized type at the granularities a cache would use, on the reference and each SIMD
// ISA, 1 and 2 threads:
//   quantize/<reference|simd>/<isa>/threads:{1,2}/<type>_<sym|asym>_g<group>/8192x128
// GB/s counts the f32 bytes read per second of wall time (GB/s_cpu: per CPU second), so the
// simd / reference ratio and the 1 / 2 thread ratio are read from one run.
#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace attn_bench {
namespace {

constexpr int64_t rows = 8192, dim = 128;

struct quantize_case {
    attn_dtype type;
    const char *name;
    bool asymmetric;
    int64_t group;
};

void quantize_attn(benchmark::State &state, attn_context *ctx, quantize_case c, int threads) {
    const std::vector<float> x = random_floats(size_t(rows * dim), 3, -2.0f, 3.0f);
    const int64_t groups = c.group == 0 ? 1 : dim / c.group;
    std::vector<uint8_t> dst(size_t(rows * dim));
    std::vector<float> scale(size_t(rows * groups)), zero(scale.size());
    const double cpu_seconds = time_calls(state, [&] {
        return attn_quantize(ctx, rows, dim, x.data(), ATTN_DTYPE_F32, dim, dst.data(), c.type,
                             dim, scale.data(), c.asymmetric ? zero.data() : nullptr, groups,
                             c.group);
    });
    const double bytes = double(rows * dim) * 4.0;
    set_bytes(state, bytes);
    set_bytes_per_cpu_second(state, bytes * double(state.iterations()),
                             cpu_seconds, threads);
}

bool register_quantize() {
    const quantize_case cases[] = {{ATTN_DTYPE_I8, "i8", false, 0},
                                   {ATTN_DTYPE_I8, "i8", false, 32},
                                   {ATTN_DTYPE_U8, "u8", true, 0},
                                   {ATTN_DTYPE_I4, "i4", false, 32},
                                   {ATTN_DTYPE_U4, "u4", true, 32},
                                   {ATTN_DTYPE_FP8_E4M3, "fp8_e4m3", false, 0}};
    for (const quantize_case &c : cases) {
        const std::string shape = std::string(c.name) + (c.asymmetric ? "_asym" : "_sym") + "_g" +
                                  std::to_string(c.group) + "/" + std::to_string(rows) + "x" +
                                  std::to_string(dim);
        for (int threads : {1, 2}) {
            if (attn_context *ref = context(ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, threads))
                benchmark::RegisterBenchmark(
                    bench_name("quantize", "reference", "-", threads, shape).c_str(),
                    quantize_attn, ref, c, threads)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
            for (attn_isa isa : simd_isas())
                benchmark::RegisterBenchmark(
                    bench_name("quantize", "simd", isa_name(isa), threads, shape).c_str(),
                    quantize_attn, context(ATTN_IMPL_SIMD, isa, threads), c, threads)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
        }
    }
    return true;
}

const bool registered = register_quantize();

}  // namespace
}  // namespace attn_bench
