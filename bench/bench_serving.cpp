// A serving step of continuous batching in one call against the same work as one call per
// sequence, in one run (the ratio survives a noisy machine), on the best 16-bit level (else
// the best f32 level), 1 thread and 2:
//   serving/simd/<isa>/threads:<n>/one_call_S64_H32_KV8_D128: 64 sequences with contexts
//     spread evenly over 200..16000 keys; 8 of them prefill chunks of 512 queries, the rest
//     decoding one token; q, out and a paged KV cache (pages of 16 keys) in bf16; one
//     attn_sdpa with q_start, kv_len, the block table and ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN.
//   serving/.../per_sequence_S64_H32_KV8_D128: the same outputs, one attn_sdpa per sequence.
//   serving/.../{one_call,per_sequence}_decode_S64_H32_KV8_D128: 64 sequences decoding one
//     token each over short contexts (16..512 keys): the step where what a call costs beyond
//     its tiles (validation, plan, fork and join of the threads) shows.
// The cache pool holds 8192 pages per tensor (256 MiB each for K and V; 2048 pages for the
// decode step); each sequence's pages are drawn from it at random, so sequences may share
// pages (the reads stay those of a pool much larger than the caches). GFLOP/s counts 4 D
// flops per visible (query, key) pair.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace attn_bench {
namespace {

constexpr int64_t seqs = 64, chunk = 512;
constexpr int64_t heads = 32, heads_kv = 8, dim = 128, page = 16;

// The sequences' shape: every `every`-th sequence a prefill chunk (0: none), contexts spread
// evenly over [min_ctx, max_ctx], pages drawn from a pool of pool_pages.
struct step_shape {
    const char *name;
    int64_t every, min_ctx, max_ctx, pool_pages;
};
constexpr step_shape mixed_step{"S64_H32_KV8_D128", seqs / 8, 200, 16000, 8192};
constexpr step_shape decode_step{"decode_S64_H32_KV8_D128", 0, 16, 512, 2048};

struct serving_step {
    std::vector<int32_t> q_start, kv_len, table;
    std::vector<uint16_t> q, k_pool, v_pool, out;
    step_shape shape;
    int64_t table_stride;
    double flops = 0.0;

    explicit serving_step(const step_shape &shape)
        : shape(shape), table_stride((shape.max_ctx + page - 1) / page) {
        q_start = {0};
        std::mt19937 gen(5);
        for (int64_t b = 0; b < seqs; ++b) {
            const int64_t n = shape.every > 0 && b % shape.every == 0 ? chunk : 1;
            const int64_t ctx = shape.min_ctx + (shape.max_ctx - shape.min_ctx) * b / (seqs - 1);
            q_start.push_back(q_start.back() + int32_t(n));
            kv_len.push_back(int32_t(ctx));
            for (int64_t i = 0; i < n; ++i)  // causal at the end of the context
                flops += 4.0 * double(dim) * double(heads) * double(ctx - n + i + 1);
        }
        table.resize(size_t(seqs * table_stride));
        std::uniform_int_distribution<int32_t> pick(0, int32_t(shape.pool_pages - 1));
        for (auto &id : table) id = pick(gen);
        auto bf16 = [](const std::vector<float> &x) {
            std::vector<uint16_t> b(x.size());
            attn_convert(nullptr, int64_t(x.size()), x.data(), ATTN_DTYPE_F32, b.data(), ATTN_DTYPE_BF16);
            return b;
        };
        q = bf16(random_floats(size_t(q_start.back() * heads * dim), 1));
        const size_t pool = size_t(shape.pool_pages * heads_kv * page * dim);
        k_pool = bf16(random_floats(pool, 2));
        v_pool = bf16(random_floats(pool, 3));
        out.resize(q.size());
    }

    // The desc of sequences [first, first + count), their rows at q + q_start[first].
    attn_sdpa_desc desc(int64_t first, int64_t count) const {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, count, heads, chunk, shape.max_ctx, dim);
        d.heads_kv = heads_kv;
        d.q = d.out = attn_layout{0, dim, heads * dim};
        d.k = d.v = attn_layout{heads_kv * page * dim, page * dim, dim};
        d.q_type = d.kv_type = d.out_type = ATTN_DTYPE_BF16;
        d.kv_len = kv_len.data() + first;
        d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
        d.block_table = table.data() + first * table_stride;
        d.block_table_stride = table_stride;
        d.page_size = page;
        d.num_pages = shape.pool_pages;
        return d;
    }
};

const serving_step &step(bool decode_only) {  // each built on first use only
    if (decode_only) {
        static const serving_step decode(decode_step);
        return decode;
    }
    static const serving_step mixed(mixed_step);
    return mixed;
}

void serving(benchmark::State &state, bool one_call, bool decode_only, attn_isa isa,
             int threads) {
    attn_context *ctx = context(ATTN_IMPL_SIMD, isa, threads);
    const serving_step &s = step(decode_only);
    std::vector<uint16_t> out(s.out.size());
    const double cpu0 = process_cpu_seconds();
    for (auto _ : state) {
        if (one_call) {
            attn_sdpa_desc d = s.desc(0, seqs);
            d.q_start = s.q_start.data();
            if (!check(state, attn_sdpa(ctx, &d, s.q.data(), s.k_pool.data(), s.v_pool.data(),
                                        out.data())))
                break;
        } else {
            for (int64_t b = 0; b < seqs; ++b) {
                attn_sdpa_desc d = s.desc(b, 1);
                d.len_q = s.q_start[b + 1] - s.q_start[b];
                const int64_t at = s.q_start[b] * heads * dim;
                if (!check(state, attn_sdpa(ctx, &d, s.q.data() + at, s.k_pool.data(),
                                            s.v_pool.data(), out.data() + at)))
                    break;
            }
        }
        benchmark::ClobberMemory();
    }
    set_flops(state, s.flops);
    set_flops_per_cpu_second(state, s.flops * double(state.iterations()),
                             process_cpu_seconds() - cpu0, threads);
}

bool register_serving() {
    std::vector<attn_isa> isas = bf16_isas();
    if (isas.empty()) isas = simd_isas();
    if (isas.empty()) return false;
    const attn_isa isa = isas.back();
    for (const step_shape &shape : {mixed_step, decode_step})
        for (int threads : {1, 2})
            for (const bool one_call : {true, false})
                benchmark::RegisterBenchmark(
                    bench_name("serving", "simd", isa_name(isa), threads,
                               std::string(one_call ? "one_call_" : "per_sequence_") + shape.name)
                        .c_str(),
                    serving, one_call, shape.every == 0, isa, threads)
                    ->UseRealTime()->Unit(benchmark::kMillisecond);
    return true;
}

const bool registered = register_serving();

}  // namespace
}  // namespace attn_bench
