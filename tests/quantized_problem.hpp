// Quantized K/V caches for the tests: a dense cache of random codes of any quantized type
// and scale granularity, its values dequantized in f32 (as the library computes them) and in
// float64 (the oracle's), and a forward problem over it with its float64 oracle and the plain
// f32 computation's error (attn.h's tolerance rule for quantized caches).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/quantized_elements.hpp"
#include "kernels/attention_args.hpp"
#include "test_features_util.hpp"

namespace attn_test {

enum class granularity { per_row, group32, per_channel, per_head, per_tensor, no_scale, group64, group8, group24 };

inline const char *granularity_name(granularity g) {
    switch (g) {
    case granularity::per_row: return "per_row";
    case granularity::group32: return "group32";
    case granularity::per_channel: return "per_channel";
    case granularity::per_head: return "per_head";
    case granularity::per_tensor: return "per_tensor";
    case granularity::no_scale: return "no_scale";
    case granularity::group64: return "group64";
    case granularity::group8: return "group8";
    case granularity::group24: return "group24";
    }
    return "?";
}

// Query rows of a prefill: more than the decode entry takes (kernels/attention_args.hpp), so
// K and V are dequantized while packed for the tiles; 9 rows of make_problem's two query heads
// a KV head go to the decode entry in tiles of 4, K and V read in place.
inline constexpr int64_t prefill_rows = attn::kernels::decode_few_queries + 5;

inline bool is_4bit(attn_dtype t) { return t == ATTN_DTYPE_I4 || t == ATTN_DTYPE_U4; }
inline bool is_fp8(attn_dtype t) { return t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2; }

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
inline void layout_for(granularity g, attn_dtype t, int64_t heads, int64_t len, int64_t dim,
                attn_layout *s, int64_t *group) {
    switch (g) {
    case granularity::per_row: *s = {heads * len, len, 1}, *group = 0; return;
    case granularity::group32: *s = {heads * len * (dim / 32), len * (dim / 32), dim / 32}, *group = 32; return;
    case granularity::group64: *s = {heads * len * (dim / 64), len * (dim / 64), dim / 64}, *group = 64; return;
    case granularity::group8: *s = {heads * len * (dim / 8), len * (dim / 8), dim / 8}, *group = 8; return;
    case granularity::group24: *s = {heads * len * (dim / 24), len * (dim / 24), dim / 24}, *group = 24; return;
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
inline int code_of(attn_dtype t, std::mt19937 &gen) {
    if (t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2) {
        const float x = attn_test::uniform_float(gen, -6.0f, 6.0f);
        return t == ATTN_DTYPE_FP8_E4M3 ? attn::quant::f32_to_fp8_e4m3(x) : attn::quant::f32_to_fp8_e5m2(x);
    }
    const attn::quant::int_range r = attn::quant::integer_range(t);
    return std::uniform_int_distribution<int>(r.qmin, r.qmax)(gen);
}

// The value of code q (as stored) before its scale.
inline double raw_value(attn_dtype t, int q) {
    if (t == ATTN_DTYPE_FP8_E4M3) return attn::quant::fp8_e4m3_to_f32(uint8_t(q));
    if (t == ATTN_DTYPE_FP8_E5M2) return attn::quant::fp8_e5m2_to_f32(uint8_t(q));
    return double(q);
}

// power_of_two: each scale the power of two nearest the one drawn.
inline cache_side make_side(attn_dtype t, granularity g, bool zeros, int64_t batch, int64_t heads,
                            int64_t len, int64_t dim, uint32_t seed, bool power_of_two = false) {
    cache_side c;
    std::mt19937 gen(seed);
    layout_for(g, t, heads, len, dim, &c.strides, &c.group);
    const int64_t gr = c.group ? c.group : dim;
    const int64_t entries = (batch - 1) * c.strides.batch + (heads - 1) * c.strides.head +
                            (len - 1) * c.strides.seq + (dim - 1) / gr + 1;
    // scales: about 1 / qmax (values of order 1), FP8 around 0.3
    const attn::quant::int_range r = is_fp8(t) ? attn::quant::int_range{0, 1} : attn::quant::integer_range(t);
    const float unit = is_fp8(t) ? 0.3f : 2.0f / float(r.qmax - r.qmin);
    if (g != granularity::no_scale)
        for (int64_t i = 0; i < entries; ++i) {
            const float x = unit * attn_test::uniform_float(gen, 0.5f, 1.5f);
            c.scale.push_back(power_of_two ? std::exp2(std::round(std::log2(x))) : x);
        }
    if (zeros)
        for (int64_t i = 0; i < entries; ++i)
            c.zero.push_back(attn_test::uniform_float(gen, float(r.qmin), float(r.qmax)));
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

inline void point_at_cache(attn_sdpa_desc &d, attn_dtype t, const cache_side &k, const cache_side &v) {
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
inline std::vector<float> plain_f32(const attn_sdpa_desc &quantized, const problem &p) {
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
inline problem make_problem(attn_dtype t, granularity g, bool zeros, int64_t len_q, int64_t len_kv,
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

// The problem's cache in pages of ps rows (scales and zero points in the pages), the pages of
// every sequence shuffled in a pool of two more than they need (table entry i holds pool page
// (7 i + 3) % pages): pools [pages, Hkv, ps, row bytes], scales [pages, Hkv, ps, groups], and
// the desc reading them in place of p.d's dense cache.
struct paged_cache {
    std::vector<int32_t> table;
    std::vector<uint8_t> k, v;
    std::vector<float> k_scale, v_scale, k_zero, v_zero;
    attn_sdpa_desc d;
};

inline paged_cache page_cache(const problem &p, int64_t ps) {
    paged_cache c;
    c.d = p.d;
    const attn_dtype t = p.d.kv_type;
    const int64_t B = p.d.batch, Hkv = p.d.heads_kv, L = p.d.len_kv;
    const int64_t per = (L + ps - 1) / ps, pages = B * per + 2, bits = is_4bit(t) ? 4 : 8;
    c.table.resize(size_t(B * per));
    for (int64_t i = 0; i < B * per; ++i) c.table[size_t(i)] = int32_t((i * 7 + 3) % pages);
    auto page_side = [&](const cache_side &side, int64_t dim, std::vector<uint8_t> &pool,
                         std::vector<float> &scale, std::vector<float> &zero) {
        const int64_t groups = dim / (side.group ? side.group : dim), row_bytes = dim * bits / 8;
        pool.assign(size_t(pages * Hkv * ps * row_bytes), 0);
        scale.assign(size_t(pages * Hkv * ps * groups), 0.0f);
        zero.assign(side.zero.empty() ? 0 : scale.size(), 0.0f);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hkv; ++h)
                for (int64_t j = 0; j < L; ++j) {
                    const int64_t to = (c.table[size_t(b * per + j / ps)] * Hkv + h) * ps + j % ps;
                    const int64_t from = (b * Hkv + h) * L + j;
                    for (int64_t x = 0; x < row_bytes; ++x)
                        pool[size_t(to * row_bytes + x)] = side.bytes[size_t(from * row_bytes + x)];
                    for (int64_t gi = 0; gi < groups; ++gi) {
                        scale[size_t(to * groups + gi)] = side.scale[size_t(from * groups + gi)];
                        if (!zero.empty()) zero[size_t(to * groups + gi)] = side.zero[size_t(from * groups + gi)];
                    }
                }
        return attn_layout{Hkv * ps * groups, ps * groups, groups};
    };
    c.d.k_scale_strides = page_side(p.k, p.d.dim_qk, c.k, c.k_scale, c.k_zero);
    c.d.v_scale_strides = page_side(p.v, p.d.dim_v, c.v, c.v_scale, c.v_zero);
    c.d.k_scale = c.k_scale.data();
    c.d.v_scale = c.v_scale.data();
    c.d.k_zero = c.k_zero.empty() ? nullptr : c.k_zero.data();
    c.d.v_zero = c.v_zero.empty() ? nullptr : c.v_zero.data();
    c.d.k = {Hkv * ps * p.d.dim_qk, ps * p.d.dim_qk, p.d.dim_qk};
    c.d.v = {Hkv * ps * p.d.dim_v, ps * p.d.dim_v, p.d.dim_v};
    c.d.block_table = c.table.data();
    c.d.block_table_stride = per;
    c.d.page_size = ps;
    c.d.num_pages = pages;
    return c;
}

inline double tolerance(const problem &p) { return 2.0 * p.plain_error + 4.0 * FLT_EPSILON; }

inline std::vector<float> run(attn_context *ctx, const attn_sdpa_desc &d, const problem &p,
                       const void *k, const void *v) {
    std::vector<float> out(size_t(d.batch * d.heads_q * d.len_q * d.dim_v), NAN);
    EXPECT_EQ(attn_sdpa(ctx, &d, p.q.data(), k, v, out.data()), ATTN_OK) << attn_last_error();
    return out;
}

inline const attn_dtype kTypes[] = {ATTN_DTYPE_I8, ATTN_DTYPE_U8, ATTN_DTYPE_I4,
                             ATTN_DTYPE_U4, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
inline const granularity kGranularities[] = {granularity::per_row, granularity::group32,
                                      granularity::per_channel, granularity::per_head,
                                      granularity::per_tensor, granularity::no_scale};

}  // namespace attn_test
