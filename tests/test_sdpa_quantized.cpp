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
#include <vector>

#include "core/quantized_elements.hpp"
#include "test_features_util.hpp"

namespace {

using namespace attn_test;

enum class granularity { per_row, group32, per_channel, per_head, per_tensor, no_scale };

const char *granularity_name(granularity g) {
    switch (g) {
    case granularity::per_row: return "per_row";
    case granularity::group32: return "group32";
    case granularity::per_channel: return "per_channel";
    case granularity::per_head: return "per_head";
    case granularity::per_tensor: return "per_tensor";
    case granularity::no_scale: return "no_scale";
    }
    return "?";
}

bool is_4bit(attn_dtype t) { return t == ATTN_DTYPE_I4 || t == ATTN_DTYPE_U4; }
bool is_fp8(attn_dtype t) { return t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2; }

// One side (K or V) of a quantized cache, dense [batch, heads, len, dim], its scales, and its
// values dequantized in f32 (as the library computes them) and in float64 (the oracle's).
struct cache_side {
    std::vector<uint8_t> bytes;
    std::vector<float> scale, zero;
    attn_layout strides{0, 0, 0};
    int64_t group = 0;
    std::vector<float> f32;
    std::vector<double> f64;
};

// Scale strides and group of granularity g over rows of dim elements.
void layout_for(granularity g, attn_dtype t, int64_t heads, int64_t len, int64_t dim,
                attn_layout *s, int64_t *group) {
    switch (g) {
    case granularity::per_row: *s = {heads * len, len, 1}, *group = 0; return;
    case granularity::group32: *s = {heads * len * (dim / 32), len * (dim / 32), dim / 32}, *group = 32; return;
    case granularity::per_channel: {
        const int64_t gr = is_4bit(t) ? 2 : 1;  // 4-bit: one scale per pair of channels
        *s = {heads * (dim / gr), dim / gr, 0}, *group = gr;
        return;
    }
    case granularity::per_head: *s = {heads, 1, 0}, *group = 0; return;
    case granularity::per_tensor:
    case granularity::no_scale: *s = {0, 0, 0}, *group = 0; return;
    }
}

// A code of type t: integers uniform over the type's range; FP8 the nearest code of a
// uniform value in [-6, 6] (finite, subnormals possible near 0).
int code_of(attn_dtype t, std::mt19937 &gen) {
    if (t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2) {
        const float x = std::uniform_real_distribution<float>(-6.0f, 6.0f)(gen);
        return t == ATTN_DTYPE_FP8_E4M3 ? attn::quant::f32_to_fp8_e4m3(x) : attn::quant::f32_to_fp8_e5m2(x);
    }
    const attn::quant::int_range r = attn::quant::integer_range(t);
    return std::uniform_int_distribution<int>(r.qmin, r.qmax)(gen);
}

// The value of code q (as stored) before its scale.
double raw_value(attn_dtype t, int q) {
    if (t == ATTN_DTYPE_FP8_E4M3) return attn::quant::fp8_e4m3_to_f32(uint8_t(q));
    if (t == ATTN_DTYPE_FP8_E5M2) return attn::quant::fp8_e5m2_to_f32(uint8_t(q));
    return double(q);
}

cache_side make_side(attn_dtype t, granularity g, bool zeros, int64_t batch, int64_t heads,
                     int64_t len, int64_t dim, uint32_t seed) {
    cache_side c;
    std::mt19937 gen(seed);
    layout_for(g, t, heads, len, dim, &c.strides, &c.group);
    const int64_t gr = c.group ? c.group : dim;
    const int64_t entries = (batch - 1) * c.strides.batch + (heads - 1) * c.strides.head +
                            (len - 1) * c.strides.seq + (dim - 1) / gr + 1;
    // scales: about 1 / qmax (values of order 1), FP8 around 0.3
    const attn::quant::int_range r = is_fp8(t) ? attn::quant::int_range{0, 1} : attn::quant::integer_range(t);
    const float unit = is_fp8(t) ? 0.3f : 2.0f / float(r.qmax - r.qmin);
    std::uniform_real_distribution<float> spread(0.5f, 1.5f);
    if (g != granularity::no_scale)
        for (int64_t i = 0; i < entries; ++i) c.scale.push_back(unit * spread(gen));
    if (zeros)
        for (int64_t i = 0; i < entries; ++i)
            c.zero.push_back(std::uniform_real_distribution<float>(float(r.qmin), float(r.qmax))(gen));
    const int64_t n = batch * heads * len * dim;
    c.bytes.assign(size_t(is_4bit(t) ? n / 2 : n), 0);
    c.f32.resize(size_t(n));
    c.f64.resize(size_t(n));
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t j = 0; j < len; ++j)
                for (int64_t x = 0; x < dim; ++x) {
                    const int64_t e = ((b * heads + h) * len + j) * dim + x;
                    const int q = code_of(t, gen);
                    if (is_4bit(t)) attn::quant::nibble_set(c.bytes.data(), e, q);
                    else c.bytes[size_t(e)] = uint8_t(q);
                    const int64_t at = b * c.strides.batch + h * c.strides.head + j * c.strides.seq + x / gr;
                    const float s = c.scale.empty() ? 1.0f : c.scale[size_t(at)];
                    const float z = c.zero.empty() ? 0.0f : c.zero[size_t(at)];
                    c.f32[size_t(e)] = s * (float(raw_value(t, q)) - z);
                    c.f64[size_t(e)] = double(s) * (raw_value(t, q) - double(z));
                }
    return c;
}

// The problem with its quantized cache (K and V of the same type and granularity).
struct problem {
    attn_sdpa_desc d;
    std::vector<float> q;
    cache_side k, v;
    std::vector<double> want;  // float64 oracle
    double plain_error = 0.0;  // the plain f32 computation's error against it
};

void point_at_cache(attn_sdpa_desc &d, attn_dtype t, const cache_side &k, const cache_side &v) {
    d.kv_type = t;
    d.k_scale = k.scale.empty() ? nullptr : k.scale.data();
    d.v_scale = v.scale.empty() ? nullptr : v.scale.data();
    d.k_zero = k.zero.empty() ? nullptr : k.zero.data();
    d.v_zero = v.zero.empty() ? nullptr : v.zero.data();
    d.k_scale_strides = k.strides;
    d.v_scale_strides = v.strides;
    d.k_group = k.group;
    d.v_group = v.group;
}

// The reference on an f32 cache of the f32-dequantized values: the plain computation.
std::vector<float> plain_f32(const attn_sdpa_desc &quantized, const problem &p) {
    attn_sdpa_desc d = quantized;
    d.kv_type = ATTN_DTYPE_F32;
    d.k_scale = d.v_scale = d.k_zero = d.v_zero = nullptr;
    d.k_scale_strides = d.v_scale_strides = attn_layout{0, 0, 0};
    d.k_group = d.v_group = 0;
    std::vector<float> out(size_t(d.batch * d.heads_q * d.len_q * d.dim_v));
    auto ref = make_context(ATTN_IMPL_REFERENCE);
    EXPECT_EQ(attn_sdpa(ref.get(), &d, p.q.data(), p.k.f32.data(), p.v.f32.data(), out.data()), ATTN_OK)
        << attn_last_error();
    return out;
}

// Shape: B 2, Hkv 2, Hq query heads (4 unless given), dims Dk x Dv (64 x 32 unless given).
problem make_problem(attn_dtype t, granularity g, bool zeros, int64_t len_q, int64_t len_kv,
                     uint32_t seed, int64_t Hq = 4, int64_t Dk = 64, int64_t Dv = 32) {
    problem p;
    const int64_t B = 2, Hkv = 2;
    p.d = make_desc(B, Hq, Hkv, len_q, len_kv, Dk, Dv);
    p.q = random_tensor(size_t(B * Hq * len_q * Dk), seed, -1.0f, 1.0f);
    p.k = make_side(t, g, zeros, B, Hkv, len_kv, Dk, seed + 1);
    p.v = make_side(t, g, zeros, B, Hkv, len_kv, Dv, seed + 2);
    point_at_cache(p.d, t, p.k, p.v);
    p.want = sdpa_features_double(p.d, to_double(p.q), p.k.f64, p.v.f64);
    p.plain_error = max_rel_error(plain_f32(p.d, p), p.want);
    return p;
}

double tolerance(const problem &p) { return 2.0 * p.plain_error + 4.0 * FLT_EPSILON; }

std::vector<float> run(attn_context *ctx, const attn_sdpa_desc &d, const problem &p,
                       const void *k, const void *v) {
    std::vector<float> out(size_t(d.batch * d.heads_q * d.len_q * d.dim_v), NAN);
    EXPECT_EQ(attn_sdpa(ctx, &d, p.q.data(), k, v, out.data()), ATTN_OK) << attn_last_error();
    return out;
}

const attn_dtype kTypes[] = {ATTN_DTYPE_I8, ATTN_DTYPE_U8, ATTN_DTYPE_I4,
                             ATTN_DTYPE_U4, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
const granularity kGranularities[] = {granularity::per_row, granularity::group32,
                                      granularity::per_channel, granularity::per_head,
                                      granularity::per_tensor, granularity::no_scale};

class sdpa_quantized : public path_test {};

// Every type x granularity x zero points, decoding (1 query row) and prefill (9 rows), on
// this path. The zero points go with the integer types; scale NULL with FP8 only.
TEST_P(sdpa_quantized, every_type_and_granularity) {
    uint32_t seed = 100;
    for (attn_dtype t : kTypes)
        for (granularity g : kGranularities)
            for (int zeros = 0; zeros < 2; ++zeros) {
                if ((zeros && is_fp8(t)) || (g == granularity::no_scale && !is_fp8(t))) continue;
                for (int64_t len_q : {1, 9}) {
                    const problem p = make_problem(t, g, zeros != 0, len_q, 77, seed += 3);
                    const std::vector<float> got = run(ctx(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
                    EXPECT_LE(max_rel_error(got, p.want), tolerance(p))
                        << "type " << t << ", " << granularity_name(g) << (zeros ? ", zero points" : "")
                        << ", len_q " << len_q << " (plain f32 error " << p.plain_error << ")";
                }
            }
}

// Long caches: decoding splits the keys into chunks merged afterwards, and a prefill of a few
// rows; I8 per row with zero points, I4 per group, FP8 per channel.
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
        for (int64_t len_q : {1, 6}) {
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
        for (int64_t len_q : {1, 3, 9}) {
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
// reading through f16) and 4 query heads per KV head (the scores' widest blocking), every type
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

// E4M3's NaN code (S.1111.111) in one K row makes that key's score NaN (so every output of
// the heads that see it); in one V row, the outputs of that column. The NaNs are where the
// reference has them, the other values its values at the tolerance of the rule.
TEST_P(sdpa_quantized, e4m3_nan_codes) {
    for (int side = 0; side < 2; ++side)
        for (uint8_t code : {uint8_t(0x7f), uint8_t(0xff)}) {
            problem p = make_problem(ATTN_DTYPE_FP8_E4M3, granularity::per_row, false, 1, 77, 7000, 8, 128, 128);
            // batch 1, KV head 0, key 40, element 37
            (side == 0 ? p.k : p.v).bytes[size_t((2 * 77 + 40) * 128 + 37)] = code;
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
            // K: the 4 heads of KV head 0 of batch 1, every column; V: their column 37
            EXPECT_EQ(nans, side == 0 ? size_t(4 * 128) : size_t(4)) << "side " << side;
        }
}

// E4M3 V rows with scales near the top of f32 (2e36: values up to 1.2e37, and sums of a few
// of them, finite): decoding reads E4M3 codes as 2^-8 of their values with 2^8 in P times the
// scale, which overflowed to inf for scales above ~1.3e36; such rows are read exactly. Every
// output finite and, divided by the scale, the reference's at the tolerance of the rule
// (decode and prefill, rows of 128 and 32).
TEST_P(sdpa_quantized, e4m3_huge_v_scales) {
    for (int64_t len_q : {1, 9})
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

INSTANTIATE_TEST_SUITE_P(paths, sdpa_quantized, testing::ValuesIn(all_paths()), path_name);

// A paged cache, scales in its pages, gives the bits of the same values and scales stored
// contiguously: the pages of every sequence in a shuffled pool, page size 16, I8 per row
// with zero points and I4 per group of 32; decode and prefill, on every path.
TEST(sdpa_quantized_paged, same_bits_as_contiguous) {
    const int64_t B = 2, Hkv = 2, L = 77, ps = 16, per = (L + ps - 1) / ps, pages = B * per + 2;
    for (attn_dtype t : {ATTN_DTYPE_I8, ATTN_DTYPE_I4})
        for (int64_t len_q : {1, 9}) {
            const granularity g = t == ATTN_DTYPE_I8 ? granularity::per_row : granularity::group32;
            const problem p = make_problem(t, g, t == ATTN_DTYPE_I8, len_q, L, 3000 + uint32_t(len_q));
            std::vector<int32_t> table(size_t(B * per));
            for (int64_t i = 0; i < B * per; ++i) table[size_t(i)] = int32_t((i * 7 + 3) % pages);
            // pool [pages, Hkv, ps, dim] of K and V, scales [pages, Hkv, ps, groups]
            auto page_side = [&](const cache_side &c, int64_t dim, std::vector<uint8_t> *pool,
                                 std::vector<float> *scale, std::vector<float> *zero) {
                const int64_t groups = dim / (c.group ? c.group : dim);
                const int64_t bits = is_4bit(t) ? 4 : 8;
                pool->assign(size_t(pages * Hkv * ps * dim * bits / 8), 0);
                scale->assign(size_t(pages * Hkv * ps * groups), 0.0f);
                zero->assign(c.zero.empty() ? 0 : scale->size(), 0.0f);
                for (int64_t b = 0; b < B; ++b)
                    for (int64_t h = 0; h < Hkv; ++h)
                        for (int64_t j = 0; j < L; ++j) {
                            const int64_t pg = table[size_t(b * per + j / ps)];
                            const int64_t to = (pg * Hkv + h) * ps + j % ps, from = (b * Hkv + h) * L + j;
                            for (int64_t x = 0; x < dim * bits / 8; ++x)
                                (*pool)[size_t(to * dim * bits / 8 + x)] = c.bytes[size_t(from * dim * bits / 8 + x)];
                            for (int64_t gi = 0; gi < groups; ++gi) {
                                (*scale)[size_t(to * groups + gi)] = c.scale[size_t(from * groups + gi)];
                                if (!zero->empty()) (*zero)[size_t(to * groups + gi)] = c.zero[size_t(from * groups + gi)];
                            }
                        }
                return attn_layout{Hkv * ps * groups, ps * groups, groups};
            };
            std::vector<uint8_t> kpool, vpool;
            std::vector<float> ks, kz, vs, vz;
            attn_sdpa_desc d = p.d;
            d.k_scale_strides = page_side(p.k, 64, &kpool, &ks, &kz);
            d.v_scale_strides = page_side(p.v, 32, &vpool, &vs, &vz);
            d.k_scale = ks.data();
            d.v_scale = vs.data();
            d.k_zero = kz.empty() ? nullptr : kz.data();
            d.v_zero = vz.empty() ? nullptr : vz.data();
            d.k = {Hkv * ps * 64, ps * 64, 64};
            d.v = {Hkv * ps * 32, ps * 32, 32};
            d.block_table = table.data();
            d.block_table_stride = per;
            d.page_size = ps;
            d.num_pages = pages;
            for (const path &at : all_paths()) {
                auto ctx = make_context(at.impl, at.isa);
                const std::vector<float> dense = run(ctx.get(), p.d, p, p.k.bytes.data(), p.v.bytes.data());
                const std::vector<float> paged = run(ctx.get(), d, p, kpool.data(), vpool.data());
                EXPECT_TRUE(bitwise_equal(dense, paged)) << at.name << ", type " << t << ", len_q " << len_q;
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
            const problem p = make_problem(t, g, t == ATTN_DTYPE_U4, 9, 77, 6000 + uint32_t(t));
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
    for (int64_t len_q : {1, 9}) {
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
