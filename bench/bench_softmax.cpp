// Row softmax y = softmax(x) on 2048x2048 and 8192x512 (and 64x65536, long rows):
//   softmax/ref/-/threads:1/RxC  and  softmax/simd/<isa>/threads:{1,2}/RxC
// GB/s counts the bytes of x read and y written once each (8 bytes per element), so it can
// be held against machine/read_bw.
#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace attn_bench {
namespace {

void softmax_attn(benchmark::State &state, int64_t rows, int64_t cols, attn_impl impl,
                  attn_isa isa, int threads) {
    attn_context *ctx = context(impl, isa, threads);
    const std::vector<float> x = random_floats(size_t(rows * cols), 3, -8.0f, 8.0f);
    std::vector<float> y(x.size());
    time_calls(state, [&] {
        return attn_softmax_f32(ctx, rows, cols, 1.0f, x.data(), cols, y.data(), cols);
    });
    set_bytes(state, 2.0 * sizeof(float) * double(rows) * double(cols));
}

bool register_softmax() {
    const std::pair<int64_t, int64_t> shapes[] = {{2048, 2048}, {8192, 512}, {64, 65536}};
    for (auto [rows, cols] : shapes) {
        const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
        auto add = [&](const std::string &name, attn_impl impl, attn_isa isa, int threads) {
            benchmark::RegisterBenchmark(name.c_str(), softmax_attn, rows, cols, impl, isa, threads)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        };
        add(bench_name("softmax", "ref", "-", 1, shape), ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, 1);
        for (attn_isa isa : simd_isas())
            for (int threads : {1, 2})
                add(bench_name("softmax", "simd", isa_name(isa), threads, shape), ATTN_IMPL_SIMD,
                    isa, threads);
    }
    return true;
}

const bool registered = register_softmax();

}  // namespace
}  // namespace attn_bench
