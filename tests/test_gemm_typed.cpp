// attn_gemm with every combination of a/b/c types on every path, against a float64 product
// of the stored (widened) inputs. Tolerance: twice the largest error of a plain f32
// computation of the same widened inputs (products summed in f32 in index order, rounded
// once to c_type), plus 3 units in the last place of c_type at the element.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"
#include "ref/convert.hpp"
#include "test_util.hpp"

namespace {

using attn_test::path_test;
namespace cv = attn::convert;

const attn_dtype types[] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
const char *type_name(attn_dtype t) {
    return t == ATTN_DTYPE_F32 ? "f32" : t == ATTN_DTYPE_BF16 ? "bf16" : "f16";
}

// An array of one type: its bytes as the library sees them and the values they hold.
struct typed {
    attn_dtype type;
    std::vector<unsigned char> bytes;
    std::vector<float> value;  // the stored elements, widened (exact)
    typed(attn_dtype t, const std::vector<float> &x) : type(t), bytes(x.size() * attn_dtype_size(t)) {
        for (size_t i = 0; i < x.size(); ++i) set(i, x[i]);
    }
    void set(size_t i, float x) {
        if (type == ATTN_DTYPE_F32) {
            std::memcpy(&bytes[4 * i], &x, 4);
            value.resize(std::max(value.size(), i + 1)), value[i] = x;
            return;
        }
        const uint16_t h = type == ATTN_DTYPE_BF16 ? cv::f32_to_bf16(x) : cv::f32_to_f16(x);
        std::memcpy(&bytes[2 * i], &h, 2);
        value.resize(std::max(value.size(), i + 1));
        value[i] = type == ATTN_DTYPE_BF16 ? cv::bf16_to_f32(h) : cv::f16_to_f32(h);
    }
    float get(size_t i) const {  // reads the bytes (what the library wrote)
        if (type == ATTN_DTYPE_F32) {
            float x;
            std::memcpy(&x, &bytes[4 * i], 4);
            return x;
        }
        uint16_t h;
        std::memcpy(&h, &bytes[2 * i], 2);
        return type == ATTN_DTYPE_BF16 ? cv::bf16_to_f32(h) : cv::f16_to_f32(h);
    }
    void *data() { return bytes.data(); }
    void *at(int64_t i) { return bytes.data() + size_t(i) * attn_dtype_size(type); }
};

float round_to(attn_dtype t, float x) {
    if (t == ATTN_DTYPE_BF16) return cv::bf16_to_f32(cv::f32_to_bf16(x));
    if (t == ATTN_DTYPE_F16) return cv::f16_to_f32(cv::f32_to_f16(x));
    return x;
}

double ulp(attn_dtype t, double y) {
    const int bits = t == ATTN_DTYPE_F32 ? 23 : t == ATTN_DTYPE_BF16 ? 7 : 10;
    const int min_exp = t == ATTN_DTYPE_F16 ? -14 : -126;
    const int e = y == 0.0 ? min_exp : std::max(min_exp, std::ilogb(y));
    return std::ldexp(1.0, e - bits);
}

struct problem {
    int64_t m, n, k;
    attn_trans ta, tb;
    float alpha, beta;
    // lda and ldb exceed their minimum by pad_a and pad_b; A and B start `offset` elements
    // into their arrays (an odd offset of a 16-bit type: not 4-byte aligned).
    int64_t pad_a = 3, pad_b = 1, offset = 0;
};

// Runs attn_gemm on `ctx` and checks it against float64 on the operands as the products
// see them (rounded to bf16 first when fpmath_bf16).
void check_gemm(attn_context *ctx, const problem &pr, attn_dtype at, attn_dtype bt,
                attn_dtype ct, bool fpmath_bf16, uint32_t seed) {
    const int64_t m = pr.m, n = pr.n, k = pr.k;
    const int64_t lda = (pr.ta == ATTN_TRANS ? m : k) + pr.pad_a;
    const int64_t ldb = (pr.tb == ATTN_TRANS ? k : n) + pr.pad_b;
    const int64_t off = pr.offset;
    const int64_t ldc = n + 2;
    const int64_t a_rows = pr.ta == ATTN_TRANS ? k : m, b_rows = pr.tb == ATTN_TRANS ? n : k;
    typed a(at, attn_test::random_tensor(size_t(off + a_rows * lda), seed));
    typed b(bt, attn_test::random_tensor(size_t(off + b_rows * ldb), seed + 1));
    typed c(ct, attn_test::random_tensor(size_t(m * ldc), seed + 2, -2.0f, 2.0f));
    const std::vector<float> c0 = c.value;
    if (pr.beta == 0.0f)  // C must not be read: a NaN there is ignored
        for (size_t i = 0; i < c0.size(); ++i) c.set(i, NAN);
    auto op = [&](const typed &x, size_t idx) {
        const float v = x.value[idx];
        return fpmath_bf16 && x.type != ATTN_DTYPE_BF16 ? round_to(ATTN_DTYPE_BF16, v) : v;
    };
    auto a_at = [&](int64_t i, int64_t p) {
        return op(a, size_t(off + (pr.ta == ATTN_TRANS ? p * lda + i : i * lda + p)));
    };
    auto b_at = [&](int64_t p, int64_t j) {
        return op(b, size_t(off + (pr.tb == ATTN_TRANS ? j * ldb + p : p * ldb + j)));
    };
    std::vector<double> want(size_t(m * n));
    std::vector<float> plain(size_t(m * n));
    double plain_err = 0.0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double d = 0.0;
            float f = 0.0f;
            for (int64_t p = 0; p < k; ++p) {
                d += double(a_at(i, p)) * double(b_at(p, j));
                f += a_at(i, p) * b_at(p, j);
            }
            const double cij = pr.beta == 0.0f ? 0.0 : double(c0[size_t(i * ldc + j)]);
            d = double(pr.alpha) * d + double(pr.beta) * cij;
            const float fr = round_to(ct, pr.alpha * f + pr.beta * float(cij));
            want[size_t(i * n + j)] = d;
            plain_err = std::max(plain_err, std::fabs(double(fr) - d));
        }
    const std::vector<unsigned char> before = c.bytes;
    ASSERT_EQ(attn_gemm(ctx, pr.ta, pr.tb, m, n, k, pr.alpha, a.at(off), at, lda, b.at(off), bt,
                        ldb, pr.beta, c.data(), ct, ldc),
              ATTN_OK)
        << attn_last_error();
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            const double d = want[size_t(i * n + j)], got = c.get(size_t(i * ldc + j));
            const double tol = 2.0 * plain_err + 3.0 * ulp(ct, std::fabs(d));
            ASSERT_LE(std::fabs(got - d), tol)
                << type_name(at) << "*" << type_name(bt) << "->" << type_name(ct) << " " << m
                << "x" << n << "x" << k << " ta " << pr.ta << " tb " << pr.tb << " alpha "
                << pr.alpha << " beta " << pr.beta << " at (" << i << "," << j << ")";
        }
        for (int64_t j = n; j < ldc; ++j)  // the padding of C is not written
            for (size_t byte = 0; byte < attn_dtype_size(ct); ++byte) {
                const size_t at_byte = size_t(i * ldc + j) * attn_dtype_size(ct) + byte;
                ASSERT_EQ(c.bytes[at_byte], before[at_byte]);
            }
    }
}

class gemm_typed_test : public path_test {};

TEST_P(gemm_typed_test, every_type_combination) {
    const int64_t shapes[][3] = {{1, 1, 1}, {17, 33, 65}, {64, 48, 129}};
    uint32_t seed = 100;
    for (auto &s : shapes)
        for (attn_trans ta : {ATTN_NO_TRANS, ATTN_TRANS})
            for (attn_trans tb : {ATTN_NO_TRANS, ATTN_TRANS})
                for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.75f, -0.5f}})
                    for (attn_dtype at : types)
                        for (attn_dtype bt : types)
                            for (attn_dtype ct : types) {
                                check_gemm(ctx(), {s[0], s[1], s[2], ta, tb, alpha, beta}, at, bt,
                                           ct, false, seed++);
                                if (HasFatalFailure()) return;
                            }
}

// Under ATTN_FPMATH_BF16 the products are those of the inputs rounded to bf16: the result
// is within the tolerance of that computation (and far outside the strict one's for f32
// inputs, whose bf16 rounding errors are ~2^-9 of each element).
TEST_P(gemm_typed_test, fpmath_bf16_rounds_inputs) {
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = GetParam().impl;
    cfg.max_isa = GetParam().isa;
    cfg.fpmath = ATTN_FPMATH_BF16;
    attn_context *raw = nullptr;
    ASSERT_EQ(attn_context_create(&cfg, &raw), ATTN_OK);
    attn_test::context_ptr c(raw);
    uint32_t seed = 900;
    for (attn_dtype at : types)
        for (attn_dtype bt : types) {
            check_gemm(c.get(), {37, 29, 300, ATTN_NO_TRANS, ATTN_TRANS, 1.0f, 0.5f}, at, bt,
                       ATTN_DTYPE_F32, true, seed++);
            if (HasFatalFailure()) return;
        }
}

// k == 0: C = beta * C rounded to c_type; beta == 0 gives zeros without reading C (NaN).
TEST_P(gemm_typed_test, k_zero) {
    for (attn_dtype ct : types) {
        for (float beta : {0.0f, 2.0f}) {
            typed c(ct, attn_test::random_tensor(5 * 7, 4, -3.0f, 3.0f));
            const std::vector<float> c0 = c.value;
            if (beta == 0.0f)
                for (size_t i = 0; i < c0.size(); ++i) c.set(i, NAN);
            ASSERT_EQ(attn_gemm(ctx(), ATTN_NO_TRANS, ATTN_NO_TRANS, 5, 7, 0, 1.0f, nullptr,
                                ATTN_DTYPE_BF16, 1, nullptr, ATTN_DTYPE_F16, 7, beta, c.data(),
                                ct, 7),
                      ATTN_OK)
                << attn_last_error();
            for (size_t i = 0; i < c0.size(); ++i) {
                const float want = beta == 0.0f ? 0.0f : round_to(ct, beta * c0[i]);
                ASSERT_EQ(c.get(i), want) << type_name(ct) << " beta " << beta << " i " << i;
                if (beta == 0.0f) ASSERT_FALSE(std::signbit(c.get(i)));
            }
        }
    }
}

// The products as bf16 pairs (the VDPBF16PS panels of the avx512_bf16 and amx levels, the
// f32 panels elsewhere): bf16 A and B, odd and even k (one and two depth blocks: the pair
// panels are 1024 deep), both transposes, beta 0 over a NaN C, even and odd leading
// dimensions (words read in place, or the rows converted first) and A and B starting off a
// 4-byte boundary. Same tolerance rule.
TEST_P(gemm_typed_test, bf16_products_odd_shapes) {
    const int64_t shapes[][3] = {{1, 1, 1}, {17, 33, 65}, {129, 47, 257}, {13, 70, 1501}, {3, 5, 2}};
    const std::pair<float, float> scalings[] = {{1.0f, 0.0f}, {-1.5f, 0.25f}};
    uint32_t seed = 3000;
    // Every shape with every transpose and every ld/offset (pad 0 and 1: one of them gives
    // an even ld whatever k's parity); the scaling and C's type swept along those twelve, so
    // each shape meets both of each.
    for (auto &s : shapes) {
        int combo = 0;
        for (attn_trans ta : {ATTN_NO_TRANS, ATTN_TRANS})
            for (attn_trans tb : {ATTN_NO_TRANS, ATTN_TRANS})
                for (auto [pad, offset] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{1, 1}}) {
                    const auto [alpha, beta] = scalings[combo % 2];
                    const attn_dtype ct = (combo / 2) % 2 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
                    ++combo;
                    problem pr{s[0], s[1], s[2], ta, tb, alpha, beta};
                    pr.pad_a = pr.pad_b = pad;
                    pr.offset = offset;
                    check_gemm(ctx(), pr, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, ct, false, seed++);
                    if (HasFatalFailure()) return;
                }
    }
}

attn_test::context_ptr fpmath_bf16_context(attn_impl impl, attn_isa isa, int threads = 0) {
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = impl;
    cfg.max_isa = isa;
    cfg.num_threads = threads;
    cfg.fpmath = ATTN_FPMATH_BF16;
    attn_context *raw = nullptr;
    if (attn_context_create(&cfg, &raw) != ATTN_OK) return nullptr;
    return attn_test::context_ptr(raw);
}

// f32 and f16 inputs under ATTN_FPMATH_BF16 are rounded to bf16 while packed into pairs:
// both transposes, odd k and odd leading dimensions.
TEST_P(gemm_typed_test, fpmath_bf16_pairs_both_transposes) {
    attn_test::context_ptr c = fpmath_bf16_context(GetParam().impl, GetParam().isa);
    ASSERT_TRUE(c);
    uint32_t seed = 4000;
    for (auto s : {std::vector<int64_t>{129, 47, 257}, std::vector<int64_t>{20, 37, 1100}})
        for (attn_trans ta : {ATTN_NO_TRANS, ATTN_TRANS})
            for (attn_trans tb : {ATTN_NO_TRANS, ATTN_TRANS})
                for (auto [at, bt] : {std::pair{ATTN_DTYPE_F32, ATTN_DTYPE_F32},
                                      std::pair{ATTN_DTYPE_F16, ATTN_DTYPE_BF16},
                                      std::pair{ATTN_DTYPE_BF16, ATTN_DTYPE_F32}}) {
                    problem pr{s[0], s[1], s[2], ta, tb, 0.5f, 0.0f};
                    pr.pad_a = 1;
                    check_gemm(c.get(), pr, at, bt, ATTN_DTYPE_F32, true, seed++);
                    if (HasFatalFailure()) return;
                }
}

INSTANTIATE_TEST_SUITE_P(paths, gemm_typed_test, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

// attn_gemm_f32 is attn_gemm with three F32 types, bit for bit, on every SIMD path (shapes
// past one depth block and one row block, both transposes, beta != 0).
TEST(gemm_typed_simd, f32_entry_points_bitwise_equal) {
    for (auto &p : attn_test::simd_paths()) {
        auto ctx = attn_test::make_context(p.impl, p.isa);
        for (auto s : {std::vector<int64_t>{130, 70, 700}, std::vector<int64_t>{5, 3, 2}})
            for (attn_trans ta : {ATTN_NO_TRANS, ATTN_TRANS}) {
                const int64_t m = s[0], n = s[1], k = s[2];
                const int64_t lda = ta == ATTN_TRANS ? m : k;
                std::vector<float> a = attn_test::random_tensor(size_t(m * k), 1);
                std::vector<float> b = attn_test::random_tensor(size_t(k * n), 2);
                std::vector<float> c1 = attn_test::random_tensor(size_t(m * n), 3), c2 = c1;
                ASSERT_EQ(attn_gemm_f32(ctx.get(), ta, ATTN_TRANS, m, n, k, 0.5f, a.data(), lda,
                                        b.data(), k, 0.25f, c1.data(), n),
                          ATTN_OK);
                ASSERT_EQ(attn_gemm(ctx.get(), ta, ATTN_TRANS, m, n, k, 0.5f, a.data(),
                                    ATTN_DTYPE_F32, lda, b.data(), ATTN_DTYPE_F32, k, 0.25f,
                                    c2.data(), ATTN_DTYPE_F32, n),
                          ATTN_OK);
                EXPECT_TRUE(attn_test::bitwise_equal(c1, c2)) << p.name;
            }
    }
}

// One thread and two give the same bits, with 16-bit inputs and a 16-bit C.
TEST(gemm_typed_simd, one_and_two_threads_bitwise) {
    ATTN_SKIP_UNLESS_THREADS(2);
    const int64_t m = 200, n = 150, k = 700;
    typed a(ATTN_DTYPE_BF16, attn_test::random_tensor(size_t(m * k), 5));
    typed b(ATTN_DTYPE_F16, attn_test::random_tensor(size_t(k * n), 6));
    for (auto &p : attn_test::simd_paths()) {
        std::vector<std::vector<unsigned char>> out;
        for (int threads : {1, 2}) {
            auto ctx = attn_test::make_context(p.impl, p.isa, threads);
            typed c(ATTN_DTYPE_BF16, attn_test::random_tensor(size_t(m * n), 7));
            ASSERT_EQ(attn_gemm(ctx.get(), ATTN_NO_TRANS, ATTN_NO_TRANS, m, n, k, 1.0f, a.data(),
                                a.type, k, b.data(), b.type, n, 1.0f, c.data(), c.type, n),
                      ATTN_OK);
            out.push_back(c.bytes);
        }
        EXPECT_EQ(out[0], out[1]) << p.name;
    }
}

// The same for the pair panels: bf16 A and B (strict) and f32 A and B under fpmath bf16,
// several row blocks and two depth blocks, both transposes; n = 70: two whole column panels
// of 32 and a partial one (the threads share the rows).
TEST(gemm_typed_simd, pair_panels_one_and_two_threads_bitwise) {
    ATTN_SKIP_UNLESS_THREADS(2);
    const int64_t m = 530, n = 70, k = 1301;
    typed a16(ATTN_DTYPE_BF16, attn_test::random_tensor(size_t(m * k), 8));
    typed b16(ATTN_DTYPE_BF16, attn_test::random_tensor(size_t(k * n), 9));
    typed a32(ATTN_DTYPE_F32, attn_test::random_tensor(size_t(m * k), 10));
    typed b32(ATTN_DTYPE_F32, attn_test::random_tensor(size_t(k * n), 11));
    for (auto &p : attn_test::simd_paths())
        for (bool fpmath : {false, true})
            for (attn_trans t : {ATTN_NO_TRANS, ATTN_TRANS}) {
                // the tile model (scalar, the slowest path by far) sweeps the two options
                // together rather than multiplying them: strict with no transpose, fpmath
                // bf16 with both transposed
                if (p.isa == ATTN_ISA_AMX_EMULATED && fpmath != (t == ATTN_TRANS)) continue;
                typed &a = fpmath ? a32 : a16, &b = fpmath ? b32 : b16;
                std::vector<std::vector<float>> out;
                for (int threads : {1, 2}) {
                    auto ctx = fpmath ? fpmath_bf16_context(p.impl, p.isa, threads)
                                      : attn_test::make_context(p.impl, p.isa, threads);
                    std::vector<float> c = attn_test::random_tensor(size_t(m * n), 12);
                    ASSERT_EQ(attn_gemm(ctx.get(), t, t, m, n, k, 1.25f, a.data(), a.type,
                                        t == ATTN_TRANS ? m : k, b.data(), b.type,
                                        t == ATTN_TRANS ? k : n, 0.5f, c.data(), ATTN_DTYPE_F32, n),
                              ATTN_OK);
                    out.push_back(c);
                }
                EXPECT_TRUE(attn_test::bitwise_equal(out[0], out[1]))
                    << p.name << " fpmath " << fpmath << " trans " << t;
            }
}

// The pair kernels are there exactly on the levels with VDPBF16PS.
TEST(gemm_typed_simd, pair_kernels_on_the_bf16_levels) {
    for (auto &p : attn_test::simd_paths()) {
        const attn::kernels::kernel_table *kt = attn::kernels::kernel_table_for(p.isa);
        ASSERT_NE(kt, nullptr);
        const bool bf16_level = p.isa == ATTN_ISA_AVX512_BF16 || p.isa == ATTN_ISA_AMX ||
                                p.isa == ATTN_ISA_AMX_EMULATED;
        EXPECT_EQ(kt->gemm_micro_kernel_bf16 != nullptr, bf16_level) << p.name;
        EXPECT_EQ(kt->gemm_pack_a_bf16 != nullptr, bf16_level) << p.name;
        EXPECT_EQ(kt->gemm_pack_b_bf16 != nullptr, bf16_level) << p.name;
        if (bf16_level) EXPECT_EQ(kt->gemm_kc_bf16 % 2, 0);
    }
}

TEST(gemm_typed_validation, dtype_messages_and_element_sizes) {
    std::vector<uint16_t> buf(64, 0x3f80);
    const auto bad = static_cast<attn_dtype>(9);
    auto expect_error = [&](attn_status s, const std::string &msg) {
        EXPECT_EQ(s, ATTN_INVALID_ARGUMENT);
        EXPECT_NE(std::string(attn_last_error()).find(msg), std::string::npos) << attn_last_error();
        EXPECT_EQ(buf, std::vector<uint16_t>(64, 0x3f80));
    };
    uint16_t *a = buf.data(), *b = a + 16, *c = b + 16;
    const char *rule = ", must be ATTN_DTYPE_F32 (0), ATTN_DTYPE_BF16 (1) or ATTN_DTYPE_F16 (2)";
    expect_error(attn_gemm(nullptr, ATTN_NO_TRANS, ATTN_NO_TRANS, 4, 4, 4, 1.0f, a, bad, 4, b,
                           ATTN_DTYPE_BF16, 4, 0.0f, c, ATTN_DTYPE_BF16, 4),
                 std::string("attn_gemm: a_type = 9") + rule);
    expect_error(attn_gemm(nullptr, ATTN_NO_TRANS, ATTN_NO_TRANS, 4, 4, 4, 1.0f, a,
                           ATTN_DTYPE_BF16, 4, b, bad, 4, 0.0f, c, ATTN_DTYPE_BF16, 4),
                 std::string("attn_gemm: b_type = 9") + rule);
    expect_error(attn_gemm(nullptr, ATTN_NO_TRANS, ATTN_NO_TRANS, 4, 4, 4, 1.0f, a,
                           ATTN_DTYPE_BF16, 4, b, ATTN_DTYPE_BF16, 4, 0.0f, c,
                           static_cast<attn_dtype>(-1), 4),
                 "attn_gemm: c_type = -1, must be ATTN_DTYPE_F32 (0)");
    expect_error(attn_gemm(nullptr, ATTN_NO_TRANS, ATTN_NO_TRANS, 4, 4, 4, 1.0f, a,
                           ATTN_DTYPE_BF16, 3, b, ATTN_DTYPE_BF16, 4, 0.0f, c, ATTN_DTYPE_BF16, 4),
                 "attn_gemm: lda = 3, must be >= max(1, k) = 4");
    // 16-bit spans: c right after b is disjoint at 2 bytes an element...
    EXPECT_EQ(attn_gemm(nullptr, ATTN_NO_TRANS, ATTN_NO_TRANS, 4, 4, 4, 1.0f, a, ATTN_DTYPE_BF16,
                        4, b, ATTN_DTYPE_BF16, 4, 0.0f, c, ATTN_DTYPE_BF16, 4),
              ATTN_OK)
        << attn_last_error();
    EXPECT_EQ(c[0], cv::f32_to_bf16(4.0f));  // 1 * 1 summed over k = 4
    buf.assign(64, 0x3f80);
    // ...but read as f32, b (16 elements, 64 bytes) runs over c.
    expect_error(attn_gemm(nullptr, ATTN_NO_TRANS, ATTN_NO_TRANS, 4, 4, 4, 1.0f, a,
                           ATTN_DTYPE_BF16, 4, b, ATTN_DTYPE_F32, 4, 0.0f, c, ATTN_DTYPE_BF16, 4),
                 "attn_gemm: c = ");
}

}  // namespace
