// attn_sdpa with 16-bit tensors on every path: each combination of q, k/v and out types,
// against float64 on the stored inputs with attn.h's tolerance rule: the error is at most
// twice that of the plain computation (inputs as stored, products summed in f32, P rounded
// to bf16 when V is bf16, output rounded once) plus two units in the last place of the
// output type.
// Options: GQA, causal, masks, kv_len, dropout, lse, weights, split-key decoding, BSHD
// strides; bitwise across thread counts; the f32 entry points refuse other types.
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "ref/convert.hpp"
#include "test_util.hpp"

namespace {

using attn_test::path_test;

const char *type_name(attn_dtype t) {
    return t == ATTN_DTYPE_F32 ? "f32" : t == ATTN_DTYPE_BF16 ? "bf16" : "f16";
}

// Relative spacing of the output type's floats (one unit in the last place at 1).
double type_eps(attn_dtype t) {
    return t == ATTN_DTYPE_F32 ? 0x1p-23 : t == ATTN_DTYPE_BF16 ? 0x1p-7 : 0x1p-10;
}

// A tensor stored in type t: bytes, and the stored values widened (exactly) to double.
struct stored {
    std::vector<uint8_t> bytes;
    std::vector<double> values;
    const void *data() const { return bytes.data(); }
};

stored store(const std::vector<float> &x, attn_dtype t) {
    stored s;
    s.bytes.resize(x.size() * attn_dtype_size(t));
    s.values.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        if (t == ATTN_DTYPE_F32) {
            std::memcpy(&s.bytes[i * 4], &x[i], 4);
            s.values[i] = x[i];
        } else {
            const uint16_t h = t == ATTN_DTYPE_BF16 ? attn::convert::f32_to_bf16(x[i])
                                                    : attn::convert::f32_to_f16(x[i]);
            std::memcpy(&s.bytes[i * 2], &h, 2);
            s.values[i] = t == ATTN_DTYPE_BF16 ? attn::convert::bf16_to_f32(h)
                                               : attn::convert::f16_to_f32(h);
        }
    }
    return s;
}

std::vector<double> widen(const std::vector<uint8_t> &bytes, attn_dtype t) {
    std::vector<double> out(bytes.size() / attn_dtype_size(t));
    for (size_t i = 0; i < out.size(); ++i) {
        if (t == ATTN_DTYPE_F32) {
            float f;
            std::memcpy(&f, &bytes[i * 4], 4);
            out[i] = f;
        } else {
            uint16_t h;
            std::memcpy(&h, &bytes[i * 2], 2);
            out[i] = t == ATTN_DTYPE_BF16 ? attn::convert::bf16_to_f32(h)
                                          : attn::convert::f16_to_f32(h);
        }
    }
    return out;
}

// max |got - want| over max(1, max |want|): normwise, NaN when the NaN patterns differ.
double norm_error(const std::vector<double> &got, const std::vector<double> &want) {
    double worst = 0.0, scale = 1.0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(got[i]) != std::isnan(want[i])) return NAN;
        scale = std::max(scale, std::fabs(want[i]));
        worst = std::max(worst, std::fabs(got[i] - want[i]));
    }
    return worst / scale;
}

// The plain 16-bit computation of attn.h's tolerance rule, in f32 on the stored values: scores summed
// in f32, softmax in f32, the weights rounded to bf16 when V is bf16 (where the rule allows
// P to be rounded before P V), P V summed in f32, the output rounded once to out_type.
std::vector<double> sdpa_plain(const attn_sdpa_desc &d, const std::vector<double> &q,
                               const std::vector<double> &k, const std::vector<double> &v) {
    const int64_t B = d.batch, Hq = d.heads_q, Hkv = d.heads_kv, Lq = d.len_q, Lk = d.len_kv;
    const int64_t Dk = d.dim_qk, Dv = d.dim_v, group = Hq / Hkv;
    const bool round_p = d.kv_type == ATTN_DTYPE_BF16;
    std::vector<double> out(size_t(B * Hq * Lq * Dv), 0.0);
    std::vector<float> s(static_cast<size_t>(Lk)), acc(static_cast<size_t>(Dv));
    std::vector<bool> seen(static_cast<size_t>(Lk));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Lq; ++i) {
                const int64_t hk = h / group;
                float m = -INFINITY;
                for (int64_t j = 0; j < Lk; ++j) {
                    bool visible = true;
                    if (d.causal == ATTN_CAUSAL_TOP_LEFT) visible = j <= i;
                    if (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT) visible = j <= i + Lk - Lq;
                    if (d.kv_len && j >= d.kv_len[b]) visible = false;
                    float dot = 0.0f;
                    for (int64_t c = 0; c < Dk; ++c)
                        dot += float(q[size_t(((b * Hq + h) * Lq + i) * Dk + c)]) *
                               float(k[size_t(((b * Hkv + hk) * Lk + j) * Dk + c)]);
                    s[size_t(j)] = d.scale * dot;
                    if (d.mask)
                        s[size_t(j)] += d.mask[b * d.mask_strides.batch + h * d.mask_strides.head +
                                               i * d.mask_strides.seq + j];
                    seen[size_t(j)] = visible && s[size_t(j)] != -INFINITY;
                    if (seen[size_t(j)]) m = std::max(m, s[size_t(j)]);
                }
                if (m == -INFINITY) continue;
                float sum = 0.0f;
                for (int64_t j = 0; j < Lk; ++j) sum += seen[size_t(j)] ? std::exp(s[size_t(j)] - m) : 0.0f;
                const uint32_t key = attn::dropout::row_key(d.dropout_seed, b, h, i);
                const uint32_t thresh = attn::dropout::threshold(d.dropout_p);
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (int64_t j = 0; j < Lk; ++j) {
                    if (!seen[size_t(j)]) continue;
                    float w = std::exp(s[size_t(j)] - m) / sum;
                    if (d.dropout_p > 0.0f)
                        w = attn::dropout::dropped(key, j, thresh) ? 0.0f : w / (1.0f - d.dropout_p);
                    if (round_p) w = attn::convert::bf16_to_f32(attn::convert::f32_to_bf16(w));
                    for (int64_t c = 0; c < Dv; ++c)
                        acc[size_t(c)] += w * float(v[size_t(((b * Hkv + hk) * Lk + j) * Dv + c)]);
                }
                for (int64_t c = 0; c < Dv; ++c) {
                    const float x = acc[size_t(c)];
                    double y = x;
                    if (d.out_type == ATTN_DTYPE_BF16) y = attn::convert::bf16_to_f32(attn::convert::f32_to_bf16(x));
                    if (d.out_type == ATTN_DTYPE_F16) y = attn::convert::f16_to_f32(attn::convert::f32_to_f16(x));
                    out[size_t(((b * Hq + h) * Lq + i) * Dv + c)] = y;
                }
            }
    return out;
}

struct typed_case {
    const char *name;
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v;
    attn_causal causal;
    bool mask, kv_len, dropout, lse;
};

const typed_case cases[] = {
    {"prefill GQA causal", 2, 4, 2, 70, 70, 40, 24, ATTN_CAUSAL_TOP_LEFT, false, false, false, true},
    {"prefill mask kv_len", 1, 2, 2, 37, 53, 64, 64, ATTN_CAUSAL_NONE, true, true, false, true},
    {"prefill dropout bottom-right", 1, 2, 1, 19, 131, 32, 48, ATTN_CAUSAL_BOTTOM_RIGHT, false,
     false, true, false},
    {"prefill 98 rows: a last tile of 2", 1, 2, 2, 98, 130, 32, 32, ATTN_CAUSAL_BOTTOM_RIGHT, true,
     false, false, true},
    {"decode 1 row GQA, split keys", 1, 8, 2, 1, 1500, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, false,
     true, false, true},
    {"decode 3 rows, odd dims", 2, 2, 2, 3, 700, 45, 37, ATTN_CAUSAL_BOTTOM_RIGHT, true, false,
     false, true},
    {"decode 1 row D128", 1, 4, 4, 1, 2100, 128, 128, ATTN_CAUSAL_NONE, false, false, true, true},
    {"decode 1 row GQA, dropout", 1, 8, 2, 1, 900, 64, 64, ATTN_CAUSAL_NONE, false, false, true,
     true},
    // V's 80 dims: on the pair paths a whole column chunk of V (64 dims) and a part of one
    {"prefill D80 values, causal", 1, 2, 1, 100, 300, 64, 80, ATTN_CAUSAL_BOTTOM_RIGHT, false,
     false, false, true},
};

class SdpaTyped : public path_test {};

TEST_P(SdpaTyped, EveryTypeCombinationWithinTheToleranceRule) {
    const attn_dtype types[] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    uint32_t seed = 40;
    for (const typed_case &c : cases) {
        attn_sdpa_desc d = attn_test::make_desc(c.batch, c.heads_q, c.heads_kv, c.len_q, c.len_kv,
                                                c.dim_qk, c.dim_v);
        d.causal = c.causal;
        const auto qf = attn_test::random_tensor(size_t(c.batch * c.heads_q * c.len_q * c.dim_qk), ++seed, -2.0f, 2.0f);
        const auto kf = attn_test::random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_qk), ++seed, -2.0f, 2.0f);
        const auto vf = attn_test::random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_v), ++seed);
        std::vector<float> mask;
        if (c.mask) {
            mask = attn_test::random_tensor(size_t(c.batch * c.heads_q * c.len_q * c.len_kv), ++seed, -3.0f, 1.0f);
            d.mask = mask.data();
            d.mask_strides = {c.heads_q * c.len_q * c.len_kv, c.len_q * c.len_kv, c.len_kv};
        }
        std::vector<int32_t> kv_len;
        if (c.kv_len) {
            for (int64_t b = 0; b < c.batch; ++b) kv_len.push_back(int32_t(c.len_kv - 5 - 11 * b));
            d.kv_len = kv_len.data();
        }
        if (c.dropout) {
            d.dropout_p = 0.2f;
            d.dropout_seed = 99;
        }
        const size_t out_n = size_t(c.batch * c.heads_q * c.len_q * c.dim_v);
        for (attn_dtype qt : types)
            for (attn_dtype kvt : types)
                for (attn_dtype ot : types) {
                    SCOPED_TRACE(testing::Message() << c.name << ": q " << type_name(qt) << ", kv "
                                                    << type_name(kvt) << ", out " << type_name(ot));
                    const stored q = store(qf, qt), k = store(kf, kvt), v = store(vf, kvt);
                    d.q_type = qt;
                    d.kv_type = kvt;
                    d.out_type = ot;
                    std::vector<uint8_t> out(out_n * attn_dtype_size(ot), 0xCD);
                    std::vector<float> lse(c.lse ? out_n / size_t(c.dim_v) : 0);
                    d.lse = c.lse ? lse.data() : nullptr;
                    ASSERT_EQ(attn_sdpa(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
                        << attn_last_error();
                    d.lse = nullptr;
                    std::vector<double> lse64;
                    const auto want = attn_test::sdpa_double(d, q.values, k.values, v.values, &lse64);
                    const double err = norm_error(widen(out, ot), want);
                    // the yardstick: the plain 16-bit computation of the rule, written above
                    // (never a path of the library, so a wrong reference cannot widen it)
                    const double err_plain =
                        norm_error(sdpa_plain(d, q.values, k.values, v.values), want);
                    ASSERT_LE(err, 2.0 * err_plain + 2.0 * type_eps(ot))
                        << "plain 16-bit computation's error " << err_plain;
                    for (size_t i = 0; i < lse.size(); ++i)
                        ASSERT_NEAR(lse[i], lse64[i], 1e-5 * (1.0 + std::fabs(lse64[i]))) << "lse " << i;
                }
    }
}

// f16 in, f16 out, on its own: values of V up to 300 (f16 spacing 0.25 there) and q, k up to 4
// (scores of several units), where f16's 11-bit significand sets the plain computation's error;
// within the rule against float64 on the stored values, and lse within f32 rounding.
TEST_P(SdpaTyped, F16InputsAndOutput) {
    uint32_t seed = 70;
    for (const typed_case &c : cases) {
        SCOPED_TRACE(c.name);
        attn_sdpa_desc d = attn_test::make_desc(c.batch, c.heads_q, c.heads_kv, c.len_q, c.len_kv,
                                                c.dim_qk, c.dim_v);
        d.causal = c.causal;
        d.q_type = d.kv_type = d.out_type = ATTN_DTYPE_F16;
        const stored q = store(attn_test::random_tensor(size_t(c.batch * c.heads_q * c.len_q * c.dim_qk), ++seed, -4.0f, 4.0f), ATTN_DTYPE_F16);
        const stored k = store(attn_test::random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_qk), ++seed, -4.0f, 4.0f), ATTN_DTYPE_F16);
        const stored v = store(attn_test::random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_v), ++seed, -300.0f, 300.0f), ATTN_DTYPE_F16);
        const size_t out_n = size_t(c.batch * c.heads_q * c.len_q * c.dim_v);
        std::vector<uint8_t> out(out_n * 2, 0xCD);
        std::vector<float> lse(out_n / size_t(c.dim_v));
        d.lse = lse.data();
        ASSERT_EQ(attn_sdpa(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
            << attn_last_error();
        d.lse = nullptr;
        std::vector<double> lse64;
        const auto want = attn_test::sdpa_double(d, q.values, k.values, v.values, &lse64);
        const double err_plain = norm_error(sdpa_plain(d, q.values, k.values, v.values), want);
        EXPECT_LE(norm_error(widen(out, ATTN_DTYPE_F16), want),
                  2.0 * err_plain + 2.0 * type_eps(ATTN_DTYPE_F16))
            << "plain f16 computation's error " << err_plain;
        // lse: a sum of up to 2100 f32 exps and a log, a few f32 ulps relative to 1 + |lse|
        for (size_t i = 0; i < lse.size(); ++i)
            ASSERT_NEAR(lse[i], lse64[i], 1e-5 * (1.0 + std::fabs(lse64[i]))) << "lse " << i;
    }
}

// bf16 attention over planted_heads heads of 100 rows and planted_keys keys (a key tile of 1024
// and one of 76), D planted_dim, q in [0.5, 1.5), K ([planted_heads, planted_keys,
// planted_dim]) in [-k_range, k_range) with some keys planted by plant(k, causal), for each
// causal mode: within the tolerance rule against float64, lse within f32 rounding, and the
// same bits for 1 and all threads (ctx and one).
constexpr int64_t planted_heads = 2, planted_keys = 1100, planted_dim = 64;
void check_planted_keys(attn_context *ctx, attn_context *one, float k_range,
                        std::initializer_list<attn_causal> modes,
                        const std::function<void(std::vector<float> &, attn_causal)> &plant) {
    const int64_t H = planted_heads, Lq = 100, Lk = planted_keys, D = planted_dim;
    for (attn_causal causal : modes) {
        SCOPED_TRACE(causal == ATTN_CAUSAL_NONE ? "not causal" : "causal");
        attn_sdpa_desc d = attn_test::make_desc(1, H, H, Lq, Lk, D, D);
        d.causal = causal;
        d.q_type = d.kv_type = ATTN_DTYPE_BF16;
        d.out_type = ATTN_DTYPE_F32;
        auto qf = attn_test::random_tensor(size_t(H * Lq * D), 5, 0.5f, 1.5f);
        auto kf = attn_test::random_tensor(size_t(H * Lk * D), 6, -k_range, k_range);
        const auto vf = attn_test::random_tensor(size_t(H * Lk * D), 7);
        plant(kf, causal);
        const stored q = store(qf, ATTN_DTYPE_BF16), k = store(kf, ATTN_DTYPE_BF16), v = store(vf, ATTN_DTYPE_BF16);
        std::vector<float> out(size_t(H * Lq * D)), out1(out.size()), lse(size_t(H * Lq));
        d.lse = lse.data();
        ASSERT_EQ(attn_sdpa(ctx, &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK) << attn_last_error();
        d.lse = nullptr;
        ASSERT_EQ(attn_sdpa(one, &d, q.data(), k.data(), v.data(), out1.data()), ATTN_OK);
        EXPECT_EQ(0, std::memcmp(out.data(), out1.data(), out.size() * sizeof(float)));
        std::vector<double> lse64;
        const auto want = attn_test::sdpa_double(d, q.values, k.values, v.values, &lse64);
        const double err_plain = norm_error(sdpa_plain(d, q.values, k.values, v.values), want);
        EXPECT_LE(norm_error(std::vector<double>(out.begin(), out.end()), want),
                  2.0 * err_plain + 2.0 * type_eps(ATTN_DTYPE_F32))
            << "plain 16-bit computation's error " << err_plain;
        for (size_t i = 0; i < lse.size(); ++i)
            ASSERT_NEAR(lse[i], lse64[i], 1e-5 * (1.0 + std::fabs(lse64[i]))) << "lse " << i;
    }
}

// The bf16-pair tiles form P with the scores from an offset taken at each tile's first 64
// keys: keys whose scores rise far above it. Head 0 has a key ~118 above every other score
// of its rows (e^118 is past f32: P's sums pass their limit, so the tile starts over with its
// true max; without that, NaN), head 1 one 4-5 above (P up to e^5 before the sum divides it
// out); not causal and causal (row i sees keys 0..i, so the planted keys sit below row 99).
TEST_P(SdpaTyped, KeysFarAboveATilesFirstPanel) {
    auto one = attn_test::make_context(GetParam().impl, GetParam().isa, 1);
    check_planted_keys(ctx(), one.get(), 1.0f, {ATTN_CAUSAL_NONE, ATTN_CAUSAL_TOP_LEFT},
                       [](std::vector<float> &k, attn_causal causal) {
        const int64_t Lk = planted_keys, D = planted_dim;
        const int64_t far = causal == ATTN_CAUSAL_NONE ? 700 : 90, near = causal == ATTN_CAUSAL_NONE ? 300 : 80;
        for (int64_t c = 0; c < D; ++c) {
            k[size_t(far * D + c)] = 15.0f;          // head 0: S ~ 120, e^S past f32
            k[size_t((Lk + near) * D + c)] = 0.75f;  // head 1: S ~ 6
        }
    });
}

// Past a row's first key tile the pair tiles take its running max as the offset: a key of the
// second tile (1060) far above what the rows saw in the first, by ~120 (head 0: P = inf, the
// tile starts over) or ~12 (head 1: P up to e^12, well rounded); K elsewhere in [-0.1, 0.1)
// (|S| < ~1.2). Not causal, and causal from the bottom right (rows 60.. see the key).
TEST_P(SdpaTyped, KeysFarAboveTheRunningMax) {
    auto one = attn_test::make_context(GetParam().impl, GetParam().isa, 1);
    check_planted_keys(ctx(), one.get(), 0.1f, {ATTN_CAUSAL_NONE, ATTN_CAUSAL_BOTTOM_RIGHT},
                       [](std::vector<float> &k, attn_causal) {
        const int64_t Lk = planted_keys, D = planted_dim, planted = 1060;
        for (int64_t c = 0; c < D; ++c) {
            k[size_t(planted * D + c)] = 15.0f;        // head 0: S ~ 120
            k[size_t((Lk + planted) * D + c)] = 1.5f;  // head 1: S ~ 12 (scale 1/8)
        }
    });
}

// 16-bit K/V and out: the same bits for 1 and all threads, and on a second run (bf16 q and
// kv take the bf16-pair kernels where the level has them).
TEST_P(SdpaTyped, BitwiseAcrossThreadCounts) {
    ATTN_SKIP_UNLESS_THREADS(2);
    auto one = attn_test::make_context(GetParam().impl, GetParam().isa, 1);
    for (attn_dtype kv_type : {ATTN_DTYPE_F16, ATTN_DTYPE_BF16})
    for (const typed_case &c : {cases[0], cases[2], cases[3], cases[4], cases[6]}) {
        SCOPED_TRACE(testing::Message() << c.name << ", kv " << type_name(kv_type));
        attn_sdpa_desc d = attn_test::make_desc(c.batch, c.heads_q, c.heads_kv, c.len_q, c.len_kv,
                                                c.dim_qk, c.dim_v);
        d.causal = c.causal;
        d.q_type = ATTN_DTYPE_BF16;
        d.kv_type = kv_type;
        d.out_type = ATTN_DTYPE_BF16;
        const stored q = store(attn_test::random_tensor(size_t(c.batch * c.heads_q * c.len_q * c.dim_qk), 1), d.q_type);
        const stored k = store(attn_test::random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_qk), 2), d.kv_type);
        const stored v = store(attn_test::random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_v), 3), d.kv_type);
        const size_t bytes = size_t(c.batch * c.heads_q * c.len_q * c.dim_v) * 2;
        std::vector<uint8_t> a(bytes), b(bytes), again(bytes);
        ASSERT_EQ(attn_sdpa(ctx(), &d, q.data(), k.data(), v.data(), a.data()), ATTN_OK);
        ASSERT_EQ(attn_sdpa(one.get(), &d, q.data(), k.data(), v.data(), b.data()), ATTN_OK);
        ASSERT_EQ(attn_sdpa(ctx(), &d, q.data(), k.data(), v.data(), again.data()), ATTN_OK);
        EXPECT_EQ(a, b);
        EXPECT_EQ(a, again);
    }
}

// ATTN_FPMATH_BF16 on f32 inputs: against float64 on the f32 inputs, within twice the error
// of the plain computation on the inputs rounded to bf16 (P rounded too), plus two f32 ulps;
// weights and lse from the same scores; bitwise for 1 and all threads.
TEST_P(SdpaTyped, FpmathBf16OnF32Inputs) {
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = GetParam().impl;
    cfg.max_isa = GetParam().isa;
    cfg.fpmath = ATTN_FPMATH_BF16;
    attn_context *all = nullptr, *one = nullptr;
    ASSERT_EQ(attn_context_create(&cfg, &all), ATTN_OK) << attn_last_error();
    cfg.num_threads = 1;
    ASSERT_EQ(attn_context_create(&cfg, &one), ATTN_OK) << attn_last_error();
    for (const typed_case &c : cases) {
        SCOPED_TRACE(c.name);
        attn_sdpa_desc d = attn_test::make_desc(c.batch, c.heads_q, c.heads_kv, c.len_q, c.len_kv,
                                                c.dim_qk, c.dim_v);
        d.causal = c.causal;
        const auto q = attn_test::random_tensor(size_t(c.batch * c.heads_q * c.len_q * c.dim_qk), 11, -2.0f, 2.0f);
        const auto k = attn_test::random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_qk), 12, -2.0f, 2.0f);
        const auto v = attn_test::random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_v), 13);
        const size_t out_n = size_t(c.batch * c.heads_q * c.len_q * c.dim_v);
        std::vector<float> out(out_n), again(out_n), weights(size_t(c.batch * c.heads_q * c.len_q * c.len_kv));
        d.weights = weights.data();
        ASSERT_EQ(attn_sdpa_f32(all, &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
            << attn_last_error();
        d.weights = nullptr;
        ASSERT_EQ(attn_sdpa_f32(one, &d, q.data(), k.data(), v.data(), again.data()), ATTN_OK);
        EXPECT_TRUE(attn_test::bitwise_equal(out, again));
        const auto want = attn_test::sdpa_double(d, attn_test::to_double(q), attn_test::to_double(k),
                                                 attn_test::to_double(v));
        // the yardstick: every input rounded to bf16, P rounded, products summed in f32
        attn_sdpa_desc rounded = d;
        rounded.kv_type = ATTN_DTYPE_BF16;
        const double err_plain = norm_error(
            sdpa_plain(rounded, store(q, ATTN_DTYPE_BF16).values, store(k, ATTN_DTYPE_BF16).values,
                       store(v, ATTN_DTYPE_BF16).values),
            want);
        const double err = norm_error(std::vector<double>(out.begin(), out.end()), want);
        EXPECT_LE(err, 2.0 * err_plain + 2.0 * type_eps(ATTN_DTYPE_F32)) << "plain " << err_plain;
        // rows of weights sum to 1 (no dropout) or are all 0 (fully masked)
        for (int64_t r = 0; r < c.batch * c.heads_q * c.len_q && c.dropout == false; ++r) {
            double sum = 0.0;
            for (int64_t j = 0; j < c.len_kv; ++j) sum += weights[size_t(r * c.len_kv + j)];
            EXPECT_TRUE(std::fabs(sum - 1.0) < 1e-4 || sum == 0.0) << "row " << r << " sums to " << sum;
        }
    }
    attn_context_destroy(all);
    attn_context_destroy(one);
}

// A bf16 KV cache in BSHD layout with a capacity larger than its filled length, f16 output
// written into a strided BSHD buffer: within the rule against float64 on the stored values,
// and the gaps of the output untouched.
TEST_P(SdpaTyped, StridedCacheAndOutput) {
    const int64_t B = 2, H = 4, Lq = 5, Lk = 300, cap = 320, D = 64;
    attn_sdpa_desc d = attn_test::make_desc(B, H, 2, Lq, Lk, D, D);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    d.k = d.v = {cap * 2 * D, D, 2 * D};           // [B, cap, Hkv, D]
    d.out = {Lq * H * (D + 8), D + 8, H * (D + 8)};  // [B, Lq, H, D + 8]
    d.q_type = ATTN_DTYPE_F32;
    d.kv_type = ATTN_DTYPE_BF16;
    d.out_type = ATTN_DTYPE_F16;
    const auto qf = attn_test::random_tensor(size_t(B * H * Lq * D), 5);
    const stored k = store(attn_test::random_tensor(size_t(B * cap * 2 * D), 6), d.kv_type);
    const stored v = store(attn_test::random_tensor(size_t(B * cap * 2 * D), 7), d.kv_type);
    const size_t out_n = size_t(B * Lq * H * (D + 8));
    std::vector<uint16_t> out(out_n, 0x7777);
    ASSERT_EQ(attn_sdpa(ctx(), &d, qf.data(), k.data(), v.data(), out.data()), ATTN_OK)
        << attn_last_error();
    // dense BHSD copies of the stored values for the oracle and the yardstick
    attn_sdpa_desc dense = attn_test::make_desc(B, H, 2, Lq, Lk, D, D);
    dense.causal = d.causal;
    dense.q_type = d.q_type;
    dense.kv_type = d.kv_type;
    dense.out_type = d.out_type;
    std::vector<double> q64(qf.begin(), qf.end()), k64, v64, got;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t j = 0; j < Lk; ++j)
                for (int64_t c = 0; c < D; ++c) {
                    k64.push_back(k.values[size_t(b * cap * 2 * D + j * 2 * D + h * D + c)]);
                    v64.push_back(v.values[size_t(b * cap * 2 * D + j * 2 * D + h * D + c)]);
                }
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < Lq; ++i)
                for (int64_t c = 0; c < D; ++c)
                    got.push_back(attn::convert::f16_to_f32(
                        out[size_t(b * Lq * H * (D + 8) + i * H * (D + 8) + h * (D + 8) + c)]));
    for (size_t i = 0; i < out_n; ++i)
        if (int64_t(i) % (D + 8) >= D) ASSERT_EQ(out[i], 0x7777) << "gap element " << i << " written";
    const auto want = attn_test::sdpa_double(dense, q64, k64, v64);
    const double err_plain = norm_error(sdpa_plain(dense, q64, k64, v64), want);
    EXPECT_LE(norm_error(got, want), 2.0 * err_plain + 2.0 * type_eps(ATTN_DTYPE_F16))
        << "plain 16-bit computation's error " << err_plain;
}

// The f32 entry points name a 16-bit type field; attn_sdpa names a type outside the enum.
TEST(SdpaTypedValidation, TypeFieldsAreChecked) {
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 2, 2, 4);
    EXPECT_EQ(d.q_type, ATTN_DTYPE_F32);
    EXPECT_EQ(d.kv_type, ATTN_DTYPE_F32);
    EXPECT_EQ(d.out_type, ATTN_DTYPE_F32);
    float q[8] = {}, k[8] = {}, v[8] = {}, out[8] = {}, dout[8] = {}, g[3][8];
    d.kv_type = ATTN_DTYPE_BF16;
    EXPECT_EQ(attn_sdpa_f32(nullptr, &d, q, k, v, out), ATTN_INVALID_ARGUMENT);
    EXPECT_STREQ(attn_last_error(), "attn_sdpa_f32: desc->kv_type = 1, must be ATTN_DTYPE_F32 (0) "
                                    "here (attn_sdpa takes other types)");
    EXPECT_EQ(attn_sdpa_backward_f32(nullptr, &d, q, k, v, out, dout, nullptr, g[0], g[1], g[2]),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error()).find("desc->kv_type = 1"), std::string::npos);
    d.kv_type = ATTN_DTYPE_F32;
    d.out_type = attn_dtype(9);
    EXPECT_EQ(attn_sdpa(nullptr, &d, q, k, v, out), ATTN_INVALID_ARGUMENT);
    EXPECT_STREQ(attn_last_error(), "attn_sdpa: desc->out_type = 9, must be ATTN_DTYPE_F32 (0), "
                                    "ATTN_DTYPE_BF16 (1) or ATTN_DTYPE_F16 (2)");
    // a 16-bit out spans half the bytes: a buffer of 4 uint16 for [1,1,2,2] overlaps nothing
    d.out_type = ATTN_DTYPE_BF16;
    d.dim_qk = d.dim_v = 2;
    d.q = d.k = d.v = d.out = {4, 4, 2};
    uint16_t out16[4];
    EXPECT_EQ(attn_sdpa(nullptr, &d, q, k, v, out16), ATTN_OK) << attn_last_error();
}

INSTANTIATE_TEST_SUITE_P(Paths, SdpaTyped, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
