// Multi-head self-attention, forward and backward (every gradient), fp32:
//   mha_forward/<impl>/<isa>/threads:<n>/B1_L<L>_dm512_H8     L in {256, 1024}
//   mha_backward/<impl>/<isa>/threads:<n>/B1_L<L>_dm512_H8
//   mha_forward/simd/<isa>/threads:<n>/B1_L2048_dm1024_H16        the f32 layer, f32 levels
//   mha_forward_bf16/simd/<bf16 isa>/threads:<n>/B1_L2048_dm1024_H16  the same layer in bf16,
//       composed from the public parts: attn_gemm projections written as BSHD bf16 Q, K, V,
//       attn_sdpa on them in place (bf16 out, BSHD), attn_gemm output projection (bf16 y)
// The reference runs at L = 256 only. GFLOP/s counts the forward as the four projections
// (2 L dm^2 each) plus the attention (4 L^2 dm); the backward as twice the forward. The
// forward rows also report GFLOP/s_cpu (per second on a CPU: compare these on a busy machine).
#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace attn_bench {
namespace {

struct mha_shape {
    int64_t len, d_model, heads;
    std::string name() const {
        return "B1_L" + std::to_string(len) + "_dm" + std::to_string(d_model) + "_H" +
               std::to_string(heads);
    }
    double forward_flops() const {
        const double l = double(len), dm = double(d_model);
        return 4 * 2 * l * dm * dm + 4 * l * l * dm;
    }
};

struct mha_data {
    std::vector<float> x, w_q, w_k, w_v, w_o, b, y, dy, dx, dw_q, dw_k, dw_v, dw_o, db[4];
    attn_mha_desc d;
    attn_mha_grads g{};
    explicit mha_data(const mha_shape &s) {
        const size_t n = size_t(s.len * s.d_model), w = size_t(s.d_model * s.d_model);
        const float ws = 1.0f / float(s.d_model);
        x = random_floats(n, 1);
        w_q = random_floats(w, 2, -ws, ws);
        w_k = random_floats(w, 3, -ws, ws);
        w_v = random_floats(w, 4, -ws, ws);
        w_o = random_floats(w, 5, -ws, ws);
        b = random_floats(size_t(s.d_model), 6);
        y.resize(n);
        dy = random_floats(n, 7);
        dx.resize(n);
        for (auto *v : {&dw_q, &dw_k, &dw_v, &dw_o}) v->resize(w);
        for (auto &v : db) v.resize(size_t(s.d_model));
        attn_mha_desc_init(&d, 1, s.len, s.len, s.d_model, s.heads);
        d.w_q = w_q.data();
        d.w_k = w_k.data();
        d.w_v = w_v.data();
        d.w_o = w_o.data();
        d.b_q = d.b_k = d.b_v = d.b_o = b.data();
        g = {dw_q.data(), dw_k.data(), dw_v.data(), dw_o.data(),
             db[0].data(), db[1].data(), db[2].data(), db[3].data()};
    }
};

void mha_forward(benchmark::State &state, mha_shape s, attn_impl impl, attn_isa isa, int threads) {
    attn_context *ctx = context(impl, isa, threads);
    mha_data m(s);
    const double cpu_seconds = time_calls(state, [&] {
        return attn_mha_forward_f32(ctx, &m.d, m.x.data(), m.x.data(), m.y.data());
    });
    set_flops(state, s.forward_flops());
    set_flops_per_cpu_second(state, s.forward_flops() * double(state.iterations()),
                             cpu_seconds, threads);
}

// The f32 layer's x and weights in bf16 (biases left out: attn_gemm has none), as a bf16
// model stores them; converted once, outside the timed loop.
std::vector<uint16_t> bf16_of(const std::vector<float> &x) {
    std::vector<uint16_t> out(x.size());
    attn_convert(nullptr, int64_t(x.size()), x.data(), ATTN_DTYPE_F32, out.data(), ATTN_DTYPE_BF16);
    return out;
}

void mha_forward_bf16(benchmark::State &state, mha_shape s, attn_isa isa, int threads) {
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    mha_data m(s);
    const std::vector<uint16_t> x = bf16_of(m.x), wq = bf16_of(m.w_q), wk = bf16_of(m.w_k),
                                wv = bf16_of(m.w_v), wo = bf16_of(m.w_o);
    const int64_t L = s.len, dm = s.d_model, hd = dm / s.heads;
    std::vector<uint16_t> q(size_t(L * dm)), k(q.size()), v(q.size()), o(q.size()), y(q.size());
    const attn_dtype bf = ATTN_DTYPE_BF16;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, s.heads, L, L, hd);
    d.q = d.k = d.v = d.out = {L * dm, hd, dm};  // BSHD: the projections' [L, heads*hd] rows
    d.q_type = d.kv_type = d.out_type = bf;
    // C [L, dm] = X [L, dm] W^T (nn.Linear weights [out, in]: B transposed)
    auto project = [&](const uint16_t *in, const std::vector<uint16_t> &w, uint16_t *out) {
        return attn_gemm(ctx, ATTN_NO_TRANS, ATTN_TRANS, L, dm, dm, 1.0f, in, bf, dm, w.data(), bf,
                         dm, 0.0f, out, bf, dm);
    };
    const double cpu_start = process_cpu_seconds();
    for (auto _ : state) {
        if (!check(state, project(x.data(), wq, q.data())) ||
            !check(state, project(x.data(), wk, k.data())) ||
            !check(state, project(x.data(), wv, v.data())) ||
            !check(state, attn_sdpa(ctx, &d, q.data(), k.data(), v.data(), o.data())) ||
            !check(state, project(o.data(), wo, y.data())))
            break;
        benchmark::ClobberMemory();
    }
    set_flops(state, s.forward_flops());
    set_flops_per_cpu_second(state, s.forward_flops() * double(state.iterations()),
                             process_cpu_seconds() - cpu_start, threads);
}

void mha_backward(benchmark::State &state, mha_shape s, attn_impl impl, attn_isa isa,
                  int threads) {
    attn_context *ctx = context(impl, isa, threads);
    mha_data m(s);
    time_calls(state, [&] {
        return attn_mha_backward_f32(ctx, &m.d, m.x.data(), m.x.data(), m.dy.data(), m.dx.data(),
                                     nullptr, &m.g);
    });
    set_flops(state, 2 * s.forward_flops());
}

bool register_mha() {
    for (mha_shape s : {mha_shape{256, 512, 8}, mha_shape{1024, 512, 8}}) {
        auto add = [&](const std::string &op, auto fn, const std::string &impl_name,
                       attn_impl impl, attn_isa isa, int threads) {
            const std::string isa_text = impl == ATTN_IMPL_REFERENCE ? "-" : isa_name(isa);
            benchmark::RegisterBenchmark(
                bench_name(op, impl_name, isa_text, threads, s.name()).c_str(), fn, s, impl, isa,
                threads)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        };
        for (auto [op, fn] : {std::pair{"mha_forward", &mha_forward},
                              std::pair{"mha_backward", &mha_backward}}) {
            if (s.len <= 256) add(op, fn, "ref", ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, 1);
            for (attn_isa isa : simd_isas())
                for (int threads : {1, 2}) add(op, fn, "simd", ATTN_IMPL_SIMD, isa, threads);
        }
    }
    // The bf16 layer beside the f32 one at a model's size.
    const mha_shape big{2048, 1024, 16};
    for (int threads : {1, 2}) {
        for (attn_isa isa : simd_isas())
            if (isa == ATTN_ISA_AVX512)
                benchmark::RegisterBenchmark(
                    bench_name("mha_forward", "simd", isa_name(isa), threads, big.name()).c_str(),
                    mha_forward, big, ATTN_IMPL_SIMD, isa, threads)
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
        for (attn_isa isa : bf16_isas())
            benchmark::RegisterBenchmark(
                bench_name("mha_forward_bf16", "simd", isa_name(isa), threads, big.name()).c_str(),
                mha_forward_bf16, big, isa, threads)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
    }
    return true;
}

const bool registered = register_mha();

}  // namespace
}  // namespace attn_bench
