// The kernels' exp, exp2, exp_for_bf16 and tanh (src/kernels/vec_math.hpp) on every ISA,
// through the kernel table: error against the functions in double over dense sweeps of their
// whole ranges, plus special values.
//
// Stated bounds: exp at most 2 ulp everywhere (measured 0.90 ulp with FMA, 1.20 ulp on SSE4
// without it), subnormal results included; exactly +0 below about -103.97 and +inf above
// about 88.72. exp2 at most 3 ulp (measured 1.11-1.28), subnormals included; +0 below -150,
// +inf from 128. tanh at most 3 ulp (TanhWithinThreeUlp). exp_for_bf16 within
// 3.0e-6 + 7.5e-8 |x| relative (ExpForBf16WithinItsBound).
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels.hpp"
#include "test_util.hpp"

namespace {

using attn_test::path;

class VecMath : public testing::TestWithParam<path> {
  protected:
    std::vector<float> exp_of(const std::vector<float> &x) const {
        std::vector<float> y(x.size());
        attn::kernels::kernel_table_for(GetParam().isa)->exp_array(x.data(), y.data(),
                                                                   int64_t(x.size()));
        return y;
    }
};

// |got - want| in units of the spacing of floats at want (2^-149 for subnormals).
double ulp_error(float got, double want) {
    const double ulp = want < std::ldexp(1.0, -126)
                           ? std::ldexp(1.0, -149)
                           : std::ldexp(1.0, std::ilogb(want) - 23);
    return std::fabs(double(got) - want) / ulp;
}

// The largest ulp error of y[i] against want(x[i]) in double, where the true value is a
// float; above FLT_MAX y must be +inf, below 2^-150 exactly +0. worst_x: where it occurs.
template <class Want>
double worst_ulp(const std::vector<float> &x, const std::vector<float> &y, Want want_of,
                 float *worst_x) {
    double worst = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double want = want_of(double(x[i]));
        if (want > double(std::numeric_limits<float>::max())) {
            EXPECT_EQ(y[i], std::numeric_limits<float>::infinity()) << "x = " << x[i];
            continue;
        }
        if (want < std::ldexp(1.0, -150)) {
            EXPECT_EQ(y[i], 0.0f) << "x = " << x[i];
            continue;
        }
        const double e = ulp_error(y[i], want);
        if (e > worst) {
            worst = e;
            *worst_x = x[i];
        }
    }
    return worst;
}

// What every exponential of the kernels gives at the special values: -inf -> +0, +inf ->
// +inf, NaN -> NaN, +-0 -> 1 exactly, -1e30 -> +0, 1e30 -> +inf.
void expect_exp_special_values(void (*exp_array)(const float *, float *, int64_t)) {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> y = {-inf, inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f,
                            -1e30f, 1e30f};
    exp_array(y.data(), y.data(), int64_t(y.size()));
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[1], inf);
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_EQ(y[3], 1.0f);
    EXPECT_EQ(y[4], 1.0f);
    EXPECT_EQ(y[5], 0.0f);
    EXPECT_EQ(y[6], inf);
}

TEST_P(VecMath, ExpWithinTwoUlpOverTheWholeRange) {
    std::vector<float> x;
    for (double v = -104.0; v <= 89.0; v += 3e-4) x.push_back(float(v));
    // Tiny arguments, where exp(x) ~ 1 + x must not lose x.
    for (int e = 1; e <= 40; ++e)
        for (float s : {-1.0f, 1.0f}) x.push_back(s * std::ldexp(1.1f, -e));
    const std::vector<float> y = exp_of(x);
    float worst_x = 0.0f;
    const double worst = worst_ulp(x, y, [](double v) { return std::exp(v); }, &worst_x);
    RecordProperty("max_ulp", std::to_string(worst));
    EXPECT_LE(worst, 2.0) << "worst at x = " << worst_x;
    EXPECT_GT(worst, 0.0);  // the sweep really compared something
}

TEST_P(VecMath, ExpSpecialValues) {
    expect_exp_special_values(attn::kernels::kernel_table_for(GetParam().isa)->exp_array);
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> x = {-104.0f, 88.72f, 88.73f, -87.33f, -103.9f, 1.0f};
    const std::vector<float> y = exp_of(x);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_TRUE(std::isfinite(y[1]));  // exp(88.72) ~ 3.40e38 < FLT_MAX
    EXPECT_LE(ulp_error(y[1], std::exp(double(x[1]))), 2.0);
    EXPECT_EQ(y[2], inf);
    // Subnormal results are rounded, not flushed: exp(-87.33) ~ 1.2e-38, exp(-103.9) ~ 7e-46.
    EXPECT_LE(ulp_error(y[3], std::exp(double(x[3]))), 2.0);
    EXPECT_GT(y[4], 0.0f);
    EXPECT_EQ(y[5], float(std::exp(1.0)));
}

TEST_P(VecMath, Exp2WithinThreeUlpOverTheWholeRange) {
    std::vector<float> x;
    for (double v = -152.0; v <= 129.0; v += 4e-4) x.push_back(float(v));
    for (int e = 1; e <= 40; ++e)  // around 0, from both sides: the reduction gives f = 1 there
        for (float s : {-1.0f, 1.0f}) x.push_back(s * std::ldexp(1.3f, -e));
    for (int n = -149; n <= 127; ++n) x.push_back(float(n));  // exact powers of two
    std::vector<float> y(x.size());
    attn::kernels::kernel_table_for(GetParam().isa)->exp2_array(x.data(), y.data(),
                                                                int64_t(x.size()));
    float worst_x = 0.0f;
    const double worst = worst_ulp(x, y, [](double v) { return std::exp2(v); }, &worst_x);
    RecordProperty("max_ulp", std::to_string(worst));
    EXPECT_LE(worst, 3.0) << "worst at x = " << worst_x;
    EXPECT_GT(worst, 0.0);
    const auto exp2_array = attn::kernels::kernel_table_for(GetParam().isa)->exp2_array;
    expect_exp_special_values(exp2_array);
    std::vector<float> special = {-1.0f, -126.0f, -149.0f, -151.0f};
    exp2_array(special.data(), special.data(), int64_t(special.size()));
    EXPECT_EQ(special[0], 0.5f);
    EXPECT_EQ(special[1], std::ldexp(1.0f, -126));
    EXPECT_EQ(special[2], std::ldexp(1.0f, -149));  // the smallest subnormal, not flushed
    EXPECT_EQ(special[3], 0.0f);
}

// exp_for_bf16 (the pair paths' softmax, whose P is rounded to bf16): within
// 3.0e-6 + 7.5e-8 |x| of e^x relative (the polynomial's error; the rounding of x log2 e and
// of log2 e itself, 2^-24 + 1.3e-8 of x)
// wherever e^x is a normal float, within that plus half the smallest subnormal below, +0
// below -104; e^0 exactly 1 (the row's largest score gives P = 1); -inf -> +0, NaN -> NaN.
// ISAs without the pair path use exp itself (2 ulp). worst: the largest error as a multiple
// of the bound.
TEST_P(VecMath, ExpForBf16WithinItsBound) {
    std::vector<float> x;
    for (double v = -110.0; v <= 88.5; v += 3e-4) x.push_back(float(v));
    for (int e = 1; e <= 40; ++e)  // around 0, from both sides
        for (float s : {-1.0f, 1.0f}) x.push_back(s * std::ldexp(1.3f, -e));
    std::vector<float> y(x.size());
    attn::kernels::kernel_table_for(GetParam().isa)->exp_for_bf16_array(x.data(), y.data(),
                                                                        int64_t(x.size()));
    double worst = 0.0;
    float worst_x = 0.0f;
    for (size_t i = 0; i < x.size(); ++i) {
        const double want = std::exp(double(x[i]));
        const double bound = 3.0e-6 + 7.5e-8 * std::fabs(double(x[i]));
        if (want > double(std::numeric_limits<float>::max())) {
            EXPECT_EQ(y[i], std::numeric_limits<float>::infinity()) << "x = " << x[i];
        } else if (x[i] < -104.0f) {
            EXPECT_EQ(y[i], 0.0f) << "x = " << x[i];
        } else if (want < std::ldexp(1.0, -126)) {
            EXPECT_LE(std::fabs(double(y[i]) - want), bound * want + std::ldexp(1.0, -150))
                << "x = " << x[i];
        } else {
            const double e = std::fabs(double(y[i]) / want - 1.0) / bound;
            if (e > worst) {
                worst = e;
                worst_x = x[i];
            }
        }
    }
    RecordProperty("worst_of_bound", std::to_string(worst));
    EXPECT_LE(worst, 1.0) << "worst at x = " << worst_x;
    EXPECT_GT(worst, 0.0);
    expect_exp_special_values(attn::kernels::kernel_table_for(GetParam().isa)->exp_for_bf16_array);
}

// tanh (the softcap's): at most 3 ulp against std::tanh in double over [-20, 20] (where it
// saturates to +-1), tiny and subnormal arguments (tanh x = x there), large ones, and the
// special values: +-inf -> +-1, NaN -> NaN, -0 -> -0.
TEST_P(VecMath, TanhWithinThreeUlp) {
    std::vector<float> x;
    for (double v = -20.0; v <= 20.0; v += 1e-4) x.push_back(float(v));
    for (int e = 1; e <= 149; ++e)
        for (float s : {-1.0f, 1.0f}) x.push_back(s * std::ldexp(1.3f, -e));
    for (float big : {30.0f, 44.5f, 88.0f, 1e10f, 1e30f, 3.4e38f}) x.push_back(big), x.push_back(-big);
    std::vector<float> y(x.size());
    attn::kernels::kernel_table_for(GetParam().isa)->tanh_array(x.data(), y.data(), int64_t(x.size()));
    double worst = 0.0;
    float worst_x = 0.0f;
    for (size_t i = 0; i < x.size(); ++i) {
        const double want = std::tanh(double(x[i]));
        ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << "x = " << x[i];
        const double e = ulp_error(std::fabs(y[i]), std::fabs(want));
        if (e > worst) worst = e, worst_x = x[i];
    }
    RecordProperty("max_ulp", std::to_string(worst));
    EXPECT_LE(worst, 3.0) << "worst at x = " << worst_x;
    EXPECT_GT(worst, 0.0);
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> special = {-inf, inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f,
                                  std::ldexp(1.0f, -149), 1e-20f};
    attn::kernels::kernel_table_for(GetParam().isa)
        ->tanh_array(special.data(), special.data(), int64_t(special.size()));
    EXPECT_EQ(special[0], -1.0f);
    EXPECT_EQ(special[1], 1.0f);
    EXPECT_TRUE(std::isnan(special[2]));
    EXPECT_EQ(special[3], 0.0f);
    EXPECT_TRUE(special[4] == 0.0f && std::signbit(special[4]));
    EXPECT_EQ(special[5], std::ldexp(1.0f, -149));
    EXPECT_EQ(special[6], 1e-20f);
}

// A length that is not a multiple of the vector width exercises the tail.
TEST_P(VecMath, ExpArrayTailAndInPlace) {
    std::vector<float> x(37);
    for (size_t i = 0; i < x.size(); ++i) x[i] = -5.0f + 0.3f * float(i);
    std::vector<float> y = exp_of(x);
    std::vector<float> in_place = x;
    attn::kernels::kernel_table_for(GetParam().isa)
        ->exp_array(in_place.data(), in_place.data(), int64_t(in_place.size()));
    for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_LE(ulp_error(y[i], std::exp(double(x[i]))), 2.0) << i;
        EXPECT_EQ(in_place[i], y[i]) << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, VecMath, testing::ValuesIn(attn_test::simd_paths()),
                         attn_test::path_name);

}  // namespace
