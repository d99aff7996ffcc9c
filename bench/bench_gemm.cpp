// C = A B (row-major, no transposes, alpha 1, beta 0) on square shapes 256..2048 and the two
// thin shapes of attention projections, 2048x2048x64 and 2048x64x2048:
//   gemm/simd/<isa>/threads:{1,2}/MxNxK   attn, every ISA this CPU runs
//   gemm/ref/-/threads:1/MxNxK            the reference, small shapes only (<= 256)
//   gemm/openblas/-/threads:{1,2}/MxNxK   cblas_sgemm (openblas_set_num_threads)
//   gemm/onednn/-/threads:{1,2}/MxNxK     dnnl_sgemm; Debian's oneDNN runs on OpenMP, so its
//                                         threads are set with omp_set_num_threads
// GFLOP/s = 2 M N K per call.
#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.hpp"

#ifdef ATTN_BENCH_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef ATTN_BENCH_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.h>
#endif

namespace attn_bench {
namespace {

struct shape {
    int64_t m, n, k;
    std::string name() const {
        return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    }
};

const shape shapes[] = {{256, 256, 256},   {512, 512, 512},   {1024, 1024, 1024},
                        {2048, 2048, 2048}, {2048, 2048, 64},  {2048, 64, 2048}};

struct operands {
    std::vector<float> a, b, c;
    explicit operands(const shape &s)
        : a(random_floats(size_t(s.m * s.k), 1)), b(random_floats(size_t(s.k * s.n), 2)),
          c(size_t(s.m * s.n), 0.0f) {}
};

void gemm_attn(benchmark::State &state, shape s, attn_impl impl, attn_isa isa, int threads) {
    attn_context *ctx = context(impl, isa, threads);
    operands o(s);
    for (auto _ : state) {
        if (!check(state, attn_gemm_f32(ctx, ATTN_NO_TRANS, ATTN_NO_TRANS, s.m, s.n, s.k, 1.0f,
                                        o.a.data(), s.k, o.b.data(), s.n, 0.0f, o.c.data(), s.n)))
            break;
        benchmark::ClobberMemory();
    }
    set_flops(state, 2.0 * double(s.m) * double(s.n) * double(s.k));
}

#ifdef ATTN_BENCH_HAVE_OPENBLAS
void gemm_openblas(benchmark::State &state, shape s, int threads) {
    openblas_set_num_threads(threads);
    operands o(s);
    for (auto _ : state) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.m), int(s.n), int(s.k), 1.0f,
                    o.a.data(), int(s.k), o.b.data(), int(s.n), 0.0f, o.c.data(), int(s.n));
        benchmark::ClobberMemory();
    }
    set_flops(state, 2.0 * double(s.m) * double(s.n) * double(s.k));
}
#endif

#ifdef ATTN_BENCH_HAVE_DNNL
void gemm_onednn(benchmark::State &state, shape s, int threads) {
    omp_set_num_threads(threads);
    operands o(s);
    for (auto _ : state) {
        if (dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, o.a.data(), s.k, o.b.data(), s.n, 0.0f,
                       o.c.data(), s.n) != dnnl_success) {
            state.SkipWithError("dnnl_sgemm failed");
            break;
        }
        benchmark::ClobberMemory();
    }
    set_flops(state, 2.0 * double(s.m) * double(s.n) * double(s.k));
}
#endif

bool register_gemm() {
    for (const shape &s : shapes) {
        const std::string shape_name = s.name();
        auto add = [&](const std::string &name, auto fn, auto... args) {
            benchmark::RegisterBenchmark(name.c_str(), fn, s, args...)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        };
        if (s.m * s.n * s.k <= int64_t{256} * 256 * 256)
            add(bench_name("gemm", "ref", "-", 1, shape_name), gemm_attn, ATTN_IMPL_REFERENCE,
                ATTN_ISA_AUTO, 1);
        for (attn_isa isa : simd_isas())
            for (int threads : {1, 2})
                add(bench_name("gemm", "simd", isa_name(isa), threads, shape_name), gemm_attn,
                    ATTN_IMPL_SIMD, isa, threads);
        for (int threads : {1, 2}) {
#ifdef ATTN_BENCH_HAVE_OPENBLAS
            add(bench_name("gemm", "openblas", "-", threads, shape_name), gemm_openblas, threads);
#endif
#ifdef ATTN_BENCH_HAVE_DNNL
            add(bench_name("gemm", "onednn", "-", threads, shape_name), gemm_onednn, threads);
#endif
        }
    }
    return true;
}

const bool registered = register_gemm();

}  // namespace
}  // namespace attn_bench
