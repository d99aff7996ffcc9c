// The AMX tile layer (src/kernels/amx/tiles.hpp): the software model's TDPBF16PS on cases
// computed by hand from the instruction's documented arithmetic, its checks of palette 1's
// limits, and, where the CPU and OS grant the tiles, the model against the real tiles bit
// for bit. Compiled with -mamx-tile -mamx-bf16 (tests/CMakeLists.txt) for amx_hw_tiles; the
// real tiles run only after the library has found them usable.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/amx/tiles.hpp"
#include "kernels/kernels.hpp"

namespace {

namespace amx = attn::kernels::amx;

uint32_t bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}
float from_bits(uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}
// The bf16 of an f32 whose low half is zero (every value used here is exact in bf16).
uint16_t bf(float x) { return uint16_t(bits(x) >> 16); }

// C (16 x 16 f32) += A (16 rows x 16 pairs) * B (16 pairs x 16 columns), full tiles 0, 1, 2.
struct tile_product {
    alignas(64) float c[16 * 16] = {};
    alignas(64) uint16_t a[16 * 32] = {};
    alignas(64) uint16_t b[16 * 32] = {};
    // A's pair p of row m; B's pair p of column n (element 2n + half of B's row p).
    uint16_t &a_at(int m, int p, int half) { return a[m * 32 + 2 * p + half]; }
    uint16_t &b_at(int p, int n, int half) { return b[p * 32 + 2 * n + half]; }

    template <class Tiles>
    std::vector<float> run() const {
        const amx::tile_guard<Tiles> guard(amx::uniform_config(3, 16, 64));
        alignas(64) float out[16 * 16];
        Tiles::template load<0>(c, 64);
        Tiles::template load<1>(a, 64);
        Tiles::template load<2>(b, 64);
        Tiles::template dpbf16ps<0, 1, 2>();
        Tiles::template store<0>(out, 64);
        return std::vector<float>(out, out + 256);
    }
};

// c[0][0] after one TDPBF16PS of the model with the given first row of A, first column of B.
float model_element(float c, std::vector<std::pair<float, float>> a_pairs,
                    std::vector<std::pair<float, float>> b_pairs) {
    tile_product t;
    t.c[0] = c;
    for (size_t p = 0; p < a_pairs.size(); ++p) {
        t.a_at(0, int(p), 0) = bf(a_pairs[p].first);
        t.a_at(0, int(p), 1) = bf(a_pairs[p].second);
        t.b_at(int(p), 0, 0) = bf(b_pairs[p].first);
        t.b_at(int(p), 0, 1) = bf(b_pairs[p].second);
    }
    return t.run<amx::amx_model_tiles>()[0];
}

const float two24 = 16777216.0f;

TEST(amx_model, pair_products_and_the_sum) {
    // 1 + (2*4 + 3*5) = 24; the guard leaves the model unconfigured
    EXPECT_EQ(model_element(1.0f, {{2, 3}}, {{4, 5}}), 24.0f);
    EXPECT_FALSE(amx::model::configured());
    // a whole row: sum over 16 pairs of (p+1)*1 + (p+1)*2 = 3 * 136
    std::vector<std::pair<float, float>> a, b;
    for (int p = 0; p < 16; ++p) {
        a.push_back({float(p + 1), float(p + 1)});
        b.push_back({1.0f, 2.0f});
    }
    EXPECT_EQ(model_element(0.0f, a, b), 408.0f);
}

// The documented order: first halves summed over k in one f32 sum, second halves in another,
// both from zero, then C + (first + second). Each case gives a different value in any other
// order (one running sum through both halves: 0 and 2^24 instead of 1 and 2^24 + 2).
TEST(amx_model, accumulation_order) {
    // first halves 2^24, 1, -2^24: 2^24 + 1 rounds to 2^24 (ties to even), then 0; second 1
    EXPECT_EQ(model_element(0.0f, {{two24, 1}, {1, 0}, {-two24, 0}}, {{1, 1}, {1, 0}, {1, 0}}),
              1.0f);
    // C is added last: 2^24 + (1 + 1) = 2^24 + 2, where C + 1 + 1 would stay 2^24
    EXPECT_EQ(model_element(two24, {{1, 1}}, {{1, 1}}), two24 + 2.0f);
    // products are exact in the sum: -2^-6 + (1 + 2^-7)^2 = 1 + 2^-14, and 2^24 + that rounds
    // up to 2^24 + 2; a product rounded to bf16 (1 + 2^-6) would leave 1, a tie, 2^24
    EXPECT_EQ(model_element(0.0f, {{-0x1p-6f, 0}, {1.0078125f, 0}, {1, 0}},
                            {{1, 0}, {1.0078125f, 0}, {two24, 0}}),
              two24 + 2.0f);
}

TEST(amx_model, subnormals_flushed) {
    const float flt_min = from_bits(0x00800000u), half_min = from_bits(0x00400000u);
    // a subnormal bf16 input reads as zero: 2^-127 * 2^100 would be 2^-27
    EXPECT_EQ(bits(model_element(0.0f, {{from_bits(0x00400000u), 0}}, {{0x1p100f, 0}})), 0u);
    // a subnormal C reads as zero: 2^-127 + 2^-126 gives 2^-126, not 1.5 * 2^-126
    EXPECT_EQ(model_element(half_min, {{0x1p-63f, 0}}, {{0x1p-63f, 0}}), flt_min);
    // a subnormal sum is written as zero: 2^-126 - 2^-127 (the product not flushed first)
    EXPECT_EQ(bits(model_element(0.0f, {{0x1p-63f, 0}, {0x1p-64f, 0}}, {{0x1p-63f, 0}, {-0x1p-63f, 0}})),
              0u);
    // a product below the normal range alone: 2^-70 * 2^-70 -> 0
    EXPECT_EQ(bits(model_element(0.0f, {{0x1p-70f, 0}}, {{0x1p-70f, 0}})), 0u);
}

TEST(amx_model, nan_and_infinity) {
    const float inf = INFINITY;
    auto run_bits = [](float c, uint16_t a0, uint16_t b0, uint16_t a1 = 0, uint16_t b1 = 0) {
        tile_product t;
        t.c[0] = c;
        t.a_at(0, 0, 0) = a0;
        t.b_at(0, 0, 0) = b0;
        t.a_at(0, 0, 1) = a1;
        t.b_at(0, 0, 1) = b1;
        return bits(t.run<amx::amx_model_tiles>()[0]);
    };
    EXPECT_EQ(run_bits(0.0f, bf(inf), 0), 0xffc00000u);                    // inf * 0: default NaN
    EXPECT_EQ(run_bits(0.0f, bf(inf), bf(1), bf(-inf), bf(1)), 0xffc00000u);  // inf - inf
    EXPECT_EQ(run_bits(0.0f, 0x7f81, bf(1)), 0x7fc10000u);  // a signalling NaN, quieted
    EXPECT_EQ(run_bits(0.0f, 0xffc1, 0x7fc2), 0xffc10000u);  // A's NaN before B's
    EXPECT_EQ(run_bits(from_bits(0x7fc00123u), 0x7fc1, bf(1)), 0x7fc00123u);  // C's NaN first
    EXPECT_EQ(run_bits(0.0f, 0x7f00, 0x7f00), 0x7f800000u);  // 2^127 * 2^127 overflows to inf
    EXPECT_EQ(run_bits(inf, bf(-1), bf(1)), 0x7f800000u);    // inf + finite
}

// Misuse ends the process with a message naming it, as the hardware faults.
TEST(amx_model_death, palette_limits_enforced) {
    testing::FLAGS_gtest_death_test_style = "threadsafe";
    EXPECT_DEATH(amx::model::configure(amx::uniform_config(1, 17, 64)), "more than 16 rows");
    EXPECT_DEATH(amx::model::configure(amx::uniform_config(1, 16, 68)), "more than 64 bytes");
    EXPECT_DEATH(amx::model::configure(amx::uniform_config(9, 16, 64)), "beyond palette 1's 8");
    amx::tile_config palette0 = amx::uniform_config(1, 16, 64);
    palette0.palette_id = 0;
    EXPECT_DEATH(amx::model::configure(palette0), "palette other than 1");
    alignas(64) float buf[256] = {};
    EXPECT_DEATH(amx::model::load(0, buf, 64), "without a configuration");
    EXPECT_DEATH(
        {
            amx::model::configure(amx::uniform_config(2, 16, 64));
            amx::model::load(2, buf, 64);
        },
        "not configured");
    EXPECT_DEATH(
        {
            amx::tile_config c = amx::uniform_config(3, 16, 64);
            c.rows[1] = 8;  // A of 8 rows against C of 16
            amx::model::configure(c);
            amx::model::dpbf16ps(0, 1, 2);
        },
        "rows of a differ");
    EXPECT_DEATH(
        {
            amx::model::configure(amx::uniform_config(3, 16, 64));
            amx::model::dpbf16ps(0, 0, 2);
        },
        "used twice");
}

// Random tiles over several exponent ranges (sums that cancel, products near the ends of the
// range, subnormal bf16 inputs, infinities and NaNs), the same bits on the model and the tiles.
TEST(amx_model, equals_the_real_tiles_bitwise) {
    if (!attn::kernels::isa_supported(ATTN_ISA_AMX))
        GTEST_SKIP() << "amx: this CPU (or its OS) lacks the tiles; the model alone is tested";
    std::mt19937 gen(20);
    int compared = 0;
    for (int trial = 0; trial < 24; ++trial) {
        tile_product t;
        const int spread = trial % 4 == 0 ? 120 : trial % 4 == 1 ? 40 : 8;
        auto random_bf16 = [&] {
            const uint32_t sign = gen() & 0x8000u, mantissa = gen() & 0x7fu;
            int e = 127 + int(gen() % (2 * spread + 1)) - spread;
            e = e < 0 ? 0 : e > 255 ? 255 : e;
            if (trial % 4 == 3 && gen() % 64 == 0) e = 255;  // inf or NaN
            return uint16_t(sign | uint32_t(e) << 7 | mantissa);
        };
        for (auto &x : t.a) x = random_bf16();
        for (auto &x : t.b) x = random_bf16();
        for (auto &x : t.c) x = trial % 2 ? std::ldexp(float(int(gen() % 2000001) - 1000000), -int(gen() % 40)) : 0.0f;
        const std::vector<float> model = t.run<amx::amx_model_tiles>();
        const std::vector<float> real = t.run<amx::amx_hw_tiles>();
        for (int i = 0; i < 256; ++i, ++compared)
            ASSERT_EQ(bits(model[size_t(i)]), bits(real[size_t(i)]))
                << "trial " << trial << " element " << i << ": model " << model[size_t(i)]
                << " tiles " << real[size_t(i)];
    }
    EXPECT_EQ(compared, 24 * 256);
}

}  // namespace
