// Prefill over a quantized cache on bf16 pairs of its codes (the bf16_code_pairs entry of the
// avx512_bf16 level, amx_code_tiles on the amx levels, on the tiles or their model): bf16 queries with a bf16 output, one scale a row (per row, per
// head, per tensor, FP8 without scales), no zero points. Every code of every quantized type is
// a bf16 value, so the products of q with the codes are exact; each key's K scale multiplies
// its scores and its V scale multiplies P before P is rounded to bf16.
//   - With scales that are powers of two, scaling commutes with every rounding: the codes' path
//     must give the bits of the level's pair path (or tiles) over a bf16 cache holding scale *
//     code (on the levels without it, the bits of an f32 cache of those values, as prefill
//     always did), for every type and option.
//   - With any scales: against float64 on the dequantized values under attn.h's rule, the
//     yardstick being the plain computation with P rounded to bf16 and the output rounded once.
//   - Paged (scales in the pages) and across thread counts: the same bits.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/convert.hpp"
#include "kernels/kernels.hpp"
#include "ops/sdpa_plan.hpp"
#include "quantized_problem.hpp"

namespace {

using namespace attn_test;
namespace convert = attn::convert;

std::vector<uint16_t> to_bf16(const std::vector<float> &x) {
    std::vector<uint16_t> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = convert::f32_to_bf16(x[i]);
    return out;
}

std::vector<float> from_bf16(const std::vector<uint16_t> &x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = convert::bf16_to_f32(x[i]);
    return out;
}

// A problem over a cache without zero points, q rounded to bf16 (the oracle sees those values).
problem pairs_problem(attn_dtype t, granularity g, int64_t len_q, int64_t len_kv, uint32_t seed,
                      bool power_of_two, int64_t Hq = 4) {
    problem p;
    const int64_t B = 2, Hkv = 2, Dk = 64, Dv = 32;
    p.d = make_desc(B, Hq, Hkv, len_q, len_kv, Dk, Dv);
    p.d.q_type = ATTN_DTYPE_BF16;
    p.d.out_type = ATTN_DTYPE_BF16;
    p.q = from_bf16(to_bf16(random_tensor(size_t(B * Hq * len_q * Dk), seed, -1.0f, 1.0f)));
    p.k = make_side(t, g, false, B, Hkv, len_kv, Dk, seed + 1, power_of_two);
    p.v = make_side(t, g, false, B, Hkv, len_kv, Dv, seed + 2, power_of_two);
    point_at_cache(p.d, t, p.k, p.v);
    return p;
}

struct outputs {
    std::vector<uint16_t> out;
    std::vector<float> lse, weights;
};

// attn_sdpa on k, v (the desc's kv_type), out in bf16; lse and weights when the desc asks.
outputs run_bf16(attn_context *ctx, attn_sdpa_desc d, const std::vector<float> &q, const void *k,
                 const void *v) {
    outputs o;
    o.out.assign(size_t(d.batch * d.heads_q * d.len_q * d.dim_v), 0xffff);
    if (d.lse) {
        o.lse.assign(size_t(d.batch * d.heads_q * d.len_q), NAN);
        d.lse = o.lse.data();
    }
    if (d.weights) {
        o.weights.assign(size_t(d.batch * d.heads_q * d.len_q * d.len_kv), NAN);
        d.weights = o.weights.data();
    }
    const std::vector<uint16_t> q16 = to_bf16(q);
    EXPECT_EQ(attn_sdpa(ctx, &d, q16.data(), k, v, o.out.data()), ATTN_OK) << attn_last_error();
    return o;
}

bool same_bits(const outputs &a, const outputs &b) {
    return a.out == b.out && bitwise_equal(a.lse, b.lse) && bitwise_equal(a.weights, b.weights);
}

// The desc over a dense cache of the values, in kv type `t` (BF16 or F32), without scales.
attn_sdpa_desc over_values(attn_sdpa_desc d, attn_dtype t) {
    d.kv_type = t;
    d.k_scale = d.v_scale = d.k_zero = d.v_zero = nullptr;
    d.k_scale_strides = d.v_scale_strides = attn_layout{0, 0, 0};
    d.k_group = d.v_group = 0;
    return d;
}

// The level's entry for the codes' calls (bf16_code_pairs, or amx_code_tiles), if it has one.
bool has_code_pairs(const path &at) {
    if (at.impl != ATTN_IMPL_SIMD) return false;
    const attn::kernels::attention_impl &e =
        attn::kernels::kernel_table_for(at.isa)->attention_impls.choose(64, {false, true});
    return e.code_pairs;
}

const granularity kRowScales[] = {granularity::per_row, granularity::per_head, granularity::per_tensor};

// The calls that may pair the codes, and the entry that takes them.
TEST(sdpa_quantized_pairs, which_calls_take_the_codes_path) {
    problem p = pairs_problem(ATTN_DTYPE_I8, granularity::per_row, 33, 77, 1, false);
    using attn::ops::call_products_of;
    EXPECT_TRUE(call_products_of(ATTN_FPMATH_STRICT, p.d).code_pairs);
    EXPECT_FALSE(call_products_of(ATTN_FPMATH_STRICT, p.d).pairs);
    attn_sdpa_desc d = p.d;
    d.out_type = ATTN_DTYPE_F32;  // P's rounding is not within an f32 output's units
    EXPECT_FALSE(call_products_of(ATTN_FPMATH_STRICT, d).code_pairs);
    EXPECT_TRUE(call_products_of(ATTN_FPMATH_BF16, d).code_pairs);
    d = p.d;
    d.q_type = ATTN_DTYPE_F32;
    EXPECT_FALSE(call_products_of(ATTN_FPMATH_STRICT, d).code_pairs);
    d = p.d;
    d.k_zero = p.k.scale.data();  // zero points: codes minus a zero are not bf16 values
    EXPECT_FALSE(call_products_of(ATTN_FPMATH_STRICT, d).code_pairs);
    d = p.d;
    d.v_group = 16;  // scales inside a row cannot leave the products
    EXPECT_FALSE(call_products_of(ATTN_FPMATH_STRICT, d).code_pairs);
    EXPECT_FALSE(call_products_of(ATTN_FPMATH_STRICT, over_values(p.d, ATTN_DTYPE_BF16)).code_pairs);
    // the plan gives the prefill, and a decoding step of 16 heads a KV head as the tile's rows,
    // to the codes' entry
    const attn::kernels::kernel_table *bf16_level = attn::kernels::kernel_table_for(ATTN_ISA_AVX512_BF16);
    for (const int64_t heads : {4, 32}) {
        const problem decode = pairs_problem(ATTN_DTYPE_I8, granularity::per_row, heads == 4 ? 33 : 1, 77, 2,
                                             false, heads);
        const attn::ops::plan_kernels k{&bf16_level->attention_impls, bf16_level->vector_floats,
                                        call_products_of(ATTN_FPMATH_STRICT, decode.d)};
        const attn::ops::sdpa_plan plan = attn::ops::plan_sdpa(decode.d, k, 2);
        ASSERT_FALSE(plan.sequences.empty());
        EXPECT_STREQ(plan.sequences[0].impl->name, "bf16_code_pairs") << heads << " heads";
        EXPECT_EQ(plan.sequences[0].heads_as_rows, heads == 32);
    }
    for (attn_isa isa : {ATTN_ISA_AVX512_BF16, ATTN_ISA_AMX, ATTN_ISA_AMX_EMULATED}) {
        const attn::kernels::kernel_table *kt = attn::kernels::kernel_table_for(isa);
        if (kt == nullptr) continue;
        const bool tiles = isa != ATTN_ISA_AVX512_BF16;
        EXPECT_STREQ(kt->attention_impls.choose(33, {false, true}).name,
                     tiles ? "amx_code_tiles" : "bf16_code_pairs") << isa;
        EXPECT_STREQ(kt->attention_impls.choose(1, {false, true}).name, "decode") << isa;
        // under ATTN_FPMATH_BF16 both are allowed: the values' pairs come first
        EXPECT_STREQ(kt->attention_impls.choose(33, {true, true}).name,
                     tiles ? "amx_tiles" : "bf16_pairs") << isa;
    }
}

// Power-of-two scales: the bits of the values' own path, every type, row-scale granularity and
// option (masks, kv_len and the causal alignments, GQA, windows, softcap, ALiBi, sinks,
// dropout, lse and weights), prefill of 33 rows over 77 keys and of 20 over 1500 (split keys),
// and a decoding step of 16 query heads a KV head (the heads as the tile's rows).
TEST(sdpa_quantized_pairs, power_of_two_scales_give_the_bits_of_the_values) {
    const int32_t kv_len[2] = {50, 77};
    const float sinks[8] = {0.5f, -1.0f, 2.0f, -0.25f, 1.0f, 0.0f, -2.0f, 0.75f};
    const std::vector<float> slopes = alibi_geometric(8);
    const std::vector<path> paths = all_paths();
    uint32_t seed = 300;
    int variant = 0;
    for (attn_dtype t : kTypes)
        for (int v = 0; v < 6; ++v, ++variant) {
            const granularity g = is_fp8(t) && v == 4 ? granularity::no_scale : kRowScales[variant % 3];
            const int64_t len_q = v == 4 ? 20 : v == 5 ? 1 : 33, len_kv = v == 4 ? 1500 : 77;
            const int64_t Hq = v == 2 ? 8 : v == 5 ? 32 : 4;
            problem p = pairs_problem(t, g, len_q, len_kv, seed += 7, true, Hq);
            std::vector<float> mask = random_tensor(size_t(2 * Hq * len_q * len_kv), seed, -1.0f, 1.0f);
            attn_sdpa_desc &d = p.d;
            if (v == 1) {
                d.kv_len = kv_len;
                d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
                d.mask = mask.data();
                d.mask_strides = {Hq * len_q * len_kv, len_q * len_kv, len_kv};
                d.softcap = 3.0f;
                d.lse = d.weights = mask.data();  // run_bf16 gives them their own arrays
            } else if (v == 2) {
                d.window_left = 20;
                d.alibi_slopes = slopes.data();
                d.sinks = sinks;
            } else if (v == 3) {
                d.causal = ATTN_CAUSAL_TOP_LEFT;
                d.window_right = 5;
                d.dropout_p = 0.2f;
                d.dropout_seed = 7;
                d.lse = mask.data();
            }
            const std::vector<uint16_t> k16 = to_bf16(p.k.f32), v16 = to_bf16(p.v.f32);
            ASSERT_EQ(from_bf16(k16), p.k.f32) << "scale * code is a bf16 value";
            ASSERT_EQ(from_bf16(v16), p.v.f32);
            const std::string what = "type " + std::to_string(t) + ", " + granularity_name(g) +
                                     ", variant " + std::to_string(v);
            for (const path &at : paths) {
                auto ctx = make_context(at.impl, at.isa);
                const outputs got = run_bf16(ctx.get(), d, p.q, p.k.bytes.data(), p.v.bytes.data());
                outputs want;
                if (has_code_pairs(at)) {  // the level's pair path (or tiles) of the bf16 values
                    want = run_bf16(ctx.get(), over_values(d, ATTN_DTYPE_BF16), p.q, k16.data(), v16.data());
                } else {
                    want = run_bf16(ctx.get(), over_values(d, ATTN_DTYPE_F32), p.q, p.k.f32.data(), p.v.f32.data());
                }
                EXPECT_TRUE(same_bits(got, want)) << at.name << ", " << what;
            }
        }
}

// Any scales: against float64 on the dequantized values, at most twice the error of the plain
// computation (q and out in bf16, K and V dequantized in f32, P rounded to bf16, products
// summed in f32) plus 2 units in the last place of bf16 (2^-7 at 1).
TEST(sdpa_quantized_pairs, any_scales_within_the_rule) {
    const std::vector<path> paths = all_paths();
    uint32_t seed = 700;
    for (attn_dtype t : kTypes)
        for (granularity g : kRowScales)
            for (int64_t len_kv : {77, 600}) {
                const problem p = pairs_problem(t, g, 33, len_kv, seed += 5, false);
                const std::vector<double> want = sdpa_features_double(p.d, to_double(p.q), p.k.f64, p.v.f64);
                std::vector<float> plain = sdpa_features_in<float>(p.d, p.q, p.k.f32, p.v.f32, nullptr, nullptr,
                                                                   nullptr, true);
                plain = from_bf16(to_bf16(plain));
                const double tol = 2.0 * max_rel_error(plain, want) + 2.0 / 128.0;
                for (const path &at : paths) {
                    auto ctx = make_context(at.impl, at.isa);
                    const outputs got = run_bf16(ctx.get(), p.d, p.q, p.k.bytes.data(), p.v.bytes.data());
                    EXPECT_LE(max_rel_error(from_bf16(got.out), want), tol)
                        << at.name << ", type " << t << ", " << granularity_name(g) << ", len_kv " << len_kv;
                }
            }
}

// Paged, the scales in the pages (page size 16, the pages shuffled in a pool), gives the bits
// of the contiguous cache; and 1, 2, 3 threads give the same bits.
TEST(sdpa_quantized_pairs, paged_and_threads_same_bits) {
    for (attn_dtype t : {ATTN_DTYPE_I8, ATTN_DTYPE_I4, ATTN_DTYPE_FP8_E4M3}) {
        const problem p = pairs_problem(t, granularity::per_row, 33, 77, 5000 + uint32_t(t), false);
        const paged_cache paged = page_cache(p, 16);
        for (const path &at : all_paths()) {
            auto ctx = make_context(at.impl, at.isa);
            const outputs dense = run_bf16(ctx.get(), p.d, p.q, p.k.bytes.data(), p.v.bytes.data());
            EXPECT_TRUE(same_bits(dense, run_bf16(ctx.get(), paged.d, p.q, paged.k.data(), paged.v.data())))
                << at.name << ", type " << t << ", paged";
            if (at.impl != ATTN_IMPL_SIMD) continue;
            for (int threads : {2, 3}) {
                auto more = make_context(at.impl, at.isa, threads);
                EXPECT_TRUE(same_bits(dense, run_bf16(more.get(), p.d, p.q, p.k.bytes.data(), p.v.bytes.data())))
                    << at.name << ", type " << t << ", " << threads << " threads";
            }
        }
    }
}

}  // namespace
