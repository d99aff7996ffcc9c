// The fields of "masks and layouts of today's models", each beside the plain case in one run
// (ratios survive a noisy machine), on the best f32 level, 1 thread and 2:
//   features/simd/<isa>/threads:<n>/window_H8_L8192_D64_left1024 vs .../causal_H8_L8192_D64:
//     sliding window with causal against full causal; GFLOP/s counted on visible (query, key)
//     pairs, 4 D flops each (Q K^T and P V), so equal rates mean the window's skipped tiles
//     cost nothing.
//   features/.../{plain,softcap,alibi,sinks}_H8_L2048_D128: the cost of each score term over
//     plain attention (no causal), same flop count.
//   features/.../decode_{contiguous,paged16,paged256}_H32_KV8_Lk4096_D128: decoding one query
//     with K/V in 16- or 256-key pages scattered over a pool in random order, against the same
//     values stored contiguously; GB/s counts the K and V bytes read.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace attn_bench {
namespace {

// Visible (query, key) pairs of one head: causal, and causal with a left window.
double visible_pairs(int64_t len, int64_t window_left) {
    double pairs = 0.0;
    for (int64_t i = 0; i < len; ++i)
        pairs += double(window_left < 0 ? i + 1 : std::min<int64_t>(i + 1, window_left + 1));
    return pairs;
}

enum class variant { causal, window, plain, softcap, alibi, sinks };

void prefill(benchmark::State &state, variant which, int64_t heads, int64_t len, int64_t dim,
             attn_isa isa, int threads) {
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    const size_t n = size_t(heads * len * dim);
    const std::vector<float> q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3);
    std::vector<float> out(n);
    std::vector<float> slopes(static_cast<size_t>(heads)), sinks(static_cast<size_t>(heads), 1.0f);
    for (int64_t h = 0; h < heads; ++h) slopes[size_t(h)] = std::exp2(-8.0f * float(h + 1) / float(heads));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, heads, len, len, dim);
    double pairs = double(len) * double(len);
    switch (which) {
    case variant::causal: d.causal = ATTN_CAUSAL_TOP_LEFT, pairs = visible_pairs(len, -1); break;
    case variant::window:
        d.causal = ATTN_CAUSAL_TOP_LEFT, d.window_left = 1024, pairs = visible_pairs(len, 1024);
        break;
    case variant::softcap: d.softcap = 30.0f; break;
    case variant::alibi: d.alibi_slopes = slopes.data(); break;
    case variant::sinks: d.sinks = sinks.data(); break;
    default: break;
    }
    time_calls(state, [&] {
        return attn_sdpa_f32(ctx, &d, q.data(), k.data(), v.data(), out.data());
    });
    set_flops(state, 4.0 * double(dim) * pairs * double(heads));
}

// K or V rows [heads_kv, len, dim] copied into pages of page_size keys in a random order.
std::vector<float> paged_copy(const std::vector<float> &x, int64_t heads_kv, int64_t len,
                              int64_t dim, int64_t page_size, std::vector<int32_t> &table) {
    const int64_t pages = (len + page_size - 1) / page_size;
    table.resize(size_t(pages));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(9));
    std::vector<float> pool(size_t(pages * heads_kv * page_size * dim), 0.0f);
    for (int64_t h = 0; h < heads_kv; ++h)
        for (int64_t j = 0; j < len; ++j)
            std::copy_n(&x[size_t((h * len + j) * dim)], dim,
                        &pool[size_t(((table[size_t(j / page_size)] * heads_kv + h) * page_size +
                                      j % page_size) * dim)]);
    return pool;
}

void decode(benchmark::State &state, int64_t page_size, attn_isa isa, int threads) {
    const int64_t heads = 32, heads_kv = 8, len = 4096, dim = 128;
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    const size_t kv_n = size_t(heads_kv * len * dim);
    const std::vector<float> q = random_floats(size_t(heads * dim), 1);
    const std::vector<float> k = random_floats(kv_n, 2), v = random_floats(kv_n, 3);
    std::vector<float> out(q.size());
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, heads, 1, len, dim);
    d.heads_kv = heads_kv;
    d.k.batch = d.v.batch = heads_kv * len * dim;
    std::vector<int32_t> table;
    std::vector<float> k_pool, v_pool;
    const float *k_at = k.data(), *v_at = v.data();
    if (page_size > 0) {
        k_pool = paged_copy(k, heads_kv, len, dim, page_size, table);
        v_pool = paged_copy(v, heads_kv, len, dim, page_size, table);
        d.k = d.v = attn_layout{heads_kv * page_size * dim, page_size * dim, dim};
        d.block_table = table.data();
        d.block_table_stride = int64_t(table.size());
        d.page_size = page_size;
        d.num_pages = int64_t(table.size());
        k_at = k_pool.data(), v_at = v_pool.data();
    }
    time_calls(state, [&] {
        return attn_sdpa_f32(ctx, &d, q.data(), k_at, v_at, out.data());
    });
    set_bytes(state, 2.0 * 4.0 * double(kv_n));
}

bool register_features() {
    const std::vector<attn_isa> isas = simd_isas();
    if (isas.empty()) return false;
    const attn_isa isa = isas.back();
    for (int threads : {1, 2}) {
        const std::pair<variant, const char *> long_ones[] = {{variant::causal, "causal_H8_L8192_D64"},
                                                             {variant::window, "window_H8_L8192_D64_left1024"}};
        for (auto [which, name] : long_ones)
            benchmark::RegisterBenchmark(bench_name("features", "simd", isa_name(isa), threads, name).c_str(),
                                         prefill, which, int64_t(8), int64_t(8192), int64_t(64), isa, threads)
                ->UseRealTime()->Unit(benchmark::kMillisecond);
        const std::pair<variant, const char *> terms[] = {{variant::plain, "plain_H8_L2048_D128"},
                                                         {variant::softcap, "softcap_H8_L2048_D128"},
                                                         {variant::alibi, "alibi_H8_L2048_D128"},
                                                         {variant::sinks, "sinks_H8_L2048_D128"}};
        for (auto [which, name] : terms)
            benchmark::RegisterBenchmark(bench_name("features", "simd", isa_name(isa), threads, name).c_str(),
                                         prefill, which, int64_t(8), int64_t(2048), int64_t(128), isa, threads)
                ->UseRealTime()->Unit(benchmark::kMillisecond);
        const std::pair<int64_t, const char *> layouts[] = {{0, "decode_contiguous_H32_KV8_Lk4096_D128"},
                                                           {16, "decode_paged16_H32_KV8_Lk4096_D128"},
                                                           {256, "decode_paged256_H32_KV8_Lk4096_D128"}};
        for (auto [page, name] : layouts)
            benchmark::RegisterBenchmark(bench_name("features", "simd", isa_name(isa), threads, name).c_str(),
                                         decode, page, isa, threads)
                ->UseRealTime()->Unit(benchmark::kMillisecond);
    }
    return true;
}

const bool registered = register_features();

}  // namespace
}  // namespace attn_bench
