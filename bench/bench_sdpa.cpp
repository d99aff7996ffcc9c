// Scaled dot-product attention, B = 1, fp32:
//   sdpa/simd/<isa>/threads:{1,2}/H8_L<L>_D<D>[_causal]   L in {512, 2048, 4096}, D in {64, 128}
//   sdpa/ref/-/threads:1/H8_L512_D<D>[_causal]           the reference, small shapes only
//   sdpa/onednn/-/threads:{1,2}/H8_L<L>_D<D>             attention composed per head from
//       oneDNN's dnnl_sgemm (S = scale Q K^T), attn_softmax_f32, dnnl_sgemm (P V), all on
//       OpenMP's threads (as sdpa/onednn_bf16 below): the strongest f32 peer
//   sdpa/openblas/-/threads:{1,2}/H8_L<L>_D<D>           the same from cblas_sgemm, the softmax
//       on attn's TBB threads (OpenBLAS's pool and TBB's share the cores at 2 threads)
//   sdpa/simd/<isa>/threads:{1,2}/decode_H32_Lq1_Lk4096_D128   one query against a long cache
//   sdpa/simd/<isa>/threads:{1,2}/decode_H32_KV8_Lq1_Lk4096_D128   the same with grouped-query
//       attention, 32 query heads over 8 KV heads (each K and V row read once for 4 heads)
//   sdpa/simd/<bf16 isa>/threads:{1,2}/H8_L<L>_D<D>[_causal][_bf16|_fpmath_bf16]   on the 16-bit
//       levels (avx512_bf16, amx): f32 inputs (the AVX-512 kernels), q, k, v stored in bf16,
//       and f32 inputs under ATTN_FPMATH_BF16, all with f32 out
//   sdpa/onednn_bf16/-/threads:{1,2}/H8_L2048_D<D>_bf16   the bf16 attention composed per head
//       from oneDNN bf16 matmuls: S = Q K^T (bf16 -> f32), attn_softmax_f32 (scale applied
//       there), P rounded to bf16 (attn_convert), O = P V (bf16 -> f32). All on OpenMP's
//       threads: oneDNN's are OpenMP's (omp_set_num_threads), and the softmax and rounding
//       run as an OpenMP loop over row blocks, each thread with a one-thread attn context.
//       Run the two-thread rows with OMP_WAIT_POLICY=PASSIVE: with libgomp's default
//       spin-waiting, 16 parallel regions per call on a shared two-core machine ran 4x slower
//       (the same with attn's TBB threads doing the softmax); passive, 2x faster than 1 thread.
// GFLOP/s = 4 B H Lq Lk D / time (half for causal: only the visible half is work). The decode
// shapes also report GB/s of K and V read once (128 MiB, 32 MiB with 8 KV heads) and GB/s_cpu
// per second on a CPU; whether that is a rate from cache or from DRAM depends on the machine's
// last-level cache (machine/read_bw_decode and bench_machine.cpp's cache line read it).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.hpp"

#ifdef ATTN_BENCH_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef ATTN_BENCH_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace attn_bench {
namespace {

// How the inputs are stored and multiplied: f32; q, k, v in bf16 (attn_sdpa, f32 out); or
// f32 under ATTN_FPMATH_BF16.
enum class sdpa_math { f32, bf16, fpmath_bf16 };

struct sdpa_shape {
    int64_t heads, len_q, len_kv, dim;
    bool causal;
    int64_t heads_kv = 0;  // 0: heads (no grouping)
    sdpa_math math = sdpa_math::f32;
    int64_t kv_heads() const { return heads_kv ? heads_kv : heads; }
    std::string name() const {
        if (len_q == 1)
            return "decode_H" + std::to_string(heads) +
                   (heads_kv ? "_KV" + std::to_string(heads_kv) : std::string()) + "_Lq1_Lk" +
                   std::to_string(len_kv) + "_D" + std::to_string(dim);
        return "H" + std::to_string(heads) + "_L" + std::to_string(len_q) + "_D" +
               std::to_string(dim) + (causal ? "_causal" : "") +
               (math == sdpa_math::bf16          ? "_bf16"
                : math == sdpa_math::fpmath_bf16 ? "_fpmath_bf16"
                                                 : "");
    }
    double flops() const {
        return 4.0 * double(heads) * double(len_q) * double(len_kv) * double(dim) *
               (causal ? 0.5 : 1.0);
    }
};

struct sdpa_data {
    std::vector<float> q, k, v, out;
    explicit sdpa_data(const sdpa_shape &s)
        : q(random_floats(size_t(s.heads * s.len_q * s.dim), 1)),
          k(random_floats(size_t(s.kv_heads() * s.len_kv * s.dim), 2)),
          v(random_floats(size_t(s.kv_heads() * s.len_kv * s.dim), 3)),
          out(q.size()) {}
};


void sdpa_attn(benchmark::State &state, sdpa_shape s, attn_impl impl, attn_isa isa, int threads) {
    attn_context *ctx = s.math == sdpa_math::fpmath_bf16 ? context_bf16_math(isa, threads)
                                                         : context(impl, isa, threads);
    sdpa_data x(s);
    const std::vector<uint16_t> q16 = to_bf16(x.q), k16 = to_bf16(x.k), v16 = to_bf16(x.v);
    const bool typed = s.math == sdpa_math::bf16;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, s.heads, s.len_q, s.len_kv, s.dim);
    if (s.heads_kv) {  // dense BHSD with fewer KV heads
        d.heads_kv = s.heads_kv;
        d.k.batch = d.v.batch = s.heads_kv * s.len_kv * s.dim;
    }
    d.causal = s.causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    if (typed) d.q_type = d.kv_type = ATTN_DTYPE_BF16;
    const void *q = typed ? static_cast<const void *>(q16.data()) : x.q.data();
    const void *k = typed ? static_cast<const void *>(k16.data()) : x.k.data();
    const void *v = typed ? static_cast<const void *>(v16.data()) : x.v.data();
    const double cpu_seconds = time_calls(state, [&] {
        return attn_sdpa(ctx, &d, q, k, v, x.out.data());
    });
    set_flops(state, s.flops());
    if (s.math == sdpa_math::bf16)
        set_flops_per_cpu_second(state, s.flops() * double(state.iterations()),
                                 cpu_seconds, threads);
    if (s.len_q == 1) {
        const double kv_bytes = 2.0 * sizeof(float) * double(s.kv_heads() * s.len_kv * s.dim);
        set_bytes(state, kv_bytes);
        set_bytes_per_cpu_second(state, kv_bytes * double(state.iterations()),
                                 cpu_seconds, threads);
    }
}

#ifdef ATTN_BENCH_HAVE_OPENBLAS
// The textbook composition: S = scale Q K^T materialised per head, softmax, O = P V.
void sdpa_openblas(benchmark::State &state, sdpa_shape s, int threads) {
    openblas_set_num_threads(threads);
    attn_context *ctx = context(ATTN_IMPL_SIMD, ATTN_ISA_AUTO, threads);
    sdpa_data x(s);
    std::vector<float> scores(size_t(s.len_q * s.len_kv));
    const float scale = 1.0f / std::sqrt(float(s.dim));
    const int m = int(s.len_q), n = int(s.len_kv), dim = int(s.dim);
    auto one_pass = [&] {
        for (int64_t h = 0; h < s.heads; ++h) {
            const float *q = x.q.data() + h * s.len_q * s.dim;
            const float *k = x.k.data() + h * s.len_kv * s.dim;
            const float *v = x.v.data() + h * s.len_kv * s.dim;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, dim, scale, q, dim, k, dim,
                        0.0f, scores.data(), n);
            float *p = scores.data();
            if (!check(state, attn_softmax_f32(ctx, m, n, 1.0f, p, n, p, n))) return false;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, dim, n, 1.0f, p, n, v, dim,
                        0.0f, x.out.data() + h * s.len_q * s.dim, dim);
        }
        return true;
    };
    time_work(state, one_pass);
    set_flops(state, s.flops());
}
#endif

#ifdef ATTN_BENCH_HAVE_DNNL
// One single-thread attn context per OpenMP thread (the softmax between oneDNN's matmuls runs
// on OpenMP's threads, as oneDNN does); empty after SkipWithError.
std::vector<attn_context *> omp_contexts(benchmark::State &state, int threads) {
    omp_set_num_threads(threads);
    std::vector<attn_context *> ctxs(static_cast<size_t>(threads), nullptr);
    for (int t = 0; t < threads; ++t) {
        attn_config cfg;
        attn_config_init(&cfg);
        cfg.impl = ATTN_IMPL_SIMD;
        cfg.num_threads = 1;
        if (attn_context_create(&cfg, &ctxs[size_t(t)]) != ATTN_OK) {
            state.SkipWithError("attn_context_create failed");
            for (attn_context *c : ctxs) attn_context_destroy(c);
            return {};
        }
    }
    return ctxs;
}

// f32 attention composed per head from oneDNN's sgemm (S = scale Q K^T, then O = P V) around
// attn_softmax_f32 on OpenMP's threads: the textbook composition on the strongest f32 GEMM
// available, every part on OpenMP's threads (oneDNN's own).
void sdpa_onednn(benchmark::State &state, sdpa_shape s, int threads) {
    std::vector<attn_context *> ctxs = omp_contexts(state, threads);
    if (ctxs.empty()) return;
    sdpa_data x(s);
    const int64_t L = s.len_q, Lk = s.len_kv, D = s.dim;
    std::vector<float> scores(size_t(L * Lk));
    const float scale = 1.0f / std::sqrt(float(D));
    auto one_pass = [&]() {
        for (int64_t h = 0; h < s.heads; ++h) {
            const float *q = x.q.data() + h * L * D, *k = x.k.data() + h * Lk * D,
                        *v = x.v.data() + h * Lk * D;
            if (dnnl_sgemm('N', 'T', L, Lk, D, scale, q, D, k, D, 0.0f, scores.data(), Lk) !=
                dnnl_success)
                return false;
            bool ok = true;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(&& : ok)
            for (int t = 0; t < threads; ++t) {
                const int64_t r0 = L * t / threads, r1 = L * (t + 1) / threads;
                float *p = scores.data() + r0 * Lk;
                ok = attn_softmax_f32(ctxs[size_t(t)], r1 - r0, Lk, 1.0f, p, Lk, p, Lk) == ATTN_OK;
            }
            if (!ok || dnnl_sgemm('N', 'N', L, D, Lk, 1.0f, scores.data(), Lk, v, D, 0.0f,
                                  x.out.data() + h * L * D, D) != dnnl_success)
                return false;
        }
        return true;
    };
    one_pass();  // warm-up: OpenMP's threads start here
    for (auto _ : state) {
        if (!one_pass()) {
            state.SkipWithError("dnnl_sgemm or attn_softmax_f32 failed");
            break;
        }
        benchmark::ClobberMemory();
    }
    set_flops(state, s.flops());
    for (attn_context *c : ctxs) attn_context_destroy(c);
}

// The composition with oneDNN's bf16 matmul (see the header), primitives created once.
void sdpa_onednn_bf16(benchmark::State &state, sdpa_shape s, int threads) {
    std::vector<attn_context *> ctxs = omp_contexts(state, threads);
    if (ctxs.empty()) return;
    sdpa_data x(s);
    const std::vector<uint16_t> q16 = to_bf16(x.q), k16 = to_bf16(x.k), v16 = to_bf16(x.v);
    const int64_t L = s.len_q, Lk = s.len_kv, D = s.dim;
    std::vector<float> scores(size_t(L * Lk));
    std::vector<uint16_t> p16(scores.size());
    const float scale = 1.0f / std::sqrt(float(D));
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    // S [L, Lk] = Q [L, D] K^T: K stored [Lk, D] is the [D, Lk] weights in layout "ba".
    const dnnl::memory::desc q_md({L, D}, dt::bf16, tag::ab), kt_md({D, Lk}, dt::bf16, tag::ba),
        s_md({L, Lk}, dt::f32, tag::ab);
    const dnnl::memory::desc p_md({L, Lk}, dt::bf16, tag::ab), v_md({Lk, D}, dt::bf16, tag::ab),
        o_md({L, D}, dt::f32, tag::ab);
    dnnl::matmul qk(dnnl::matmul::primitive_desc(dnnl::matmul::desc(q_md, kt_md, s_md), eng));
    dnnl::matmul pv(dnnl::matmul::primitive_desc(dnnl::matmul::desc(p_md, v_md, o_md), eng));
    dnnl::memory q_mem(q_md, eng, nullptr), k_mem(kt_md, eng, nullptr), v_mem(v_md, eng, nullptr),
        o_mem(o_md, eng, nullptr);
    dnnl::memory s_mem(s_md, eng, scores.data()), p_mem(p_md, eng, p16.data());
    auto one_pass = [&]() {
        for (int64_t h = 0; h < s.heads; ++h) {
            q_mem.set_data_handle(const_cast<uint16_t *>(q16.data() + h * L * D));
            k_mem.set_data_handle(const_cast<uint16_t *>(k16.data() + h * Lk * D));
            v_mem.set_data_handle(const_cast<uint16_t *>(v16.data() + h * Lk * D));
            o_mem.set_data_handle(x.out.data() + h * L * D);
            qk.execute(strm, {{DNNL_ARG_SRC, q_mem}, {DNNL_ARG_WEIGHTS, k_mem}, {DNNL_ARG_DST, s_mem}});
            strm.wait();
            bool ok = true;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(&& : ok)
            for (int t = 0; t < threads; ++t) {
                const int64_t r0 = L * t / threads, r1 = L * (t + 1) / threads;
                float *p = scores.data() + r0 * Lk;
                attn_context *c = ctxs[size_t(t)];
                ok = attn_softmax_f32(c, r1 - r0, Lk, scale, p, Lk, p, Lk) == ATTN_OK &&
                     attn_convert(c, (r1 - r0) * Lk, p, ATTN_DTYPE_F32, p16.data() + r0 * Lk,
                                  ATTN_DTYPE_BF16) == ATTN_OK;
            }
            if (!ok) return false;
            pv.execute(strm, {{DNNL_ARG_SRC, p_mem}, {DNNL_ARG_WEIGHTS, v_mem}, {DNNL_ARG_DST, o_mem}});
            strm.wait();
        }
        return true;
    };
    one_pass();  // warm-up outside the CPU-time window: OpenMP's threads start here
    const double cpu_start = process_cpu_seconds();
    for (auto _ : state) {
        if (!one_pass()) {
            state.SkipWithError(attn_last_error());
            break;
        }
        benchmark::ClobberMemory();
    }
    set_flops(state, s.flops());
    set_flops_per_cpu_second(state, s.flops() * double(state.iterations()),
                             process_cpu_seconds() - cpu_start, threads);
    for (attn_context *c : ctxs) attn_context_destroy(c);
}
#endif

bool register_sdpa() {
    std::vector<sdpa_shape> shapes;
    for (int64_t len : {512, 2048, 4096})
        for (int64_t dim : {64, 128})
            for (bool causal : {false, true}) shapes.push_back({8, len, len, dim, causal});
    shapes.push_back({32, 1, 4096, 128, false});
    shapes.push_back({32, 1, 4096, 128, false, 8});
    // the 16-bit levels: bf16 inputs and ATTN_FPMATH_BF16 beside their f32 (AVX-512) work
    std::vector<sdpa_shape> bf16_shapes;
    for (int64_t len : {512, 2048, 4096})
        for (int64_t dim : {64, 128})
            for (bool causal : {false, true})
                for (sdpa_math math : {sdpa_math::f32, sdpa_math::bf16, sdpa_math::fpmath_bf16})
                    bf16_shapes.push_back({8, len, len, dim, causal, 0, math});
    for (attn_isa isa : bf16_isas())
        for (const sdpa_shape &s : bf16_shapes)
            for (int threads : {1, 2})
                benchmark::RegisterBenchmark(
                    bench_name("sdpa", "simd", isa_name(isa), threads, s.name()).c_str(), sdpa_attn,
                    s, ATTN_IMPL_SIMD, isa, threads)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
#ifdef ATTN_BENCH_HAVE_DNNL
    for (int64_t dim : {128, 64})
        for (int threads : {1, 2}) {
            const sdpa_shape s{8, 2048, 2048, dim, false, 0, sdpa_math::bf16};
            benchmark::RegisterBenchmark(
                bench_name("sdpa", "onednn_bf16", "-", threads, s.name()).c_str(),
                sdpa_onednn_bf16, s, threads)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
#endif
    for (const sdpa_shape &s : shapes) {
        auto add = [&](const std::string &name, auto &&...args) {
            benchmark::RegisterBenchmark(name.c_str(), args...)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        };
        if (s.len_q <= 512)
            add(bench_name("sdpa", "ref", "-", 1, s.name()), sdpa_attn, s, ATTN_IMPL_REFERENCE,
                ATTN_ISA_AUTO, 1);
        for (attn_isa isa : simd_isas())
            for (int threads : {1, 2})
                add(bench_name("sdpa", "simd", isa_name(isa), threads, s.name()), sdpa_attn, s,
                    ATTN_IMPL_SIMD, isa, threads);
#ifdef ATTN_BENCH_HAVE_DNNL
        if (!s.causal && s.len_q > 1)
            for (int threads : {1, 2})
                add(bench_name("sdpa", "onednn", "-", threads, s.name()), sdpa_onednn, s, threads);
#endif
#ifdef ATTN_BENCH_HAVE_OPENBLAS
        if (!s.causal && s.len_q > 1)
            for (int threads : {1, 2})
                add(bench_name("sdpa", "openblas", "-", threads, s.name()), sdpa_openblas, s,
                    threads);
#endif
    }
    return true;
}

const bool registered = register_sdpa();

}  // namespace
}  // namespace attn_bench
