// The fused attention forward on AMX tiles (src/kernels/amx/attention_amx.hpp), on the real
// tiles (amx) and on the tile model (amx_emulated, any CPU with avx512_bf16), with bf16 q, k
// and v so that the bf16-pair path runs: every option against a float64 oracle, the model
// against the tiles bit for bit, and bitwise equal for 1, 2 and 3 threads. A level this CPU
// lacks is skipped by name. Shapes stay small: the model computes each tile product in
// scalar code.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"
#include "test_features_util.hpp"
#include "test_util.hpp"

namespace {

uint16_t to_bf16(float x) {  // round to nearest even (NaN kept a quiet NaN)
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (std::isnan(x)) return 0x7fc0;
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
double from_bf16(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}
float half_to_float(uint16_t h) { return float(from_bf16(h)); }  // out_type bf16

// One case: the descriptor's options, filled in by `setup` on a desc already sized.
struct amx_case {
    const char *name;
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v;
    void (*setup)(attn_sdpa_desc &d);
    bool bf16_out = false;
    int64_t page_size = 0;  // > 0: K and V in a pool of pages (dim_qk == dim_v)
    bool f32_fpmath_bf16 = false;  // q, k, v passed as f32 under ATTN_FPMATH_BF16
};

const int32_t kv_lens[2] = {61, 30};
const float sinks4[4] = {0.5f, -1.0f, 2.0f, -INFINITY};
std::vector<float> mask_values;  // [len_q, len_kv] broadcast over batch and heads

const amx_case cases[] = {
    {"plain", 1, 2, 2, 40, 70, 64, 64, [](attn_sdpa_desc &) {}},
    {"causal_two_query_tiles", 1, 1, 1, 100, 100, 64, 64,
     [](attn_sdpa_desc &d) { d.causal = ATTN_CAUSAL_TOP_LEFT; }},
    {"gqa_window_softcap_alibi_sinks", 1, 4, 2, 37, 90, 64, 64,
     [](attn_sdpa_desc &d) {
         static const std::vector<float> slopes = attn_test::alibi_geometric(4);
         d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
         d.window_left = 20;
         d.softcap = 5.0f;
         d.alibi_slopes = slopes.data();
         d.sinks = sinks4;
     }},
    {"mask_dropout_kv_len", 2, 1, 1, 33, 64, 32, 48,
     [](attn_sdpa_desc &d) {
         d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
         d.kv_len = kv_lens;
         d.mask = mask_values.data();
         d.mask_strides = {0, 0, d.len_kv};
         d.dropout_p = 0.25f;
         d.dropout_seed = 7;
     }},
    {"paged_bf16_out", 2, 2, 1, 20, 75, 64, 64, [](attn_sdpa_desc &) {}, true, 16},
    {"split_keys", 1, 1, 1, 8, 1100, 64, 64, [](attn_sdpa_desc &) {}},
    // f32 inputs (the same values, so the rounding to bf16 leaves them) under fpmath bf16
    {"f32_fpmath_bf16_window", 1, 2, 1, 50, 80, 64, 32,
     [](attn_sdpa_desc &d) {
         d.window_left = 9;
         d.window_right = 3;
     },
     false, 0, true},
    {"latent_dims_576_512_causal", 1, 4, 1, 20, 40, 576, 512,
     [](attn_sdpa_desc &d) { d.causal = ATTN_CAUSAL_BOTTOM_RIGHT; }},
    {"dim_40_below_whole_tiles", 1, 1, 1, 24, 50, 40, 40,
     [](attn_sdpa_desc &d) { d.causal = ATTN_CAUSAL_TOP_LEFT; }},
};

struct inputs {
    std::vector<uint16_t> q, k, v;   // dense, bf16 (K, V rows hidden by kv_len: NaN)
    std::vector<double> qd, kd, vd;  // the same values
    std::vector<uint16_t> pool;      // paged: [pages, heads_kv, page_size, dim]
    std::vector<int32_t> table;
    int64_t pages = 0;
};

inputs make_inputs(const amx_case &c, const attn_sdpa_desc &d) {
    inputs in;
    auto fill = [](size_t n, uint32_t seed, std::vector<uint16_t> &h, std::vector<double> &x) {
        for (float f : attn_test::random_tensor(n, seed, -2.0f, 2.0f)) {
            h.push_back(to_bf16(f));
            x.push_back(from_bf16(h.back()));
        }
    };
    fill(size_t(c.batch * c.heads_q * c.len_q * c.dim_qk), 11, in.q, in.qd);
    fill(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_qk), 12, in.k, in.kd);
    fill(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_v), 13, in.v, in.vd);
    if (d.kv_len)  // rows past kv_len are never read: NaN there must not reach the output
        for (int64_t b = 0; b < c.batch; ++b)
            for (int64_t h = 0; h < c.heads_kv; ++h)
                for (int64_t j = d.kv_len[b]; j < c.len_kv; ++j) {
                    const int64_t row = (b * c.heads_kv + h) * c.len_kv + j;
                    for (int64_t e = 0; e < c.dim_qk; ++e) in.k[size_t(row * c.dim_qk + e)] = 0x7fc0;
                    for (int64_t e = 0; e < c.dim_v; ++e) in.v[size_t(row * c.dim_v + e)] = 0x7fc0;
                }
    if (c.page_size > 0) {  // pages of every batch in a shuffled order, spare pages NaN
        const int64_t per = (c.len_kv + c.page_size - 1) / c.page_size;
        in.pages = c.batch * per + 2;
        std::vector<int32_t> ids(size_t(in.pages));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
        in.table.assign(ids.begin(), ids.begin() + c.batch * per);
        const int64_t page_elems = c.heads_kv * c.page_size * c.dim_qk;
        in.pool.assign(size_t(2 * in.pages * page_elems), 0x7fc0);  // K pool, then V pool
        for (int64_t b = 0; b < c.batch; ++b)
            for (int64_t h = 0; h < c.heads_kv; ++h)
                for (int64_t j = 0; j < c.len_kv; ++j) {
                    const int64_t page = in.table[size_t(b * per + j / c.page_size)];
                    const int64_t at = (page * c.heads_kv + h) * c.page_size + j % c.page_size;
                    const int64_t row = (b * c.heads_kv + h) * c.len_kv + j;
                    std::memcpy(&in.pool[size_t(at * c.dim_qk)], &in.k[size_t(row * c.dim_qk)], 2 * size_t(c.dim_qk));
                    std::memcpy(&in.pool[size_t(in.pages * page_elems + at * c.dim_qk)],
                                &in.v[size_t(row * c.dim_qk)], 2 * size_t(c.dim_qk));
                }
    }
    return in;
}

attn_sdpa_desc desc_of(const amx_case &c) {
    attn_sdpa_desc d = attn_test::make_desc(c.batch, c.heads_q, c.heads_kv, c.len_q, c.len_kv, c.dim_qk, c.dim_v);
    d.q_type = d.kv_type = ATTN_DTYPE_BF16;
    d.out_type = c.bf16_out ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
    mask_values = attn_test::random_tensor(size_t(c.len_q * c.len_kv), 14, -1.0f, 1.0f);
    mask_values[3] = -INFINITY;
    c.setup(d);
    return d;
}

struct result {
    std::vector<float> out, lse, weights;
};

result run(attn_isa isa, int threads, const amx_case &c, const inputs &in) {
    attn_sdpa_desc d = desc_of(c);
    result r;
    r.out.assign(size_t(c.batch * c.heads_q * c.len_q * c.dim_v), 0.0f);
    r.lse.assign(size_t(c.batch * c.heads_q * c.len_q), 0.0f);
    r.weights.assign(size_t(c.batch * c.heads_q * c.len_q * c.len_kv), 0.0f);
    d.lse = r.lse.data();
    d.weights = r.weights.data();
    const void *k = in.k.data(), *v = in.v.data();
    if (c.page_size > 0) {
        const attn_layout pages{c.heads_kv * c.page_size * c.dim_qk, c.page_size * c.dim_qk, c.dim_qk};
        d.k = d.v = pages;
        d.block_table = in.table.data();
        d.block_table_stride = (c.len_kv + c.page_size - 1) / c.page_size;
        d.page_size = c.page_size;
        d.num_pages = in.pages;
        k = in.pool.data();
        v = in.pool.data() + in.pages * c.heads_kv * c.page_size * c.dim_qk;
    }
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = ATTN_IMPL_SIMD;
    cfg.max_isa = isa;
    cfg.num_threads = threads;
    std::vector<float> q32, k32, v32;
    const void *q = in.q.data();
    if (c.f32_fpmath_bf16) {
        cfg.fpmath = ATTN_FPMATH_BF16;
        d.q_type = d.kv_type = ATTN_DTYPE_F32;
        q32.assign(in.qd.begin(), in.qd.end());
        k32.assign(in.kd.begin(), in.kd.end());
        v32.assign(in.vd.begin(), in.vd.end());
        q = q32.data();
        k = k32.data();
        v = v32.data();
    }
    attn_context *raw = nullptr;
    EXPECT_EQ(attn_context_create(&cfg, &raw), ATTN_OK) << attn_last_error();
    const attn_test::context_ptr ctx(raw);
    if (!ctx) return r;
    std::vector<uint16_t> out16(r.out.size());
    void *out = c.bf16_out ? static_cast<void *>(out16.data()) : r.out.data();
    EXPECT_EQ(attn_sdpa(ctx.get(), &d, q, k, v, out), ATTN_OK) << attn_last_error();
    if (c.bf16_out)
        for (size_t i = 0; i < out16.size(); ++i) r.out[i] = half_to_float(out16[i]);
    return r;
}

double normwise(const std::vector<float> &got, const std::vector<double> &want) {
    double e = 0.0, n = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double w = std::isinf(want[i]) ? 0.0 : want[i];
        const double g = std::isinf(want[i]) && double(got[i]) == want[i] ? 0.0 : double(got[i]);
        e += (g - w) * (g - w);
        n += w * w;
    }
    return std::sqrt(e / (n > 0.0 ? n : 1.0));
}

// The rule of test_precision.cpp with the bf16-pair path (avx512_bf16: exact products of the
// stored values summed in f32, P rounded to bf16 before P V) as the yardstick: the error of
// each output against float64 at most twice the yardstick's, or 2e-6 (the two sum the same
// products in different orders and round P at the same point).
void expect_rule(const std::string &what, const std::vector<float> &got,
                 const std::vector<float> &yardstick, const std::vector<double> &exact) {
    const double e_got = normwise(got, exact), e_yard = normwise(yardstick, exact);
    if (std::getenv("ATTN_PRECISION_PRINT"))
        std::printf("  %-8s tiles %.3g  bf16 pairs %.3g%s\n", what.c_str(), e_got, e_yard,
                    attn_test::bitwise_equal(got, yardstick) ? "  (same bits)" : "");
    EXPECT_LE(e_got, std::max(2.0 * e_yard, 2e-6)) << what << ": " << e_got << " yardstick " << e_yard;
}

void check_level(attn_isa isa, const char *name) {
    if (!attn::kernels::isa_supported(isa))
        GTEST_SKIP() << name << ": this CPU (or its OS) lacks the level";
    // the tile kernels, not the pair kernels of the level below: its list has amx_tiles, tried
    // where the level below tries bf16_pairs
    const attn::kernels::attention_impl_list &impls =
        attn::kernels::kernel_table_for(isa)->attention_impls;
    ASSERT_STREQ(impls.choose(64, true).name, "amx_tiles");
    ASSERT_STREQ(impls.choose(64, false).name, "f32_tiles");
    ASSERT_STREQ(impls.choose(1, true).name, "decode");
    ASSERT_STREQ(attn::kernels::kernel_table_for(ATTN_ISA_AVX512_BF16)->attention_impls.choose(64, true).name,
                 "bf16_pairs");
    for (const amx_case &c : cases) {
        SCOPED_TRACE(std::string(name) + " " + c.name);
        const attn_sdpa_desc d = desc_of(c);
        const inputs in = make_inputs(c, d);
        std::vector<double> lse, weights;
        const std::vector<double> exact =
            attn_test::sdpa_features_double(d, in.qd, in.kd, in.vd, &lse, &weights);
        const result yard = run(ATTN_ISA_AVX512_BF16, 1, c, in), one = run(isa, 1, c, in);
        expect_rule("out", one.out, yard.out, exact);
        expect_rule("lse", one.lse, yard.lse, lse);
        expect_rule("weights", one.weights, yard.weights, weights);
        for (int threads : {2, 3}) {
            const result more = run(isa, threads, c, in);
            EXPECT_TRUE(attn_test::bitwise_equal(one.out, more.out)) << "threads " << threads;
            EXPECT_TRUE(attn_test::bitwise_equal(one.lse, more.lse)) << "threads " << threads;
            EXPECT_TRUE(attn_test::bitwise_equal(one.weights, more.weights)) << "threads " << threads;
        }
    }
}

TEST(sdpa_amx, amx_emulated_oracle_and_threads) { check_level(ATTN_ISA_AMX_EMULATED, "amx_emulated"); }
TEST(sdpa_amx, amx_oracle_and_threads) { check_level(ATTN_ISA_AMX, "amx"); }

// The model is the tiles: every case gives the same bits on both.
TEST(sdpa_amx, model_equals_the_real_tiles_bitwise) {
    if (!attn::kernels::isa_supported(ATTN_ISA_AMX))
        GTEST_SKIP() << "amx: this CPU (or its OS) lacks the tiles; amx_emulated alone is tested";
    for (const amx_case &c : cases) {
        SCOPED_TRACE(c.name);
        const inputs in = make_inputs(c, desc_of(c));
        const result hw = run(ATTN_ISA_AMX, 2, c, in), model = run(ATTN_ISA_AMX_EMULATED, 2, c, in);
        EXPECT_TRUE(attn_test::bitwise_equal(hw.out, model.out));
        EXPECT_TRUE(attn_test::bitwise_equal(hw.lse, model.lse));
        EXPECT_TRUE(attn_test::bitwise_equal(hw.weights, model.weights));
    }
}

}  // namespace
