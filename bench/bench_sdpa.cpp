// Scaled dot-product attention, B = 1, fp32:
//   sdpa/simd/<isa>/threads:{1,2}/H8_L<L>_D<D>[_causal]   L in {512, 2048, 4096}, D in {64, 128}
//   sdpa/ref/-/threads:1/H8_L512_D<D>[_causal]           the reference, small shapes only
//   sdpa/openblas/-/threads:{1,2}/H8_L<L>_D<D>           attention composed per head from
//       cblas_sgemm (S = scale Q K^T), attn_softmax_f32 (SIMD, same threads), cblas_sgemm (P V)
//   sdpa/simd/<isa>/threads:{1,2}/decode_H32_Lq1_Lk4096_D128   one query against a long cache
//   sdpa/simd/<isa>/threads:{1,2}/decode_H32_KV8_Lq1_Lk4096_D128   the same with grouped-query
//       attention, 32 query heads over 8 KV heads (each K and V row read once for 4 heads)
// GFLOP/s = 4 B H Lq Lk D / time (half for causal: only the visible half is work). The decode
// shapes also report GB/s of K and V read once (128 MiB, 32 MiB with 8 KV heads: they fit this
// Xeon's L3, so compare with machine/read_bw_decode), and GB/s_cpu per second on a CPU.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.hpp"

#ifdef ATTN_BENCH_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace attn_bench {
namespace {

struct sdpa_shape {
    int64_t heads, len_q, len_kv, dim;
    bool causal;
    int64_t heads_kv = 0;  // 0: heads (no grouping)
    int64_t kv_heads() const { return heads_kv ? heads_kv : heads; }
    std::string name() const {
        if (len_q == 1)
            return "decode_H" + std::to_string(heads) +
                   (heads_kv ? "_KV" + std::to_string(heads_kv) : std::string()) + "_Lq1_Lk" +
                   std::to_string(len_kv) + "_D" + std::to_string(dim);
        return "H" + std::to_string(heads) + "_L" + std::to_string(len_q) + "_D" +
               std::to_string(dim) + (causal ? "_causal" : "");
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
    attn_context *ctx = context(impl, isa, threads);
    sdpa_data x(s);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, s.heads, s.len_q, s.len_kv, s.dim);
    if (s.heads_kv) {  // dense BHSD with fewer KV heads
        d.heads_kv = s.heads_kv;
        d.k.batch = d.v.batch = s.heads_kv * s.len_kv * s.dim;
    }
    d.causal = s.causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    const double cpu_start = process_cpu_seconds();
    for (auto _ : state) {
        if (!check(state, attn_sdpa_f32(ctx, &d, x.q.data(), x.k.data(), x.v.data(), x.out.data())))
            break;
        benchmark::ClobberMemory();
    }
    set_flops(state, s.flops());
    if (s.len_q == 1) {
        const double kv_bytes = 2.0 * sizeof(float) * double(s.kv_heads() * s.len_kv * s.dim);
        set_bytes(state, kv_bytes);
        set_bytes_per_cpu_second(state, kv_bytes * double(state.iterations()),
                                 process_cpu_seconds() - cpu_start, threads);
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
    for (auto _ : state) {
        for (int64_t h = 0; h < s.heads; ++h) {
            const float *q = x.q.data() + h * s.len_q * s.dim;
            const float *k = x.k.data() + h * s.len_kv * s.dim;
            const float *v = x.v.data() + h * s.len_kv * s.dim;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, dim, scale, q, dim, k, dim,
                        0.0f, scores.data(), n);
            float *p = scores.data();
            if (!check(state, attn_softmax_f32(ctx, m, n, 1.0f, p, n, p, n))) return;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, dim, n, 1.0f, p, n, v, dim,
                        0.0f, x.out.data() + h * s.len_q * s.dim, dim);
        }
        benchmark::ClobberMemory();
    }
    set_flops(state, s.flops());
}
#endif

bool register_sdpa() {
    std::vector<sdpa_shape> shapes;
    for (int64_t len : {512, 2048, 4096})
        for (int64_t dim : {64, 128})
            for (bool causal : {false, true}) shapes.push_back({8, len, len, dim, causal});
    shapes.push_back({32, 1, 4096, 128, false});
    shapes.push_back({32, 1, 4096, 128, false, 8});
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
