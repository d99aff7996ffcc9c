// Attention over quantized K/V caches (I8, U8, I4, U4, FP8 E4M3, FP8 E5M2), forward, on the
// reference and every SIMD level: every type x scale granularity (per row, per group of 32,
// per channel, per head, per tensor; FP8 also without scales), with and without zero points,
// decoding (1 query row, the bandwidth kernel), prefill (the tile loop), split-key decoding
// (long caches: chunks merged), paged caches with their scales in the pages, and the score
// options of today's models. Oracle: float64 attention (tests/test_features_util.hpp) on the
// dequantized values, each x = scale * (q - zero) computed in float64 from the stored code.
// Tolerance (attn.h's rule for quantized caches): at most twice the error of the plain
// computation that dequantizes to f32 and computes in f32 (the reference on an f32 cache
// holding the f32-dequantized values, measured against the same oracle), plus 4 units in the
// last place of the f32 output (max |got - want| / (1 + |want|), so 4 * FLT_EPSILON).
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <xmmintrin.h>

#include "quantized_problem.hpp"

namespace {

using namespace attn_test;

class sdpa_quantized : public path_test {
protected:
    // Decoding one query head per KV head (2 over 2, 300 keys: blocks of the scores' 16 keys and
    // the P V's 64, rows prefetched past the last key) over a cache of type t, granularity g,
    // rows of dim, against float64 at the tolerance rule.
    void expect_one_row_decode(attn_dtype t, granularity g, bool zeros, int64_t dim, uint32_t seed) {
        const problem p = make_problem(t, g, zeros, 1, 300, seed, 2, dim, dim);
        const std::vector<float> got = run(ctx(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
        EXPECT_LE(max_rel_error(got, p.want), tolerance(p))
            << "type " << t << ", " << granularity_name(g) << (zeros ? ", zero points" : "") << ", D " << dim
            << " (plain f32 error " << p.plain_error << ")";
    }
};

// Every type x granularity x zero points, decoding (1 query row), a few rows (9: the decode
// entry's tiles of 4) and prefill (prefill_rows), on this path. The zero points go with the
// integer types; scale NULL with FP8 only.
TEST_P(sdpa_quantized, every_type_and_granularity) {
    uint32_t seed = 100;
    for (attn_dtype t : kTypes)
        for (granularity g : kGranularities)
            for (int zeros = 0; zeros < 2; ++zeros) {
                if ((zeros && is_fp8(t)) || (g == granularity::no_scale && !is_fp8(t))) continue;
                for (int64_t len_q : {int64_t(1), int64_t(9), prefill_rows}) {
                    const problem p = make_problem(t, g, zeros != 0, len_q, 77, seed += 3);
                    const std::vector<float> got = run(ctx(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
                    EXPECT_LE(max_rel_error(got, p.want), tolerance(p))
                        << "type " << t << ", " << granularity_name(g) << (zeros ? ", zero points" : "")
                        << ", len_q " << len_q << " (plain f32 error " << p.plain_error << ")";
                }
            }
}

// Long caches: decoding splits the keys into chunks merged afterwards, a few rows, and a
// prefill; I8 per row with zero points, I4 per group, FP8 per channel.
TEST_P(sdpa_quantized, split_keys) {
    const struct {
        attn_dtype t;
        granularity g;
        bool zeros;
    } cases[] = {{ATTN_DTYPE_I8, granularity::per_row, true},
                 {ATTN_DTYPE_I4, granularity::group32, false},
                 {ATTN_DTYPE_FP8_E4M3, granularity::per_channel, false}};
    uint32_t seed = 900;
    for (const auto &c : cases)
        for (int64_t len_q : {int64_t(1), int64_t(6), prefill_rows}) {
            const problem p = make_problem(c.t, c.g, c.zeros, len_q, 1500, seed += 3);
            const std::vector<float> got = run(ctx(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
            EXPECT_LE(max_rel_error(got, p.want), tolerance(p))
                << "type " << c.t << ", " << granularity_name(c.g) << ", len_q " << len_q;
        }
}

// The options of attn_sdpa_desc with a quantized cache: mask, kv_len and the causal
// alignments, GQA, dropout, weights and lse, windows, softcap, ALiBi, sinks; out, lse and
// weights against the float64 oracle under the same rule.
TEST_P(sdpa_quantized, every_option) {
    const int32_t kv_len[2] = {50, 77};
    const float sinks[4] = {0.5f, -1.0f, 2.0f, -0.25f};
    const std::vector<float> slopes = alibi_geometric(4);
    uint32_t seed = 2000;
    for (int variant = 0; variant < 4; ++variant)
        for (int64_t len_q : {int64_t(1), int64_t(3), int64_t(9), prefill_rows}) {
            problem p = make_problem(variant % 2 ? ATTN_DTYPE_U4 : ATTN_DTYPE_I8,
                                     variant < 2 ? granularity::per_row : granularity::per_channel,
                                     true, len_q, 77, seed += 3);
            std::vector<float> mask = random_tensor(size_t(2 * 4 * len_q * 77), seed, -1.0f, 1.0f);
            attn_sdpa_desc &d = p.d;
            d.kv_len = kv_len;
            d.causal = variant == 0 ? ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN : ATTN_CAUSAL_TOP_LEFT;
            if (variant == 3) d.causal = ATTN_CAUSAL_NONE;
            d.mask = mask.data();
            d.mask_strides = {4 * len_q * 77, len_q * 77, 77};
            d.window_left = variant == 2 ? 20 : -1;
            d.window_right = variant == 3 ? 5 : -1;
            d.softcap = variant == 1 ? 3.0f : 0.0f;
            d.alibi_slopes = variant >= 2 ? slopes.data() : nullptr;
            d.sinks = variant % 2 ? sinks : nullptr;
            d.dropout_p = variant == 3 ? 0.2f : 0.0f;
            d.dropout_seed = 7;
            std::vector<float> lse(size_t(2 * 4 * len_q)), weights(size_t(2 * 4 * len_q * 77));
            d.lse = lse.data();
            d.weights = weights.data();
            std::vector<double> want_lse, want_weights;
            p.want = sdpa_features_double(d, to_double(p.q), p.k.f64, p.v.f64, &want_lse, &want_weights);
            p.plain_error = max_rel_error(plain_f32(d, p), p.want);
            const std::vector<float> got = run(ctx(), d, p, p.k.bytes.data(), p.v.bytes.data());
            const std::string what = "variant " + std::to_string(variant) + ", len_q " + std::to_string(len_q);
            EXPECT_LE(max_rel_error(got, p.want), tolerance(p)) << what;
            // lse and the weights: the scores' own rounding, no V (a few ulp of their size)
            EXPECT_LE(lse_error(lse, want_lse), 64.0 * FLT_EPSILON) << what;
            EXPECT_LE(max_rel_error(weights, want_weights), 64.0 * FLT_EPSILON) << what;
        }
}

// Decoding with rows of 128 (whole blocks of the P V registers: the 4-bit tables, the E4M3
// codes read as f32 bits) and 4 query heads per KV head (the scores' widest blocking), every type
// per row and per group of 32, the integer types with zero points too.
TEST_P(sdpa_quantized, decode_long_rows) {
    uint32_t seed = 5000;
    for (attn_dtype t : kTypes)
        for (granularity g : {granularity::per_row, granularity::group32})
            for (int zeros = 0; zeros < (is_fp8(t) ? 1 : 2); ++zeros) {
                const problem p = make_problem(t, g, zeros != 0, 1, 77, seed += 3, 8, 128, 128);
                const std::vector<float> got = run(ctx(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
                EXPECT_LE(max_rel_error(got, p.want), tolerance(p))
                    << "type " << t << ", " << granularity_name(g) << (zeros ? ", zero points" : "");
            }
}

// Decoding with one query head per KV head (a single row per pass: q held in registers over
// rows of 64 and 128, K read key by key, P V over 8 vectors a pass, a group's scale once per
// pair of vectors), every type and granularity, with and without zero points.
TEST_P(sdpa_quantized, decode_one_row_per_kv_head) {
    uint32_t seed = 9000;
    for (int64_t dim : {64, 128})
        for (attn_dtype t : kTypes)
            for (granularity g : kGranularities)
                for (int zeros = 0; zeros < 2; ++zeros) {
                    if ((zeros && is_fp8(t)) || (g == granularity::no_scale && !is_fp8(t))) continue;
                    expect_one_row_decode(t, g, zeros != 0, dim, seed += 3);
                }
}

// Scales one a row stored key-major ([batch, len, heads]: rows of one head heads floats apart,
// as an engine appending a token's scales for every head at once stores them), decoding one
// row per KV head (the passes read such scales by stride): the same bits as with the same
// scales stored head-major, for the types whose scale meets the sums and P (I8, I4, E4M3),
// and through the row readers with zero points.
TEST_P(sdpa_quantized, decode_one_row_key_major_scales) {
    uint32_t seed = 9500;
    for (attn_dtype t : {ATTN_DTYPE_I8, ATTN_DTYPE_I4, ATTN_DTYPE_FP8_E4M3})
        for (int zeros = 0; zeros < (is_fp8(t) ? 1 : 2); ++zeros) {
            problem p = make_problem(t, granularity::per_row, zeros != 0, 1, 300, seed += 3, 2, 128, 128);
            const std::vector<float> head_major = run(ctx(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
            const int64_t B = p.d.batch, H = p.d.heads_kv, L = p.d.len_kv;
            const auto key_major = [&](const std::vector<float> &x) {
                std::vector<float> y(x.size());
                for (int64_t b = 0; b < B; ++b)
                    for (int64_t h = 0; h < H; ++h)
                        for (int64_t j = 0; j < L; ++j) y[size_t((b * L + j) * H + h)] = x[size_t((b * H + h) * L + j)];
                return y;
            };
            const std::vector<float> ks = key_major(p.k.scale), vs = key_major(p.v.scale);
            const std::vector<float> kz = zeros ? key_major(p.k.zero) : std::vector<float>{};
            const std::vector<float> vz = zeros ? key_major(p.v.zero) : std::vector<float>{};
            attn_sdpa_desc d = p.d;
            d.k_scale = ks.data();
            d.v_scale = vs.data();
            d.k_zero = zeros ? kz.data() : nullptr;
            d.v_zero = zeros ? vz.data() : nullptr;
            d.k_scale_strides = d.v_scale_strides = attn_layout{L * H, 1, H};
            const std::vector<float> got = run(ctx(), d, p, p.k.bytes.data(), p.v.bytes.data());
            EXPECT_EQ(got, head_major) << "type " << t << (zeros ? ", zero points" : "");
            EXPECT_LE(max_rel_error(got, p.want), tolerance(p)) << "type " << t << (zeros ? ", zero points" : "");
        }
}

// 4-bit decoding with one query head per KV head over rows of 128, 256 and 384 (on AVX-512: q
// in registers, or read from memory with 16 keys' tables at a time) by groups of 8 and 24
// (narrower than an AVX-512 vector, or not a multiple of it: the row reader's scale per element
// there, a scale per group of whole vectors on AVX2 and SSE4), 32 and 64 (the tables), one scale
// a row or a head, with and without zero points.
TEST_P(sdpa_quantized, decode_one_row_long_rows_narrow_groups) {
    uint32_t seed = 9700;
    for (int64_t dim : {128, 256, 384})
        for (attn_dtype t : {ATTN_DTYPE_I4, ATTN_DTYPE_U4})
            for (granularity g : {granularity::group8, granularity::group24, granularity::group32,
                                  granularity::group64, granularity::per_row, granularity::per_head})
                for (int zeros = 0; zeros < 2; ++zeros) {
                    if (g == granularity::group24 && dim % 24 != 0) continue;
                    expect_one_row_decode(t, g, zeros != 0, dim, seed += 3);
                }
}

// 4-bit decoding with one query head per KV head by groups of 32 and 64 (a key's table made
// once a group and kept for its spans, or made for every span), with and without zero points,
// over rows of 128 (q's pairs in registers, the keys' rows read key by key) and 96 (the 16 keys'
// tables at a time); I8 by groups of 64 alike (a group's scale once per four vectors).
TEST_P(sdpa_quantized, decode_one_row_groups_of_64) {
    uint32_t seed = 9500;
    for (int64_t dim : {96, 128})
        for (attn_dtype t : {ATTN_DTYPE_I4, ATTN_DTYPE_U4, ATTN_DTYPE_I8})
            for (granularity g : {granularity::group32, granularity::group64})
                for (int zeros = 0; zeros < 2; ++zeros) {
                    if (dim % 64 != 0 && g == granularity::group64) continue;
                    expect_one_row_decode(t, g, zeros != 0, dim, seed += 3);
                }
}

// E4M3's NaN code (S.1111.111) in one K row makes that key's score NaN (so every output of
// the heads that see it); in one V row, the outputs of that column. The NaNs are where the
// reference has them, the other values its values at the tolerance of the rule: 4 query heads
// a KV head and 1 (decoding's two ways of reading K), keys in the first and second blocks of
// 64, the element in a row's first 64 codes, its second, the last 32 of 96 and the last 16 of
// 80 (decoding looks at the codes 64 at a time where it reads them, fewer at a row's end).
TEST_P(sdpa_quantized, e4m3_nan_codes) {
    for (int side = 0; side < 2; ++side)
        for (uint8_t code : {uint8_t(0x7f), uint8_t(0xff)})
            for (const auto &[heads, key, element, dim] :
                 {std::tuple<int64_t, int64_t, int64_t, int64_t>{8, 40, 37, 128}, {2, 60, 37, 128}, {2, 76, 37, 128},
                  {8, 3, 101, 128}, {2, 66, 101, 128}, {2, 9, 90, 96}, {8, 70, 70, 80}, {2, 12, 75, 80}}) {
                problem p = make_problem(ATTN_DTYPE_FP8_E4M3, granularity::per_row, false, 1, 77,
                                         7000 + uint32_t(heads), heads, dim, dim);
                // batch 1, KV head 0
                (side == 0 ? p.k : p.v).bytes[size_t((2 * 77 + key) * dim + element)] = code;
                auto ref = make_context(ATTN_IMPL_REFERENCE);
                const std::vector<float> want = run(ref.get(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
                const std::vector<float> got = run(ctx(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
                size_t nans = 0;
                for (size_t i = 0; i < want.size(); ++i) {
                    nans += std::isnan(want[i]) ? 1 : 0;
                    ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << "side " << side << ", output " << i;
                    if (!std::isnan(want[i]))
                        EXPECT_LE(std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i])), 2.0 * tolerance(p)) << i;
                }
                // K: the heads of KV head 0 of batch 1, every column; V: their column `element`
                const size_t seen_by = size_t(heads / 2);
                EXPECT_EQ(nans, side == 0 ? seen_by * size_t(dim) : seen_by) << "side " << side << ", heads " << heads << ", D " << dim;
            }
}

// E4M3 V rows with scales near the top of f32 (2e36: values up to 1.2e37, and sums of a few
// of them, finite): decoding reads E4M3 codes as 2^-120 of their values with 2^120 in P times
// the scale, which would overflow to inf for scales of 2^7 and more; such rows are read exactly. Every
// output finite and, divided by the scale, the reference's at the tolerance of the rule
// (decode and prefill, rows of 128 and 32).
TEST_P(sdpa_quantized, e4m3_huge_v_scales) {
    for (int64_t len_q : {int64_t(1), int64_t(9), prefill_rows})
        for (int64_t dim_v : {128, 32}) {
            problem p = make_problem(ATTN_DTYPE_FP8_E4M3, granularity::per_row, false, len_q, 77,
                                     7100 + uint32_t(len_q + dim_v), 8, 128, dim_v);
            for (size_t i = 0; i < p.v.scale.size(); ++i) p.v.scale[i] = i % 3 ? 2e36f : 1e36f;
            auto ref = make_context(ATTN_IMPL_REFERENCE);
            const std::vector<float> want = run(ref.get(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
            const std::vector<float> got = run(ctx(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
            for (size_t i = 0; i < want.size(); ++i) {
                ASSERT_TRUE(std::isfinite(want[i])) << i;
                ASSERT_TRUE(std::isfinite(got[i])) << "len_q " << len_q << ", dim_v " << dim_v << ", output " << i;
                EXPECT_LE(std::fabs(got[i] - want[i]) / 2e36, 2.0 * tolerance(p) * 6.0) << i;
            }
        }
}

// Decoding reads E4M3 codes as the f32 bits of 2^-120 of their values (AVX-512), so subnormal
// codes become f32 subnormals, which a caller's MXCSR with DAZ set would read as 0: every code
// subnormal (or zero), scales making the outputs of order 1, and DAZ and FTZ set on the calling
// thread, which runs the call alone; the outputs are the reference's, computed before with MXCSR as it was, at the rule's
// tolerance (4 query heads a KV head and 1, 1 and 9 query rows). MXCSR is restored after.
TEST_P(sdpa_quantized, e4m3_subnormal_codes_under_daz) {
    struct mxcsr_set {
        unsigned saved = _mm_getcsr();
        explicit mxcsr_set(unsigned bits) { _mm_setcsr(saved | bits); }
        ~mxcsr_set() { _mm_setcsr(saved); }
    };
    for (int64_t heads : {8, 2})
        for (int64_t len_q : {1, 9}) {
            problem p = make_problem(ATTN_DTYPE_FP8_E4M3, granularity::per_row, false, len_q, 77,
                                     7200 + uint32_t(heads + len_q), heads, 128, 128);
            for (cache_side *side : {&p.k, &p.v})
                for (uint8_t &code : side->bytes) code &= 0x87;  // S.0000.MMM
            for (float &scale : p.k.scale) scale *= 64.0f;
            for (float &scale : p.v.scale) scale *= 2048.0f;
            auto ref = make_context(ATTN_IMPL_REFERENCE);
            const std::vector<float> want = run(ref.get(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
            double largest = 0.0;
            for (float w : want) largest = std::fmax(largest, std::fabs(w));
            ASSERT_GT(largest, 0.1) << "outputs of order 1";
            std::vector<float> got;
            {  // (a context of one thread, made here: the calling thread does all of the work)
                const mxcsr_set daz_ftz(0x8040u);
                const context_ptr one = make_context(GetParam().impl, GetParam().isa, 1);
                ASSERT_TRUE(one);
                got = run(one.get(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
            }
            for (size_t i = 0; i < want.size(); ++i)
                EXPECT_LE(std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i])), 2.0 * tolerance(p))
                    << "heads " << heads << ", len_q " << len_q << ", output " << i;
        }
}

// Query rows of up to 2^80 against E4M3 keys scaled down by as much (scores of order 1):
// decoding's 2^60 in q (q already times the softmax scale, 2^-3.5 here) would overflow there,
// so those rows read the codes exactly; every output finite and the reference's at the rule's
// tolerance (4 query heads a KV head and 1).
TEST_P(sdpa_quantized, e4m3_huge_queries) {
    for (int64_t heads : {8, 2}) {
        problem p = make_problem(ATTN_DTYPE_FP8_E4M3, granularity::per_row, false, 1, 77,
                                 7300 + uint32_t(heads), heads, 128, 128);
        for (float &x : p.q) x *= 0x1p80f;
        for (float &scale : p.k.scale) scale *= 0x1p-80f;
        auto ref = make_context(ATTN_IMPL_REFERENCE);
        const std::vector<float> want = run(ref.get(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
        const std::vector<float> got = run(ctx(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
        for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_TRUE(std::isfinite(got[i])) << "heads " << heads << ", output " << i;
            EXPECT_LE(std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i])), 2.0 * tolerance(p))
                << "heads " << heads << ", output " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(paths, sdpa_quantized, testing::ValuesIn(all_paths()), path_name);

// A paged cache, scales in its pages, gives the bits of the same values and scales stored
// contiguously: the pages of every sequence in a shuffled pool, page size 16, I8 per row
// with zero points and I4 per group of 32; decode and prefill, on every path.
TEST(sdpa_quantized_paged, same_bits_as_contiguous) {
    for (attn_dtype t : {ATTN_DTYPE_I8, ATTN_DTYPE_I4})
        for (int64_t len_q : {int64_t(1), int64_t(9), prefill_rows}) {
            const granularity g = t == ATTN_DTYPE_I8 ? granularity::per_row : granularity::group32;
            const problem p = make_problem(t, g, t == ATTN_DTYPE_I8, len_q, 77, 3000 + uint32_t(len_q));
            const paged_cache paged = page_cache(p, 16);
            for (const path &at : all_paths()) {
                auto ctx = make_context(at.impl, at.isa);
                EXPECT_TRUE(bitwise_equal(run(ctx.get(), p.d, p, p.k.bytes.data(), p.v.bytes.data()),
                                          run(ctx.get(), paged.d, p, paged.k.data(), paged.v.data())))
                    << at.name << ", type " << t << ", len_q " << len_q;
            }
        }
}

// Prefill dequantizes while packing K and padding V, so it computes on the very f32 values an
// f32 cache holding the f32-dequantized values gives: the same bits, on every path, strict and
// under ATTN_FPMATH_BF16 (where the bf16-pair path rounds those values to bf16 once, as it
// does an f32 cache's).
TEST(sdpa_quantized_prefill, same_bits_as_the_dequantized_f32_cache) {
    for (attn_fpmath fpmath : {ATTN_FPMATH_STRICT, ATTN_FPMATH_BF16})
        for (attn_dtype t : {ATTN_DTYPE_I8, ATTN_DTYPE_U4, ATTN_DTYPE_FP8_E5M2}) {
            const granularity g = t == ATTN_DTYPE_U4 ? granularity::group32 : granularity::per_row;
            const problem p = make_problem(t, g, t == ATTN_DTYPE_U4, prefill_rows, 77, 6000 + uint32_t(t));
            attn_sdpa_desc f = p.d;
            f.kv_type = ATTN_DTYPE_F32;
            f.k_scale = f.v_scale = f.k_zero = f.v_zero = nullptr;
            f.k_scale_strides = f.v_scale_strides = attn_layout{0, 0, 0};
            f.k_group = f.v_group = 0;
            for (const path &at : all_paths()) {
                attn_config cfg;
                attn_config_init(&cfg);
                cfg.impl = at.impl;
                cfg.max_isa = at.isa;
                cfg.fpmath = fpmath;
                attn_context *c = nullptr;
                ASSERT_EQ(attn_context_create(&cfg, &c), ATTN_OK) << at.name;
                const context_ptr ctx(c);
                const std::vector<float> quantized = run(ctx.get(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
                const std::vector<float> dense = run(ctx.get(), f, p, p.k.f32.data(), p.v.f32.data());
                EXPECT_TRUE(bitwise_equal(quantized, dense))
                    << at.name << ", type " << t << (fpmath == ATTN_FPMATH_BF16 ? ", fpmath bf16" : "");
            }
        }
}

// The same bits with 1, 2 and 3 threads, decode (split keys) and prefill.
TEST(sdpa_quantized_threads, bitwise_across_thread_counts) {
    for (int64_t len_q : {int64_t(1), int64_t(9), prefill_rows}) {
        const problem p = make_problem(ATTN_DTYPE_U8, granularity::group32, true, len_q, 1200, 4000);
        std::vector<float> first;
        for (int threads : {1, 2, 3}) {
            auto ctx = make_context(ATTN_IMPL_SIMD, ATTN_ISA_AUTO, threads);
            const std::vector<float> got = run(ctx.get(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
            if (first.empty()) first = got;
            EXPECT_TRUE(bitwise_equal(first, got)) << threads << " threads, len_q " << len_q;
        }
    }
}

}  // namespace
