// attn_quantize on every path (the reference and each ISA this CPU has), against an oracle
// written from attn.h's rules in f32 arithmetic only (quantize_oracle.hpp; no float64: the
// rules are f32 steps), bit for bit. Exhaustive over the FP8 codes (round trip, every tie,
// just above and below it); integer ties, clamping, nibble order, all-equal, zero and
// underflowing groups; NaN / infinity / overflow rejected with nothing written; untouched
// elements around the written rows and groups; a sweep of shapes, groups and source types.
// The element decoders of src/core/quantized_elements.hpp are checked against the table.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "quantize_oracle.hpp"
#include "core/quantized_elements.hpp"
#include "test_util.hpp"

namespace {

using attn_test::path_test;
using namespace attn_test::quantize_oracle;

// ---- running the library -----------------------------------------------------------------

class quantize_test : public path_test {
  protected:
    // Quantizes dense f32 rows; the outputs are dense. Expects ATTN_OK.
    quantized run(const std::vector<float> &x, int64_t rows, int64_t dim, attn_dtype t,
                  bool asymmetric, int64_t group, std::vector<uint8_t> *bytes = nullptr) {
        const int64_t groups = group == 0 ? 1 : dim / group;
        std::vector<uint8_t> dst(size_t(rows * dim * int64_t(attn_dtype_bits(t)) / 8), 0xA5);
        quantized q{{}, std::vector<float>(size_t(rows * groups), -7.0f),
                    std::vector<float>(size_t(rows * groups), -7.0f)};
        const attn_status s = attn_quantize(ctx(), rows, dim, x.data(), ATTN_DTYPE_F32, dim,
                                            dst.data(), t, dim, q.scale.data(),
                                            asymmetric ? q.zero.data() : nullptr, groups, group);
        EXPECT_EQ(s, ATTN_OK) << attn_last_error();
        if (!asymmetric) std::fill(q.zero.begin(), q.zero.end(), 0.0f);
        if (bytes) *bytes = dst;
        // unpacked codes, as the oracle gives them
        q.codes.resize(size_t(rows * dim));
        for (int64_t e = 0; e < rows * dim; ++e) {
            if (t == ATTN_DTYPE_I4) q.codes[size_t(e)] = attn::quant::int4_get(dst.data(), e);
            else if (t == ATTN_DTYPE_U4) q.codes[size_t(e)] = attn::quant::uint4_get(dst.data(), e);
            else if (t == ATTN_DTYPE_I8) q.codes[size_t(e)] = int8_t(dst[size_t(e)]);
            else q.codes[size_t(e)] = dst[size_t(e)];
        }
        return q;
    }
    // The library against the oracle, bit for bit.
    void expect_oracle(const std::vector<float> &x, int64_t rows, int64_t dim, attn_dtype t,
                       bool asymmetric, int64_t group, const std::string &what) {
        std::vector<uint8_t> bytes;
        const quantized got = run(x, rows, dim, t, asymmetric, group, &bytes);
        quantized want = oracle(x, rows, dim, t, asymmetric, group);
        if (!asymmetric) std::fill(want.zero.begin(), want.zero.end(), 0.0f);
        EXPECT_EQ(got.codes, want.codes) << what;
        EXPECT_EQ(bytes, pack(want.codes, t)) << what;
        EXPECT_TRUE(attn_test::bitwise_equal(got.scale, want.scale)) << what;
        EXPECT_TRUE(attn_test::bitwise_equal(got.zero, want.zero)) << what;
    }
};

const attn_dtype kTypes[] = {ATTN_DTYPE_I8, ATTN_DTYPE_U8, ATTN_DTYPE_I4,
                             ATTN_DTYPE_U4, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};

// ---- FP8 ---------------------------------------------------------------------------------

TEST(quantized_elements, fp8_decoders_match_the_fields) {
    for (int c = 0; c < 256; ++c) {
        for (attn_dtype t : {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2}) {
            const float want = fp8_value(c, t);
            const float got = t == ATTN_DTYPE_FP8_E4M3 ? attn::quant::fp8_e4m3_to_f32(uint8_t(c))
                                                       : attn::quant::fp8_e5m2_to_f32(uint8_t(c));
            if (std::isnan(want)) {
                EXPECT_TRUE(std::isnan(got)) << "code " << c;
            } else {
                EXPECT_EQ(attn::convert::f32_bits(got), attn::convert::f32_bits(want))
                    << "code " << c << " type " << int(t);
            }
        }
    }
    EXPECT_EQ(fp8_value(0x7e, ATTN_DTYPE_FP8_E4M3), 448.0f);
    EXPECT_EQ(fp8_value(0x7b, ATTN_DTYPE_FP8_E5M2), 57344.0f);
    EXPECT_EQ(fp8_value(0x01, ATTN_DTYPE_FP8_E4M3), 0x1p-9f);
    EXPECT_EQ(fp8_value(0x01, ATTN_DTYPE_FP8_E5M2), 0x1p-16f);
}

TEST(quantized_elements, nibbles_low_first) {
    uint8_t b[2] = {0x00, 0xff};
    attn::quant::nibble_set(b, 0, -2);  // I4 -2 = 0xE
    attn::quant::nibble_set(b, 1, 3);
    attn::quant::nibble_set(b, 2, 0);
    EXPECT_EQ(b[0], 0x3e);
    EXPECT_EQ(b[1], 0xf0);  // the high nibble kept
    EXPECT_EQ(attn::quant::int4_get(b, 0), -2);
    EXPECT_EQ(attn::quant::uint4_get(b, 0), 14);
    EXPECT_EQ(attn::quant::int4_get(b, 3), -1);
}

// Every finite FP8 value v quantized with scale 1 (a group [v, qmax]) gives its own code.
TEST_P(quantize_test, fp8_every_code_round_trips) {
    for (attn_dtype t : {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2}) {
        const float qmax = range_of(t).qmax;
        std::vector<float> x;
        std::vector<int> codes;
        for (int c = 0; c < 256; ++c) {
            const float v = fp8_value(c, t);
            if (!std::isfinite(v)) continue;
            x.insert(x.end(), {v, qmax});
            codes.push_back(c);
        }
        const int64_t rows = int64_t(codes.size());
        const quantized q = run(x, rows, 2, t, false, 0);
        for (int64_t i = 0; i < rows; ++i) {
            EXPECT_EQ(q.scale[size_t(i)], 1.0f);
            EXPECT_EQ(q.codes[size_t(2 * i)], codes[size_t(i)]) << "type " << int(t);
        }
    }
}

// Between every two neighbouring FP8 values: the midpoint goes to the even code, the floats
// just below and above it to the nearer one; the same negated; and beyond the max saturates.
TEST_P(quantize_test, fp8_ties_to_even_and_saturation) {
    for (attn_dtype t : {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2}) {
        const float qmax = range_of(t).qmax;
        std::vector<float> x;
        std::vector<int> want;
        auto add = [&](float v, int code) {
            x.insert(x.end(), {v, qmax});
            want.push_back(code);
            x.insert(x.end(), {-v, qmax});
            want.push_back(code | 0x80);
        };
        for (int c = 0; fp8_value(c + 1, t) <= qmax; ++c) {
            const float lo = fp8_value(c, t), hi = fp8_value(c + 1, t), mid = (lo + hi) / 2;
            add(mid, c % 2 == 0 ? c : c + 1);
            add(std::nextafter(mid, 0.0f), c);
            add(std::nextafter(mid, INFINITY), c + 1);
        }
        const quantized q = run(x, int64_t(want.size()), 2, t, false, 0);
        for (size_t i = 0; i < want.size(); ++i)
            ASSERT_EQ(q.codes[2 * i], want[i]) << "type " << int(t) << " x = " << x[2 * i];
        // a group's largest value is the largest code (scale = max / qmax), even where
        // max / scale lands a little above qmax and saturates
        for (float m : {1.0f, 3.0f, 1e-30f, 7.1e37f, 1.2e-38f}) {
            const quantized s = run({m, -m / 3, 0.5f * m, -m}, 1, 4, t, false, 0);
            const int max_code = t == ATTN_DTYPE_FP8_E4M3 ? 0x7e : 0x7b;
            EXPECT_EQ(s.codes[0], max_code) << m;
            EXPECT_EQ(s.codes[3], max_code | 0x80) << m;
        }
    }
}

// ---- integers ----------------------------------------------------------------------------

// Scale 1 (symmetric: a group holding qmax; asymmetric: one spanning [qmin, qmax]) puts every
// half-integer on a tie: it rounds to the even integer.
TEST_P(quantize_test, integer_ties_to_even) {
    for (attn_dtype t : {ATTN_DTYPE_I8, ATTN_DTYPE_U8, ATTN_DTYPE_I4, ATTN_DTYPE_U4}) {
        const int_type_range r = range_of(t);
        for (bool asymmetric : {false, true}) {
            if (!asymmetric && (t == ATTN_DTYPE_U8 || t == ATTN_DTYPE_U4)) continue;
            const float lo = asymmetric ? r.qmin : -r.qmax;
            std::vector<float> x;
            std::vector<int> want;
            for (float k = lo; k < r.qmax; k += 1.0f) {
                const float ends[2] = {lo, r.qmax};
                x.insert(x.end(), {k + 0.5f, ends[0], ends[1], k + 0.25f});
                want.push_back(int(std::fmod(k, 2.0f) == 0.0f ? k : k + 1.0f));
                want.push_back(int(k));
            }
            const quantized q = run(x, int64_t(want.size() / 2), 4, t, asymmetric, 0);
            for (size_t i = 0; i < want.size() / 2; ++i) {
                ASSERT_EQ(q.scale[i], 1.0f) << int(t);
                ASSERT_EQ(q.zero[i], 0.0f) << int(t);
                EXPECT_EQ(q.codes[4 * i], want[2 * i]) << int(t) << " x = " << x[4 * i];
                EXPECT_EQ(q.codes[4 * i + 3], want[2 * i + 1]) << int(t) << " x = " << x[4 * i + 3];
            }
        }
    }
}

// Clamping is reached where f32 rounding moves x / scale (+ zero) past the range: a
// symmetric group whose scale is a rounded-down subnormal (max |x| / scale > qmax), and an
// asymmetric group spanning one ulp of a large value (zero is rounded by hundreds of steps).
TEST_P(quantize_test, integer_clamping) {
    const std::pair<attn_dtype, float> symmetric[] = {{ATTN_DTYPE_I8, 190.0f}, {ATTN_DTYPE_I4, 10.0f}};
    for (auto [t, units] : symmetric) {
        const float m = units * 0x1p-149f;  // max |x| / qmax rounds to 2^-149
        const quantized q = run({m, -m, 0.0f, 0x1p-149f}, 1, 4, t, false, 0);
        EXPECT_EQ(q.scale[0], 0x1p-149f);
        EXPECT_GT(m / q.scale[0], range_of(t).qmax);  // unclamped, beyond the range
        EXPECT_EQ(q.codes, (std::vector<int>{int(range_of(t).qmax), -int(range_of(t).qmax), 0, 1}));
    }
    for (attn_dtype t : {ATTN_DTYPE_I8, ATTN_DTYPE_U8, ATTN_DTYPE_I4, ATTN_DTYPE_U4}) {
        const float lo = 1e6f, hi = std::nextafter(lo, INFINITY);
        const std::vector<float> x{lo, hi, hi, lo};
        const quantized want = oracle(x, 1, 4, t, true, 0);
        const float y_lo = lo / want.scale[0] + want.zero[0], y_hi = hi / want.scale[0] + want.zero[0];
        EXPECT_TRUE(y_lo < range_of(t).qmin - 0.5f || y_hi > range_of(t).qmax + 0.5f)
            << "the case must reach the clamp: " << y_lo << " " << y_hi;
        expect_oracle(x, 1, 4, t, true, 0, "clamped, type " + std::to_string(int(t)));
        for (int c : want.codes) EXPECT_TRUE(c >= range_of(t).qmin && c <= range_of(t).qmax);
    }
}

TEST_P(quantize_test, nibble_order) {
    // I4, scale 1: 1, -2, 3, -4, 7, -7 -> bytes 0xE1, 0xC3, 0x97
    std::vector<uint8_t> bytes;
    run({1, -2, 3, -4, 7, -7}, 1, 6, ATTN_DTYPE_I4, false, 0, &bytes);
    EXPECT_EQ(bytes, (std::vector<uint8_t>{0xE1, 0xC3, 0x97}));
    // U4 over [0, 15], scale 1, zero 0: 15, 0, 4, 9 -> 0x0F, 0x94
    run({15, 0, 4, 9}, 1, 4, ATTN_DTYPE_U4, true, 0, &bytes);
    EXPECT_EQ(bytes, (std::vector<uint8_t>{0x0F, 0x94}));
}

// All-equal groups are exact; zero groups and groups whose scale underflows give zeros.
TEST_P(quantize_test, equal_zero_and_underflowing_groups) {
    for (attn_dtype t : {ATTN_DTYPE_I8, ATTN_DTYPE_U8, ATTN_DTYPE_I4, ATTN_DTYPE_U4}) {
        const float qmin = range_of(t).qmin;
        for (float c : {3.5f, -2.0f, 1e-40f, -6e37f}) {
            const quantized q = run({c, c, c, c}, 1, 4, t, true, 2);
            for (int g = 0; g < 2; ++g) {
                EXPECT_EQ(q.scale[size_t(g)], std::fabs(c));
                EXPECT_EQ(q.zero[size_t(g)], qmin - (c > 0 ? 1.0f : -1.0f));
            }
            for (int e = 0; e < 4; ++e) {
                EXPECT_EQ(q.codes[size_t(e)], int(qmin));
                EXPECT_EQ(q.scale[0] * (float(q.codes[size_t(e)]) - q.zero[0]), c);  // exact
            }
        }
        const quantized z = run({0.0f, -0.0f, 0.0f, 0.0f}, 1, 4, t, true, 0);
        EXPECT_EQ(z.scale[0], 0.0f);
        EXPECT_EQ(z.zero[0], 0.0f);
        EXPECT_EQ(z.codes, std::vector<int>(4, 0));
        // max > min, but (max - min) / (qmax - qmin) underflows: zeros
        const quantized u = run({0x1p-149f, 0.0f, 0x1p-149f, 0.0f}, 1, 4, t, true, 0);
        EXPECT_EQ(u.scale[0], 0.0f);
        EXPECT_EQ(u.codes, std::vector<int>(4, 0));
    }
    for (attn_dtype t : {ATTN_DTYPE_I8, ATTN_DTYPE_I4, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2}) {
        // the third group: max |x| = 2^-149, divided by qmax >= 7 underflows to 0
        const quantized z = run({0.0f, 0.0f, -0.0f, 0.0f, 0x1p-149f, -0x1p-149f}, 1, 6, t, false, 2);
        EXPECT_EQ(z.scale, (std::vector<float>{0.0f, 0.0f, 0.0f})) << int(t);
        EXPECT_EQ(z.codes, std::vector<int>(6, 0)) << int(t);
    }
}

// ---- rejection and untouched memory ------------------------------------------------------

TEST_P(quantize_test, nan_and_inf_rejected_with_nothing_written) {
    for (attn_dtype st : {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16}) {
        for (float bad : {NAN, INFINITY, -INFINITY}) {
            std::vector<float> x = attn_test::random_tensor(4 * 8, 3);
            x[size_t(2 * 8 + 5)] = bad;
            std::vector<uint8_t> src(x.size() * attn_dtype_size(st));
            ASSERT_EQ(attn_convert(nullptr, int64_t(x.size()), x.data(), ATTN_DTYPE_F32,
                                   src.data(), st),
                      ATTN_OK);
            std::vector<uint8_t> dst(32, 0x5A);
            std::vector<float> scale(8, 9.0f), zero(8, 9.0f);
            EXPECT_EQ(attn_quantize(ctx(), 4, 8, src.data(), st, 8, dst.data(), ATTN_DTYPE_U8, 8,
                                    scale.data(), zero.data(), 2, 4),
                      ATTN_INVALID_ARGUMENT);
            EXPECT_NE(std::string(attn_last_error()).find("attn_quantize: src row 2, column 5 = "),
                      std::string::npos)
                << attn_last_error();
            EXPECT_EQ(dst, std::vector<uint8_t>(32, 0x5A));
            EXPECT_EQ(scale, std::vector<float>(8, 9.0f));
            EXPECT_EQ(zero, std::vector<float>(8, 9.0f));
        }
    }
    // max - min overflows in the second group of row 1 (asymmetric only)
    std::vector<float> x(16, 1.0f);
    x[12] = 3e38f;
    x[13] = -3e38f;
    std::vector<uint8_t> dst(16, 0x5A);
    std::vector<float> scale(4, 9.0f), zero(4, 9.0f);
    EXPECT_EQ(attn_quantize(ctx(), 2, 8, x.data(), ATTN_DTYPE_F32, 8, dst.data(), ATTN_DTYPE_I8, 8,
                            scale.data(), zero.data(), 2, 4),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error()).find("src row 1: the group of columns 4 .. 7"),
              std::string::npos)
        << attn_last_error();
    EXPECT_EQ(dst, std::vector<uint8_t>(16, 0x5A));
    EXPECT_EQ(scale, std::vector<float>(4, 9.0f));
    // symmetric: only max |x| matters, which is finite
    EXPECT_EQ(attn_quantize(ctx(), 2, 8, x.data(), ATTN_DTYPE_F32, 8, dst.data(), ATTN_DTYPE_I8, 8,
                            scale.data(), nullptr, 2, 4),
              ATTN_OK)
        << attn_last_error();
    EXPECT_EQ(int8_t(dst[12]), 127);
    EXPECT_EQ(int8_t(dst[13]), -127);
}

// Rows written into a larger cache: the gaps between rows (dst_stride > dim) and between
// scale rows (scale_stride > groups) keep their bytes.
TEST_P(quantize_test, elements_outside_the_rows_untouched) {
    for (attn_dtype t : kTypes) {
        const bool asymmetric = t == ATTN_DTYPE_U8 || t == ATTN_DTYPE_U4;
        const int64_t rows = 3, dim = 12, group = 4, dst_stride = 16, scale_stride = 5;
        const std::vector<float> x = attn_test::random_tensor(size_t(rows * dim), 11);
        const size_t bits = attn_dtype_bits(t);
        std::vector<uint8_t> dst(size_t(rows * dst_stride) * bits / 8, 0x5A);
        std::vector<float> scale(size_t(rows * scale_stride), 9.0f), zero = scale;
        ASSERT_EQ(attn_quantize(ctx(), rows, dim, x.data(), ATTN_DTYPE_F32, dim, dst.data(), t,
                                dst_stride, scale.data(), asymmetric ? zero.data() : nullptr,
                                scale_stride, group),
                  ATTN_OK)
            << attn_last_error();
        const quantized want = oracle(x, rows, dim, t, asymmetric, group);
        const std::vector<uint8_t> packed = pack(want.codes, t);
        const size_t row_bytes = size_t(dim) * bits / 8, stride_bytes = size_t(dst_stride) * bits / 8;
        for (size_t r = 0; r < size_t(rows); ++r) {
            for (size_t b = 0; b < stride_bytes; ++b) {
                const uint8_t got = dst[r * stride_bytes + b];
                if (b < row_bytes) EXPECT_EQ(got, packed[r * row_bytes + b]) << int(t);
                else EXPECT_EQ(got, 0x5A) << "type " << int(t) << " row " << r << " byte " << b;
            }
            for (size_t g = 0; g < size_t(scale_stride); ++g) {
                if (g < 3) {
                    EXPECT_EQ(scale[r * 5 + g], want.scale[r * 3 + g]);
                    EXPECT_EQ(zero[r * 5 + g], asymmetric ? want.zero[r * 3 + g] : 9.0f);
                } else {
                    EXPECT_EQ(scale[r * 5 + g], 9.0f);
                    EXPECT_EQ(zero[r * 5 + g], 9.0f);
                }
            }
        }
    }
}

// ---- a sweep against the oracle ----------------------------------------------------------

// Every type, symmetric and asymmetric, groups from 2 to the whole row, rows of lengths that
// are and are not whole vectors, values of several magnitudes, and 16-bit sources.
TEST_P(quantize_test, sweep_matches_the_oracle_bitwise) {
    struct shape {
        int64_t rows, dim, group;
    };
    const shape shapes[] = {{3, 2, 0}, {5, 40, 8}, {2, 64, 0}, {4, 96, 32}, {3, 130, 2}, {1, 18, 6}};
    uint32_t seed = 100;
    for (attn_dtype t : kTypes) {
        for (bool asymmetric : {false, true}) {
            if (asymmetric && is_fp8(t)) continue;
            if (!asymmetric && (t == ATTN_DTYPE_U8 || t == ATTN_DTYPE_U4)) continue;
            for (const shape &s : shapes) {
                const float magnitude = std::ldexp(1.0f, int(seed % 40) - 20);
                std::vector<float> x = attn_test::random_tensor(size_t(s.rows * s.dim), ++seed,
                                                                -magnitude, 0.7f * magnitude);
                x[0] = 0.0f;  // exact zeros and a -0 among the values
                if (x.size() > 3) x[3] = -0.0f;
                const std::string what = "type " + std::to_string(int(t)) + " asym " +
                                         std::to_string(asymmetric) + " dim " +
                                         std::to_string(s.dim) + " group " + std::to_string(s.group);
                expect_oracle(x, s.rows, s.dim, t, asymmetric, s.group, what);
            }
        }
    }
}

// bf16 and f16 sources give the codes of their f32 values.
TEST_P(quantize_test, sixteen_bit_sources) {
    for (attn_dtype st : {ATTN_DTYPE_BF16, ATTN_DTYPE_F16}) {
        const int64_t rows = 4, dim = 48, group = 16;
        std::vector<float> x = attn_test::random_tensor(size_t(rows * dim), 7, -3.0f, 5.0f);
        std::vector<uint16_t> h(x.size());
        ASSERT_EQ(attn_convert(nullptr, int64_t(x.size()), x.data(), ATTN_DTYPE_F32, h.data(), st),
                  ATTN_OK);
        ASSERT_EQ(attn_convert(nullptr, int64_t(x.size()), h.data(), st, x.data(), ATTN_DTYPE_F32),
                  ATTN_OK);
        for (attn_dtype t : {ATTN_DTYPE_U8, ATTN_DTYPE_I4, ATTN_DTYPE_FP8_E4M3}) {
            const bool asymmetric = t == ATTN_DTYPE_U8;
            std::vector<uint8_t> dst(size_t(rows * dim * int64_t(attn_dtype_bits(t)) / 8));
            std::vector<float> scale(size_t(rows * 3)), zero(scale.size());
            ASSERT_EQ(attn_quantize(ctx(), rows, dim, h.data(), st, dim, dst.data(), t, dim,
                                    scale.data(), asymmetric ? zero.data() : nullptr, 3, group),
                      ATTN_OK)
                << attn_last_error();
            const quantized want = oracle(x, rows, dim, t, asymmetric, group);
            EXPECT_EQ(dst, pack(want.codes, t)) << int(st) << " " << int(t);
            EXPECT_TRUE(attn_test::bitwise_equal(scale, want.scale));
            if (asymmetric) EXPECT_TRUE(attn_test::bitwise_equal(zero, want.zero));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(paths, quantize_test, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
