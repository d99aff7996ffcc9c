// attn_convert on every path: exhaustive over the 16-bit patterns, the rounding boundaries
// of f32 -> 16-bit, special values, a random sweep of f32 patterns against the scalar rules
// (src/ref/convert.hpp), in place, tails, threads and argument validation.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ref/convert.hpp"
#include "test_util.hpp"

namespace {

using attn_test::path_test;
using u16 = uint16_t;
namespace cv = attn::convert;

uint32_t bits(float x) { return cv::f32_bits(x); }
float from_bits(uint32_t u) { return cv::f32_from_bits(u); }

std::vector<u16> all_patterns() {
    std::vector<u16> v(65536);
    for (uint32_t i = 0; i < 65536; ++i) v[i] = u16(i);
    return v;
}

// f16 -> f32 independently of the library: the value from its fields with ldexp; inf and
// NaN by their bits (the payload moves up 13 places).
uint32_t f16_expected(u16 h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
    if (e == 31) return sign | 0x7f800000u | (m << 13);
    const double v = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), int(e) - 25);
    return sign | bits(float(v));
}

class convert_test : public path_test {
  protected:
    template <class S, class D>
    void run(const std::vector<S> &src, attn_dtype st, std::vector<D> &dst, attn_dtype dt) {
        dst.assign(src.size(), D(0));
        ASSERT_EQ(attn_convert(ctx(), int64_t(src.size()), src.data(), st, dst.data(), dt),
                  ATTN_OK)
            << attn_last_error();
    }
    std::vector<u16> narrow(const std::vector<float> &x, attn_dtype dt) {
        std::vector<u16> out;
        run(x, ATTN_DTYPE_F32, out, dt);
        return out;
    }
};

TEST(convert_sizes, dtype_size) {
    EXPECT_EQ(attn_dtype_size(ATTN_DTYPE_F32), 4u);
    EXPECT_EQ(attn_dtype_size(ATTN_DTYPE_BF16), 2u);
    EXPECT_EQ(attn_dtype_size(ATTN_DTYPE_F16), 2u);
    EXPECT_EQ(attn_dtype_size(static_cast<attn_dtype>(9)), 0u);
    EXPECT_EQ(attn_dtype_size(static_cast<attn_dtype>(-1)), 0u);
}

TEST_P(convert_test, bf16_exhaustive) {
    const std::vector<u16> h = all_patterns();
    std::vector<float> wide;
    run(h, ATTN_DTYPE_BF16, wide, ATTN_DTYPE_F32);
    for (uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(bits(wide[i]), i << 16) << std::hex << i;
    std::vector<u16> back = narrow(wide, ATTN_DTYPE_BF16);
    for (uint32_t i = 0; i < 65536; ++i) {
        const uint32_t e = (i >> 7) & 0xffu, m = i & 0x7fu;
        u16 want = u16(i);
        if (e == 0xff && m != 0) want = u16(i | 0x40u);  // NaN: quieted, sign and payload kept
        if (e == 0) want = u16(i & 0x8000u);             // bf16 subnormals are f32 subnormals: +-0
        ASSERT_EQ(back[i], want) << std::hex << i;
    }
}

TEST_P(convert_test, f16_exhaustive) {
    const std::vector<u16> h = all_patterns();
    std::vector<float> wide;
    run(h, ATTN_DTYPE_F16, wide, ATTN_DTYPE_F32);
    for (uint32_t i = 0; i < 65536; ++i)
        ASSERT_EQ(bits(wide[i]), f16_expected(u16(i))) << std::hex << i;
    std::vector<u16> back = narrow(wide, ATTN_DTYPE_F16);
    for (uint32_t i = 0; i < 65536; ++i) {
        const bool nan = (i & 0x7c00u) == 0x7c00u && (i & 0x3ffu) != 0;
        ASSERT_EQ(back[i], nan ? u16(i | 0x200u) : u16(i)) << std::hex << i;  // subnormals kept
    }
}

// bf16 <-> f16 through f32: one rounding, out of place and in place, every pattern.
TEST_P(convert_test, bf16_f16_exhaustive_and_in_place) {
    const std::vector<u16> h = all_patterns();
    for (auto [st, dt] : {std::pair{ATTN_DTYPE_BF16, ATTN_DTYPE_F16},
                          std::pair{ATTN_DTYPE_F16, ATTN_DTYPE_BF16}}) {
        std::vector<u16> out;
        run(h, st, out, dt);
        for (uint32_t i = 0; i < 65536; ++i) {
            const float w = st == ATTN_DTYPE_BF16 ? cv::bf16_to_f32(u16(i)) : cv::f16_to_f32(u16(i));
            const u16 want = dt == ATTN_DTYPE_F16 ? cv::f32_to_f16(w) : cv::f32_to_bf16(w);
            ASSERT_EQ(out[i], want) << std::hex << i << " " << st << "->" << dt;
        }
        std::vector<u16> inplace = h;
        ASSERT_EQ(attn_convert(ctx(), 65536, inplace.data(), st, inplace.data(), dt), ATTN_OK);
        EXPECT_EQ(inplace, out);
    }
}

// f32 values between neighbours h < h+1 of the 16-bit type: the midpoint rounds to the even
// one, a float above it up, below it down. Covers every finite positive pattern (f16
// subnormals included), the overflow boundary (the neighbour of the largest finite value is
// inf) and, by sign, the negatives.
TEST_P(convert_test, midpoints_ties_to_even) {
    for (attn_dtype dt : {ATTN_DTYPE_BF16, ATTN_DTYPE_F16}) {
        // bf16 patterns with exponent 0 widen to f32 subnormals (flushed): start at 0x0080.
        const uint32_t first = dt == ATTN_DTYPE_BF16 ? 0x0080u : 0x0000u;
        const uint32_t last = dt == ATTN_DTYPE_BF16 ? 0x7f7fu : 0x7bffu;  // largest finite
        std::vector<float> x;
        std::vector<u16> want;
        for (uint32_t h = first; h <= last; ++h)
            for (uint32_t sign : {0u, 0x8000u}) {
                auto widen = [&](uint32_t p) {
                    return dt == ATTN_DTYPE_BF16 ? double(from_bits(p << 16))
                                                 : double(from_bits(f16_expected(u16(p))));
                };
                const double lo = widen(h), hi = h == last ? (dt == ATTN_DTYPE_BF16 ? 0x1p128 : 65536.0)
                                                           : widen(h + 1);
                const float mid = float((lo + hi) / 2);  // exact: one more bit than the type
                ASSERT_EQ(double(mid), (lo + hi) / 2);
                const float s = sign ? -1.0f : 1.0f;
                const u16 even = u16(((h & 1u) ? h + 1 : h) | sign);
                x.push_back(s * mid), want.push_back(even);
                x.push_back(s * std::nextafter(mid, INFINITY)), want.push_back(u16((h + 1) | sign));
                x.push_back(s * std::nextafter(mid, 0.0f)), want.push_back(u16(h | sign));
            }
        const std::vector<u16> got = narrow(x, dt);
        for (size_t i = 0; i < x.size(); ++i)
            ASSERT_EQ(got[i], want[i]) << "x = " << x[i] << " bits " << std::hex << bits(x[i]);
    }
}

TEST_P(convert_test, special_values) {
    struct row {
        uint32_t f32;
        u16 bf16, f16;
    };
    const row rows[] = {
        {0x00000000u, 0x0000, 0x0000},  // +0
        {0x80000000u, 0x8000, 0x8000},  // -0
        {0x7f800000u, 0x7f80, 0x7c00},  // +inf
        {0xff800000u, 0xff80, 0xfc00},  // -inf
        {0x7fc00000u, 0x7fc0, 0x7e00},  // quiet NaN
        {0x7f800001u, 0x7fc0, 0x7e00},  // signalling NaN, low payload: quieted
        {0xffa00000u, 0xffe0, 0xff00},  // negative signalling NaN: sign and payload top kept
        {0x7fbfe000u, 0x7fff, 0x7fff},  // payload top bits all set
        {0x00000001u, 0x0000, 0x0000},  // smallest f32 subnormal: +0 in both
        {0x807fffffu, 0x8000, 0x8000},  // largest negative f32 subnormal: -0
        {0x00800000u, 0x0080, 0x0000},  // smallest f32 normal: kept in bf16, 0 in f16
        {bits(65504.0f), 0x4780, 0x7bff},    // largest f16
        {bits(65519.99f), 0x4780, 0x7bff},   // just below the f16 overflow midpoint
        {bits(65520.0f), 0x4780, 0x7c00},    // the midpoint: rounds to even, which is inf
        {bits(-65520.0f), 0xc780, 0xfc00},
        {0x7f7fffffu, 0x7f80, 0x7c00},       // FLT_MAX: beyond both, inf
        {0x7f7f7fffu, 0x7f7f, 0x7c00},       // just below the bf16 overflow midpoint
        {bits(0x1p-24f), 0x3380, 0x0001},    // smallest f16 subnormal
        {bits(0x1p-25f), 0x3300, 0x0000},    // half of it: tie to even, 0
        {bits(0x1.000002p-25f), 0x3300, 0x0001},  // just above half: rounds up
        {bits(0x1.ffcp-15f), 0x3880, 0x0400},     // 1023.5 * 2^-24: ties up into the f16 normal 2^-14
        {bits(1.0f), 0x3f80, 0x3c00},
        {bits(-2.5f), 0xc020, 0xc100},
    };
    std::vector<float> x;
    for (const row &r : rows) x.push_back(from_bits(r.f32));
    const std::vector<u16> b = narrow(x, ATTN_DTYPE_BF16), h = narrow(x, ATTN_DTYPE_F16);
    for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_EQ(b[i], rows[i].bf16) << std::hex << rows[i].f32;
        EXPECT_EQ(h[i], rows[i].f16) << std::hex << rows[i].f32;
    }
}

// 2^22 random f32 patterns (every class: NaN, inf, subnormal, normal) equal bit for bit to
// the scalar rules, for both narrowings.
TEST_P(convert_test, random_f32_sweep_matches_scalar_rules) {
    const size_t n = size_t(1) << 22;
    std::mt19937 gen(20261201);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = from_bits(uint32_t(gen()));
    const std::vector<u16> b = narrow(x, ATTN_DTYPE_BF16), h = narrow(x, ATTN_DTYPE_F16);
    for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(b[i], cv::f32_to_bf16(x[i])) << std::hex << bits(x[i]);
        ASSERT_EQ(h[i], cv::f32_to_f16(x[i])) << std::hex << bits(x[i]);
    }
}

// Lengths around the vector widths, at an odd offset: only [0, n) is written, every element
// right, with the rest of the vector code's last step taken by the tail.
TEST_P(convert_test, tails_and_offsets) {
    std::mt19937 gen(7);
    for (int64_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 100, 65535, 65537, 200003}) {
        std::vector<float> x(size_t(n) + 2);
        for (auto &v : x) v = from_bits(uint32_t(gen()));
        for (attn_dtype dt : {ATTN_DTYPE_BF16, ATTN_DTYPE_F16}) {
            std::vector<u16> out(size_t(n) + 4, 0xabcd);
            ASSERT_EQ(attn_convert(ctx(), n, x.data() + 1, ATTN_DTYPE_F32, out.data() + 1, dt),
                      ATTN_OK);
            EXPECT_EQ(out[0], 0xabcd);
            EXPECT_EQ(out[size_t(n) + 1], 0xabcd) << "n = " << n;
            std::vector<float> wide(size_t(n) + 2, 7.0f);
            ASSERT_EQ(attn_convert(ctx(), n, out.data() + 1, dt, wide.data() + 1, ATTN_DTYPE_F32),
                      ATTN_OK);
            EXPECT_EQ(wide[0], 7.0f);
            EXPECT_EQ(wide[size_t(n) + 1], 7.0f);
            for (int64_t i = 0; i < n; ++i) {
                const float v = x[size_t(i) + 1];
                const u16 want = dt == ATTN_DTYPE_BF16 ? cv::f32_to_bf16(v) : cv::f32_to_f16(v);
                ASSERT_EQ(out[size_t(i) + 1], want) << "n = " << n << " i = " << i;
                const float w = dt == ATTN_DTYPE_BF16 ? cv::bf16_to_f32(want) : cv::f16_to_f32(want);
                ASSERT_EQ(bits(wide[size_t(i) + 1]), bits(w));
            }
        }
    }
}

// Equal types copy, out of place and in place.
TEST_P(convert_test, equal_types_copy) {
    std::vector<float> x = attn_test::random_tensor(1001, 3);
    std::vector<float> y(1001, 0.0f);
    ASSERT_EQ(attn_convert(ctx(), 1001, x.data(), ATTN_DTYPE_F32, y.data(), ATTN_DTYPE_F32), ATTN_OK);
    EXPECT_TRUE(attn_test::bitwise_equal(x, y));
    ASSERT_EQ(attn_convert(ctx(), 1001, x.data(), ATTN_DTYPE_F32, x.data(), ATTN_DTYPE_F32), ATTN_OK);
    EXPECT_TRUE(attn_test::bitwise_equal(x, y));
    std::vector<u16> h = all_patterns(), g(65536, 0);
    ASSERT_EQ(attn_convert(ctx(), 65536, h.data(), ATTN_DTYPE_F16, g.data(), ATTN_DTYPE_F16), ATTN_OK);
    EXPECT_EQ(g, h);
}

INSTANTIATE_TEST_SUITE_P(paths, convert_test, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

// Blocks are converted independently: one thread and two give the same bits (several blocks).
TEST(convert_threads, one_and_two_threads_agree) {
    std::mt19937 gen(11);
    std::vector<float> x(300007);
    for (auto &v : x) v = from_bits(uint32_t(gen()));
    for (auto &p : attn_test::simd_paths()) {
        auto c1 = attn_test::make_context(p.impl, p.isa, 1), c2 = attn_test::make_context(p.impl, p.isa, 2);
        for (attn_dtype dt : {ATTN_DTYPE_BF16, ATTN_DTYPE_F16}) {
            std::vector<u16> a(x.size()), b(x.size());
            ASSERT_EQ(attn_convert(c1.get(), int64_t(x.size()), x.data(), ATTN_DTYPE_F32, a.data(), dt), ATTN_OK);
            ASSERT_EQ(attn_convert(c2.get(), int64_t(x.size()), x.data(), ATTN_DTYPE_F32, b.data(), dt), ATTN_OK);
            EXPECT_EQ(a, b) << p.name;
            for (size_t i = 0; i < x.size(); i += 997)
                ASSERT_EQ(a[i], dt == ATTN_DTYPE_BF16 ? cv::f32_to_bf16(x[i]) : cv::f32_to_f16(x[i]));
        }
    }
}

TEST(convert_validation, messages) {
    std::vector<float> f(8, 1.0f);
    std::vector<u16> h(16, 0x1234);
    auto expect_error = [&](attn_status s, const std::string &msg) {
        EXPECT_EQ(s, ATTN_INVALID_ARGUMENT);
        EXPECT_NE(std::string(attn_last_error()).find(msg), std::string::npos) << attn_last_error();
        EXPECT_EQ(h, std::vector<u16>(16, 0x1234));  // nothing written
    };
    expect_error(attn_convert(nullptr, 8, f.data(), static_cast<attn_dtype>(9), h.data(), ATTN_DTYPE_BF16),
                 "attn_convert: src_type = 9, must be ATTN_DTYPE_F32 (0), ATTN_DTYPE_BF16 (1) or "
                 "ATTN_DTYPE_F16 (2)");
    expect_error(attn_convert(nullptr, 8, f.data(), ATTN_DTYPE_F32, h.data(), static_cast<attn_dtype>(-2)),
                 "attn_convert: dst_type = -2, must be ATTN_DTYPE_F32 (0)");
    expect_error(attn_convert(nullptr, -1, f.data(), ATTN_DTYPE_F32, h.data(), ATTN_DTYPE_BF16),
                 "attn_convert: n = -1, must be >= 0");
    expect_error(attn_convert(nullptr, 8, nullptr, ATTN_DTYPE_F32, h.data(), ATTN_DTYPE_BF16),
                 "attn_convert: src = NULL, must be non-null when n > 0");
    // f32 -> bf16 into the same buffer (element sizes differ) and shifted 16-bit in place.
    expect_error(attn_convert(nullptr, 4, h.data(), ATTN_DTYPE_F32, h.data(), ATTN_DTYPE_BF16),
                 "overlaps src");
    expect_error(attn_convert(nullptr, 8, h.data(), ATTN_DTYPE_BF16, h.data() + 1, ATTN_DTYPE_F16),
                 "attn_convert: dst = ");
    EXPECT_EQ(attn_convert(nullptr, 0, nullptr, ATTN_DTYPE_F32, nullptr, ATTN_DTYPE_F16), ATTN_OK);
}

}  // namespace
