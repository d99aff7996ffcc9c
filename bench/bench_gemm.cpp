// C = A B (row-major, no transposes, alpha 1, beta 0) on square shapes 256..2048 and the two
// thin shapes of attention projections, 2048x2048x64 and 2048x64x2048:
//   gemm/simd/<isa>/threads:{1,2}/MxNxK   attn, every ISA this CPU runs
//   gemm/ref/-/threads:1/MxNxK            the reference, small shapes only (<= 256)
//   gemm/openblas/-/threads:{1,2}/MxNxK   cblas_sgemm (openblas_set_num_threads)
//   gemm/onednn/-/threads:{1,2}/MxNxK     dnnl_sgemm; Debian's oneDNN runs on OpenMP, so its
//                                         threads are set with omp_set_num_threads
//   gemm_bf16/simd/<isa>/threads:{1,2}/MxNxK  attn_gemm with bf16 A and B, f32 C (1024^3
//                                         and 2048^3), next to the f32 rows of the same run
//   gemm_bf16/onednn/-/threads:{1,2}/MxNxK  oneDNN matmul, bf16 A and B, f32 C
// (on avx512_bf16 attn_gemm multiplies bf16 pairs with VDPBF16PS, gemm_bf16.hpp, on amx with
// TDPBF16PS on the tiles, src/kernels/amx/gemm_amx.hpp, registered only where the OS grants
// them; the other levels widen to f32.) The gemm_bf16 rows also report GFLOP/s_cpu, per second on a
// CPU, the figure to compare on a shared machine. Run oneDNN's two-thread rows with
// OMP_WAIT_POLICY=PASSIVE there: spin-waiting OpenMP threads lost 10-50% to the other load.
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
#include <oneapi/dnnl/dnnl.hpp>
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
    time_calls(state, [&] {
        return attn_gemm_f32(ctx, ATTN_NO_TRANS, ATTN_NO_TRANS, s.m, s.n, s.k, 1.0f, o.a.data(),
                             s.k, o.b.data(), s.n, 0.0f, o.c.data(), s.n);
    });
    set_flops(state, 2.0 * double(s.m) * double(s.n) * double(s.k));
}

// The operands rounded to bf16 (through attn_convert), C in f32.
struct bf16_operands {
    std::vector<uint16_t> a, b;
    std::vector<float> c;
    explicit bf16_operands(const shape &s)
        : a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), c(size_t(s.m * s.n), 0.0f) {
        const std::vector<float> fa = random_floats(a.size(), 1), fb = random_floats(b.size(), 2);
        attn_convert(nullptr, int64_t(a.size()), fa.data(), ATTN_DTYPE_F32, a.data(), ATTN_DTYPE_BF16);
        attn_convert(nullptr, int64_t(b.size()), fb.data(), ATTN_DTYPE_F32, b.data(), ATTN_DTYPE_BF16);
    }
};

void gemm_bf16_attn(benchmark::State &state, shape s, attn_isa isa, int threads) {
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    bf16_operands o(s);
    const double cpu_seconds = time_calls(state, [&] {
        return attn_gemm(ctx, ATTN_NO_TRANS, ATTN_NO_TRANS, s.m, s.n, s.k, 1.0f, o.a.data(),
                         ATTN_DTYPE_BF16, s.k, o.b.data(), ATTN_DTYPE_BF16, s.n, 0.0f,
                         o.c.data(), ATTN_DTYPE_F32, s.n);
    });
    const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
    set_flops(state, flops);
    set_flops_per_cpu_second(state, flops * double(state.iterations()),
                             cpu_seconds, threads);
}

#ifdef ATTN_BENCH_HAVE_OPENBLAS
void gemm_openblas(benchmark::State &state, shape s, int threads) {
    openblas_set_num_threads(threads);
    operands o(s);
    time_work(state, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.m), int(s.n), int(s.k), 1.0f,
                    o.a.data(), int(s.k), o.b.data(), int(s.n), 0.0f, o.c.data(), int(s.n));
        return true;
    });
    set_flops(state, 2.0 * double(s.m) * double(s.n) * double(s.k));
}
#endif

#ifdef ATTN_BENCH_HAVE_DNNL
void gemm_onednn(benchmark::State &state, shape s, int threads) {
    omp_set_num_threads(threads);
    operands o(s);
    time_work(state, [&] {
        if (dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, o.a.data(), s.k, o.b.data(), s.n, 0.0f,
                       o.c.data(), s.n) == dnnl_success)
            return true;
        state.SkipWithError("dnnl_sgemm failed");
        return false;
    });
    set_flops(state, 2.0 * double(s.m) * double(s.n) * double(s.k));
}
#endif

#ifdef ATTN_BENCH_HAVE_DNNL
// oneDNN's matmul primitive on bf16 A [m,k] and B [k,n] (row-major), f32 C; created once,
// outside the timed loop.
void gemm_bf16_onednn(benchmark::State &state, shape s, int threads) {
    omp_set_num_threads(threads);
    bf16_operands o(s);
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const dnnl::memory::desc a_md({s.m, s.k}, dt::bf16, tag::ab), b_md({s.k, s.n}, dt::bf16, tag::ab);
    const dnnl::memory::desc c_md({s.m, s.n}, dt::f32, tag::ab);
    dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), eng));
    dnnl::memory a_mem(a_md, eng, o.a.data()), b_mem(b_md, eng, o.b.data()),
        c_mem(c_md, eng, o.c.data());
    prim.execute(strm, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    strm.wait();  // warm-up outside the CPU-time window: OpenMP's threads start here
    const double cpu_start = process_cpu_seconds();
    for (auto _ : state) {
        prim.execute(strm, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
        strm.wait();
        benchmark::ClobberMemory();
    }
    const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
    set_flops(state, flops);
    set_flops_per_cpu_second(state, flops * double(state.iterations()),
                             process_cpu_seconds() - cpu_start, threads);
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
        if (s.m == s.n && s.n == s.k && s.m >= 1024) {
            std::vector<attn_isa> isas = simd_isas();
            for (attn_isa isa : bf16_isas()) isas.push_back(isa);  // amx where the OS grants tiles
            for (attn_isa isa : isas)
                for (int threads : {1, 2})
                    add(bench_name("gemm_bf16", "simd", isa_name(isa), threads, shape_name),
                        gemm_bf16_attn, isa, threads);
#ifdef ATTN_BENCH_HAVE_DNNL
            for (int threads : {1, 2})
                add(bench_name("gemm_bf16", "onednn", "-", threads, shape_name), gemm_bf16_onednn,
                    threads);
#endif
        }
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
