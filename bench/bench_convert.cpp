// attn_convert on 64 Mi elements (256 MiB in f32, 128 MiB in 16 bits: beyond the L3 of most
// machines, not of all; machine/read_bw_* report the L3 size this machine has), against
// memcpy moving the same number of bytes (read + written) in the same binary:
//   convert/simd/<isa>/threads:{1,2}/<src>_to_<dst>/67108864   every ISA this CPU runs
//   convert/memcpy/-/threads:{1,2}/<bytes>B                      memcpy of (src + dst) / 2
//                                                                bytes per element; two
//                                                                threads copy one half each
// GB/s counts bytes read plus bytes written per second, so convert GB/s / memcpy GB/s is the
// fraction of copy bandwidth a conversion reaches (GB/s_cpu, per second on a CPU, is the
// steadier figure on a shared machine).
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"

namespace attn_bench {
namespace {

constexpr int64_t elements = int64_t{64} << 20;

const char *dtype_name(attn_dtype t) {
    return t == ATTN_DTYPE_F32 ? "f32" : t == ATTN_DTYPE_BF16 ? "bf16" : "f16";
}

void convert_attn(benchmark::State &state, attn_dtype st, attn_dtype dt, attn_isa isa,
                  int threads) {
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    const size_t sb = attn_dtype_size(st), db = attn_dtype_size(dt);
    // Values in [-1, 1] stored as the source type (through the library's own conversion).
    std::vector<float> f = random_floats(size_t(elements), 1);
    std::vector<unsigned char> src(size_t(elements) * sb), dst(size_t(elements) * db, 1);
    if (!check(state, attn_convert(ctx, elements, f.data(), ATTN_DTYPE_F32, src.data(), st)))
        return;
    f = {};
    const double cpu_seconds = time_calls(state, [&] {
        return attn_convert(ctx, elements, src.data(), st, dst.data(), dt);
    });
    const double bytes = double(elements) * double(sb + db);
    set_bytes(state, bytes);
    set_bytes_per_cpu_second(state, bytes * double(state.iterations()),
                             cpu_seconds, threads);
}

void copy_memcpy(benchmark::State &state, size_t bytes, int threads) {
    std::vector<unsigned char> src(bytes, 3), dst(bytes, 1);
    const double cpu0 = process_cpu_seconds();
    for (auto _ : state) {
        if (threads == 1) {
            std::memcpy(dst.data(), src.data(), bytes);
        } else {
            const size_t half = bytes / 2 / 64 * 64;
            std::thread other([&] { std::memcpy(dst.data(), src.data(), half); });
            std::memcpy(dst.data() + half, src.data() + half, bytes - half);
            other.join();
        }
        benchmark::ClobberMemory();
    }
    set_bytes(state, 2.0 * double(bytes));
    set_bytes_per_cpu_second(state, 2.0 * double(bytes) * double(state.iterations()),
                             process_cpu_seconds() - cpu0, threads);
}

bool register_convert() {
    const std::pair<attn_dtype, attn_dtype> pairs[] = {{ATTN_DTYPE_F32, ATTN_DTYPE_BF16},
                                                       {ATTN_DTYPE_BF16, ATTN_DTYPE_F32},
                                                       {ATTN_DTYPE_F32, ATTN_DTYPE_F16},
                                                       {ATTN_DTYPE_F16, ATTN_DTYPE_F32}};
    std::vector<attn_isa> isas = simd_isas();
    if (context(ATTN_IMPL_SIMD, ATTN_ISA_AVX512_BF16, 1) != nullptr)
        isas.push_back(ATTN_ISA_AVX512_BF16);
    const size_t copy_bytes = size_t(elements) * 3;  // (4 + 2) / 2 bytes an element
    for (int threads : {1, 2})
        benchmark::RegisterBenchmark(
            bench_name("convert", "memcpy", "-", threads, std::to_string(copy_bytes) + "B").c_str(),
            copy_memcpy, copy_bytes, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    for (auto [st, dt] : pairs)
        for (attn_isa isa : isas)
            for (int threads : {1, 2}) {
                const std::string shape = std::string(dtype_name(st)) + "_to_" + dtype_name(dt) +
                                          "/" + std::to_string(elements);
                benchmark::RegisterBenchmark(
                    bench_name("convert", "simd", isa_name(isa), threads, shape).c_str(),
                    convert_attn, st, dt, isa, threads)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
            }
    return true;
}

const bool registered = register_convert();

}  // namespace
}  // namespace attn_bench
