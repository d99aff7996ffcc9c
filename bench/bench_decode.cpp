// Decoding over a KV cache per element type: one query row per head against len_kv keys,
// K and V stored in f32, bf16 or f16 (q and out f32), B = 1, D = 128:
//   decode/simd/<isa>/threads:{1,2}/H32_KV<n>_Lk<L>_D128_<kv type>
//   n in {32, 8} (8: grouped-query, each K and V row read once for 4 query heads),
//   L in {1024, 4096}.
// GB/s counts the K and V bytes as stored (2 per element for 16 bits), read once per call:
// compare with machine/read_bw_decode (the same access pattern over 128 MiB), with of_read (the
// fraction of the rate of reading the same bytes, alternated with the calls:
// bench_paired_read.hpp) and across types
// (16-bit KV decode against the f32-KV decode of the same shape, in one run). The K and V
// span 4 to 128 MiB here: a ratio across types compares working sets of different sizes,
// which may sit on either side of this machine's L3 (its size: machine/read_bw_*'s L3_MiB);
// label such a ratio as crossing the L3, not as bytes alone.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "bench_paired_read.hpp"
#include "ref/convert.hpp"

namespace attn_bench {
namespace {

struct decode_shape {
    int64_t heads, heads_kv, len_kv, dim;
    attn_dtype kv_type;
    std::string name() const {
        const char *t = kv_type == ATTN_DTYPE_F32 ? "f32" : kv_type == ATTN_DTYPE_BF16 ? "bf16" : "f16";
        return "H" + std::to_string(heads) + "_KV" + std::to_string(heads_kv) + "_Lk" +
               std::to_string(len_kv) + "_D" + std::to_string(dim) + "_" + t;
    }
};

// n values in [-1, 1) stored as type t (bytes).
std::vector<uint8_t> stored_values(size_t n, uint32_t seed, attn_dtype t) {
    const std::vector<float> x = random_floats(n, seed);
    std::vector<uint8_t> out(n * attn_dtype_size(t));
    if (t == ATTN_DTYPE_F32) {
        std::memcpy(out.data(), x.data(), out.size());
        return out;
    }
    uint16_t *h = reinterpret_cast<uint16_t *>(out.data());
    for (size_t i = 0; i < n; ++i)
        h[i] = t == ATTN_DTYPE_BF16 ? attn::convert::f32_to_bf16(x[i]) : attn::convert::f32_to_f16(x[i]);
    return out;
}

void decode_attn(benchmark::State &state, decode_shape s, attn_isa isa, int threads) {
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    const size_t kv_n = size_t(s.heads_kv * s.len_kv * s.dim);
    const std::vector<float> q = random_floats(size_t(s.heads * s.dim), 1);
    const std::vector<uint8_t> k = stored_values(kv_n, 2, s.kv_type), v = stored_values(kv_n, 3, s.kv_type);
    std::vector<float> out(q.size());
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, s.heads, 1, s.len_kv, s.dim);
    d.heads_kv = s.heads_kv;
    d.k.batch = d.v.batch = s.heads_kv * s.len_kv * s.dim;
    d.kv_type = s.kv_type;
    const auto call = [&] { return attn_sdpa(ctx, &d, q.data(), k.data(), v.data(), out.data()); };
    const double cpu_seconds = time_calls(state, call);
    const std::vector<byte_span> read{{k.data(), int64_t(k.size())}, {v.data(), int64_t(v.size())}};
    paired_read(state, isa, threads, read, call);
    const double kv_bytes = double(span_bytes(read));
    set_flops(state, 4.0 * double(s.heads * s.len_kv * s.dim));
    set_bytes(state, kv_bytes);
    set_bytes_per_cpu_second(state, kv_bytes * double(state.iterations()),
                             cpu_seconds, threads);
}

bool register_decode() {
    for (int64_t heads_kv : {32, 8})
        for (int64_t len_kv : {1024, 4096})
            for (attn_dtype t : {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16})
                for (attn_isa isa : simd_isas())
                    for (int threads : {1, 2}) {
                        const decode_shape s{32, heads_kv, len_kv, 128, t};
                        benchmark::RegisterBenchmark(
                            bench_name("decode", "simd", isa_name(isa), threads, s.name()).c_str(),
                            decode_attn, s, isa, threads)
                            ->UseRealTime()
                            ->Unit(benchmark::kMillisecond);
                    }
    return true;
}

const bool registered = register_decode();

}  // namespace
}  // namespace attn_bench
