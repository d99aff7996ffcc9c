// Argument validation of the 0.3 additions: the quantized types in every type field, the
// scale and zero-point fields of attn_sdpa_desc, the packed-sequence fields (not computed
// yet: ATTN_UNSUPPORTED), and attn_quantize. One case per rule, each checking the status, the
// message (function, field, value) and that no output was written (valid calls: their exact
// output), on the reference and the SIMD implementation.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::make_context;

struct outcome {
    attn_status status;
    std::vector<std::string> message;  // substrings of attn_last_error()
};

void expect_outcome(attn_status got, const outcome &want, const std::string &name) {
    EXPECT_EQ(got, want.status) << name << ": " << attn_last_error();
    for (const std::string &m : want.message)
        EXPECT_NE(std::string(attn_last_error()).find(m), std::string::npos)
            << name << ": \"" << attn_last_error() << "\" lacks \"" << m << "\"";
}

const attn_impl kImpls[] = {ATTN_IMPL_REFERENCE, ATTN_IMPL_SIMD};
constexpr float kSentinel = 1234.5f;  // what outputs hold before a call

// ---- attn_sdpa with quantized K/V fields -------------------------------------------------

// batch 1, heads 2, len_q 3, len_kv 4, dim 8; K/V as an I8 cache with a scale per row.
// A valid call: ATTN_OK, and every output element the value the cache holds (every key and
// every value row alike, so the weights do not matter).
struct accepted {
    float value_even, value_odd;  // output columns 2c and 2c + 1
};

struct sdpa_case {
    std::string name;
    std::function<void(attn_sdpa_desc &)> mutate;
    outcome want;
    accepted values = {0.0f, 0.0f};
};


std::vector<sdpa_case> sdpa_cases(const float *scales, const int32_t *starts) {
    using d_t = attn_sdpa_desc;
    return {
        // bytes 1, scales 0.5: I8 elements 0.5; E5M2 code 1 is 2^-16 (scale 1); U4 elements
        // alternate nibbles 1 and 0, less the zero point 0.5, times 0.5
        {"a valid I8 cache", [](d_t &) {}, {ATTN_OK, {}}, {0.5f, 0.5f}},
        {"FP8 without scales (1)", [](d_t &d) { d.kv_type = ATTN_DTYPE_FP8_E5M2; d.k_scale = d.v_scale = nullptr; },
         {ATTN_OK, {}}, {0x1p-16f, 0x1p-16f}},
        {"U4 with zero points", [=](d_t &d) { d.kv_type = ATTN_DTYPE_U4; d.k_zero = d.v_zero = scales; },
         {ATTN_OK, {}}, {0.25f, -0.25f}},
        {"kv_type outside the enum", [](d_t &d) { d.kv_type = attn_dtype(9); },
         {ATTN_INVALID_ARGUMENT, {"desc->kv_type = 9, must be an attn_dtype"}}},
        {"q_type quantized", [](d_t &d) { d.q_type = ATTN_DTYPE_I8; },
         {ATTN_INVALID_ARGUMENT, {"desc->q_type = ATTN_DTYPE_I8 (3), a quantized type"}}},
        {"out_type quantized", [](d_t &d) { d.out_type = ATTN_DTYPE_FP8_E4M3; },
         {ATTN_INVALID_ARGUMENT, {"desc->out_type = ATTN_DTYPE_FP8_E4M3 (7), a quantized type"}}},
        {"integer type without k_scale", [](d_t &d) { d.k_scale = nullptr; },
         {ATTN_INVALID_ARGUMENT, {"desc->k_scale = NULL, must be non-null", "ATTN_DTYPE_I8"}}},
        {"integer type without v_scale", [](d_t &d) { d.v_scale = nullptr; },
         {ATTN_INVALID_ARGUMENT, {"desc->v_scale = NULL, must be non-null"}}},
        {"k_scale with an f32 cache", [](d_t &d) { d.kv_type = ATTN_DTYPE_BF16; d.v_scale = nullptr; },
         {ATTN_INVALID_ARGUMENT,
          {"desc->k_scale = 0x", "must be NULL unless desc->kv_type is quantized",
           "ATTN_DTYPE_BF16 (1)"}}},
        {"v_zero with an f32 cache",
         [=](d_t &d) { d.kv_type = ATTN_DTYPE_F32; d.k_scale = d.v_scale = nullptr; d.v_zero = scales; },
         {ATTN_INVALID_ARGUMENT, {"desc->v_zero = 0x", "must be NULL unless desc->kv_type"}}},
        {"zero points with FP8", [=](d_t &d) { d.kv_type = ATTN_DTYPE_FP8_E4M3; d.k_zero = scales; },
         {ATTN_INVALID_ARGUMENT,
          {"desc->k_zero = 0x", "zero points are for the integer types only",
           "ATTN_DTYPE_FP8_E4M3 (7)"}}},
        {"negative scale stride", [](d_t &d) { d.v_scale_strides.seq = -1; },
         {ATTN_INVALID_ARGUMENT, {"desc->v_scale_strides.seq = -1, must be >= 0"}}},
        {"negative group", [](d_t &d) { d.k_group = -2; },
         {ATTN_INVALID_ARGUMENT, {"desc->k_group = -2, must be >= 0"}}},
        {"group not dividing", [](d_t &d) { d.v_group = 3; },
         {ATTN_INVALID_ARGUMENT, {"desc->v_group = 3, must divide desc->dim_v = 8"}}},
        {"group checked with f32 too",
         [](d_t &d) { d.kv_type = ATTN_DTYPE_F32; d.k_scale = d.v_scale = nullptr; d.k_group = 5; },
         {ATTN_INVALID_ARGUMENT, {"desc->k_group = 5, must divide desc->dim_qk = 8"}}},
        {"4-bit: odd dim_qk",
         [](d_t &d) { d.kv_type = ATTN_DTYPE_I4; d.dim_qk = 7; d.q.seq = d.k.seq = 7; },
         {ATTN_INVALID_ARGUMENT, {"desc->dim_qk = 7, must be even with the 4-bit", "ATTN_DTYPE_I4"}}},
        {"4-bit: odd group", [](d_t &d) { d.kv_type = ATTN_DTYPE_I4; d.k_group = 1; },
         {ATTN_INVALID_ARGUMENT, {"desc->k_group = 1, must be even", "one scale per pair"}}},
        {"4-bit: odd stride in use", [](d_t &d) { d.kv_type = ATTN_DTYPE_U4; d.v.seq = 9; d.k_zero = d.v_zero = nullptr; },
         {ATTN_INVALID_ARGUMENT, {"desc->v.seq = 9, must be even with the 4-bit"}}},
        {"4-bit: odd batch stride of one batch (not in use)",
         [](d_t &d) { d.kv_type = ATTN_DTYPE_I4; d.k.batch = 65; },
         {ATTN_OK, {}}, {0.5f, 0.0f}},  // I4 nibbles 1 and 0, times 0.5
        {"4-bit with kv_start: an odd row stride, even with one key", [](d_t &d) {
             static const int32_t one_key[2] = {0, 1};
             d.kv_type = ATTN_DTYPE_I4; d.kv_start = one_key; d.len_kv = 1; d.k.seq = 9; },
         {ATTN_INVALID_ARGUMENT, {"desc->k.seq = 9, must be even with the 4-bit"}}},
        // packed sequences over a quantized cache: computed (every code 1 times the scale 0.5)
        {"q_start over a quantized cache", [=](d_t &d) { d.q_start = starts; }, {ATTN_OK, {}}, {0.5f, 0.5f}},
        {"kv_start over a quantized cache", [=](d_t &d) { d.kv_start = starts; }, {ATTN_OK, {}}, {0.5f, 0.5f}},
        {"a rule before a packed call", [=](d_t &d) { d.q_start = starts; d.k_scale = nullptr; },
         {ATTN_INVALID_ARGUMENT, {"desc->k_scale = NULL"}}},
    };
}

TEST(validation_quantized, sdpa_desc_fields) {
    std::vector<float> scales(64, 0.5f);
    std::vector<int32_t> starts{0, 3};
    std::vector<uint8_t> kv(4 * 2 * 4 * 8, 1);
    std::vector<float> q(2 * 3 * 8, 0.25f);
    for (attn_impl impl : kImpls) {
        auto ctx = make_context(impl);
        ASSERT_TRUE(ctx);
        for (const sdpa_case &c : sdpa_cases(scales.data(), starts.data())) {
            attn_sdpa_desc d;
            attn_sdpa_desc_init(&d, 1, 2, 3, 4, 8);
            d.kv_type = ATTN_DTYPE_I8;
            d.k_scale = d.v_scale = scales.data();
            d.k_scale_strides = d.v_scale_strides = attn_layout{0, 4, 1};
            c.mutate(d);
            std::vector<float> out(2 * 3 * 8, kSentinel);
            const attn_status s = attn_sdpa(ctx.get(), &d, q.data(), kv.data(), kv.data(), out.data());
            expect_outcome(s, c.want, c.name);
            if (c.want.status != ATTN_OK) {
                EXPECT_EQ(out, std::vector<float>(out.size(), kSentinel)) << c.name;
                continue;
            }
            for (size_t i = 0; i < out.size(); ++i)  // exact: a weighted mean of equal values
                EXPECT_EQ(out[i], i % 2 == 0 ? c.values.value_even : c.values.value_odd)
                    << c.name << " at " << i;
        }
    }
}

TEST(validation_quantized, f32_entries_and_backward) {
    std::vector<float> buf(4096, 0.5f), grads(3 * 512, 7.0f);
    std::vector<int32_t> starts{0, 3};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 2, 3, 4, 8);
    d.kv_type = ATTN_DTYPE_I8;
    d.k_scale = d.v_scale = buf.data();
    float *out = grads.data();
    EXPECT_EQ(attn_sdpa_f32(nullptr, &d, buf.data(), buf.data(), buf.data(), out),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error())
                  .find("attn_sdpa_f32: desc->kv_type = 3, must be ATTN_DTYPE_F32 (0) here"),
              std::string::npos)
        << attn_last_error();
    // the backward takes packed sequences but no quantized cache
    d.kv_start = starts.data();
    d.k_scale_strides = d.v_scale_strides = attn_layout{0, 4, 1};
    EXPECT_EQ(attn_sdpa_backward(nullptr, &d, buf.data(), buf.data(), buf.data(), buf.data(),
                                 buf.data(), nullptr, out, out + 512, out + 1024),
              ATTN_UNSUPPORTED);
    EXPECT_NE(std::string(attn_last_error())
                  .find("attn_sdpa_backward: desc->kv_type = ATTN_DTYPE_I8 (3): the backward "
                        "does not support quantized K/V caches"),
              std::string::npos)
        << attn_last_error();
    EXPECT_EQ(grads, std::vector<float>(grads.size(), 7.0f));
}

// ---- the quantized types elsewhere -------------------------------------------------------

TEST(validation_quantized, convert_and_gemm_reject_quantized_types) {
    std::vector<uint16_t> buf(64, 0x3f80);
    EXPECT_EQ(attn_convert(nullptr, 8, buf.data(), ATTN_DTYPE_I8, buf.data() + 32, ATTN_DTYPE_F16),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error())
                  .find("attn_convert: src_type = ATTN_DTYPE_I8 (3), a quantized type, allowed "
                        "only as desc->kv_type"),
              std::string::npos)
        << attn_last_error();
    EXPECT_EQ(attn_convert(nullptr, 8, buf.data(), ATTN_DTYPE_BF16, buf.data() + 32,
                           ATTN_DTYPE_FP8_E5M2),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error()).find("dst_type = ATTN_DTYPE_FP8_E5M2 (8)"),
              std::string::npos);
    uint16_t *a = buf.data(), *b = a + 16, *c = b + 16;
    EXPECT_EQ(attn_gemm(nullptr, ATTN_NO_TRANS, ATTN_NO_TRANS, 4, 4, 4, 1.0f, a, ATTN_DTYPE_U4, 4,
                        b, ATTN_DTYPE_BF16, 4, 0.0f, c, ATTN_DTYPE_BF16, 4),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error()).find("attn_gemm: a_type = ATTN_DTYPE_U4 (6), a quantized"),
              std::string::npos);
    EXPECT_EQ(attn_gemm(nullptr, ATTN_NO_TRANS, ATTN_NO_TRANS, 4, 4, 4, 1.0f, a, ATTN_DTYPE_BF16,
                        4, b, ATTN_DTYPE_BF16, 4, 0.0f, c, ATTN_DTYPE_U8, 4),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error()).find("c_type = ATTN_DTYPE_U8 (4)"), std::string::npos);
    EXPECT_EQ(buf, std::vector<uint16_t>(64, 0x3f80));
}

TEST(validation_quantized, dtype_size_and_bits) {
    const size_t bits[] = {32, 16, 16, 8, 8, 4, 4, 8, 8};
    const size_t bytes[] = {4, 2, 2, 1, 1, 0, 0, 1, 1};
    for (int t = 0; t < 9; ++t) {
        EXPECT_EQ(attn_dtype_bits(attn_dtype(t)), bits[t]) << t;
        EXPECT_EQ(attn_dtype_size(attn_dtype(t)), bytes[t]) << t;
    }
    EXPECT_EQ(attn_dtype_bits(attn_dtype(9)), 0u);
    EXPECT_EQ(attn_dtype_bits(attn_dtype(-1)), 0u);
}

// ---- attn_quantize -----------------------------------------------------------------------

// 4 rows of 8 f32 into I8 with groups of 4 (2 scales per row), dense.
struct quantize_call {
    int64_t rows = 4, dim = 8;
    std::vector<float> src = attn_test::random_tensor(32, 5);
    std::vector<uint8_t> dst = std::vector<uint8_t>(64, 0x5A);
    std::vector<float> scale = std::vector<float>(16, 9.0f), zero = scale;
    const void *src_p = src.data();
    void *dst_p = dst.data();
    float *scale_p = scale.data(), *zero_p = nullptr;
    attn_dtype src_type = ATTN_DTYPE_F32, dst_type = ATTN_DTYPE_I8;
    int64_t src_stride = 8, dst_stride = 8, scale_stride = 2, group = 4;
    attn_status run(attn_context *ctx) {
        return attn_quantize(ctx, rows, dim, src_p, src_type, src_stride, dst_p, dst_type,
                             dst_stride, scale_p, zero_p, scale_stride, group);
    }
    bool untouched() const {
        return dst == std::vector<uint8_t>(64, 0x5A) && scale == std::vector<float>(16, 9.0f) &&
               zero == std::vector<float>(16, 9.0f);
    }
};

struct quantize_case {
    std::string name;
    std::function<void(quantize_call &)> mutate;
    outcome want;
};

std::vector<quantize_case> quantize_cases() {
    using q = quantize_call;
    const attn_status bad = ATTN_INVALID_ARGUMENT;
    return {
        {"rows negative", [](q &x) { x.rows = -1; }, {bad, {"attn_quantize: rows = -1, must be >= 0"}}},
        {"dim negative", [](q &x) { x.dim = -8; }, {bad, {"dim = -8, must be >= 0"}}},
        {"src_type quantized", [](q &x) { x.src_type = ATTN_DTYPE_U8; },
         {bad, {"src_type = ATTN_DTYPE_U8 (4), a quantized type"}}},
        {"dst_type not quantized", [](q &x) { x.dst_type = ATTN_DTYPE_BF16; },
         {bad, {"dst_type = 1, must be a quantized type"}}},
        {"dst_type outside the enum", [](q &x) { x.dst_type = attn_dtype(12); },
         {bad, {"dst_type = 12, must be a quantized type"}}},
        {"group negative", [](q &x) { x.group = -4; }, {bad, {"group = -4, must be >= 0"}}},
        {"group not dividing", [](q &x) { x.group = 3; }, {bad, {"group = 3, must divide dim = 8"}}},
        {"zero with FP8", [](q &x) { x.dst_type = ATTN_DTYPE_FP8_E4M3; x.zero_p = x.zero.data(); },
         {bad, {"zero = 0x", "integer types only", "ATTN_DTYPE_FP8_E4M3 (7)"}}},
        {"U8 without zero", [](q &x) { x.dst_type = ATTN_DTYPE_U8; },
         {bad, {"zero = NULL, must be non-null", "ATTN_DTYPE_U8 (4)"}}},
        {"U4 without zero", [](q &x) { x.dst_type = ATTN_DTYPE_U4; },
         {bad, {"zero = NULL, must be non-null", "ATTN_DTYPE_U4 (6)"}}},
        {"4-bit: odd dim", [](q &x) { x.dst_type = ATTN_DTYPE_I4; x.dim = 7; x.group = 0; },
         {bad, {"dim = 7, must be even with the 4-bit dst_type = ATTN_DTYPE_I4"}}},
        {"4-bit: odd group", [](q &x) { x.dst_type = ATTN_DTYPE_I4; x.group = 1; },
         {bad, {"group = 1, must be even"}}},
        {"4-bit: odd dst_stride", [](q &x) { x.dst_type = ATTN_DTYPE_I4; x.dst_stride = 9; },
         {bad, {"dst_stride = 9, must be even"}}},
        {"src_stride short", [](q &x) { x.src_stride = 7; },
         {bad, {"src_stride = 7, must be >= dim = 8 when rows > 1"}}},
        {"dst_stride short", [](q &x) { x.dst_stride = 4; },
         {bad, {"dst_stride = 4, must be >= dim = 8"}}},
        {"scale_stride short", [](q &x) { x.scale_stride = 1; },
         {bad, {"scale_stride = 1, must be >= dim / group = 2"}}},
        {"negative stride", [](q &x) { x.src_stride = -8; }, {bad, {"src_stride = -8, must be >= 0"}}},
        {"src NULL", [](q &x) { x.src_p = nullptr; }, {bad, {"src = NULL"}}},
        {"dst NULL", [](q &x) { x.dst_p = nullptr; }, {bad, {"dst = NULL"}}},
        {"scale NULL", [](q &x) { x.scale_p = nullptr; }, {bad, {"scale = NULL"}}},
        {"dst overlaps scale", [](q &x) { x.dst_p = x.scale.data(); x.scale_p = x.scale.data() + 4; },
         {bad, {"overlaps"}}},
        {"zero overlaps scale", [](q &x) { x.zero_p = x.scale.data() + 1; }, {bad, {"overlaps"}}},
        {"dst overlaps src",
         [](q &x) { x.dst_p = x.src.data() + 2; },
         {bad, {"overlaps"}}},
        {"a NaN", [](q &x) { x.src[13] = NAN; }, {bad, {"src row 1, column 5 = nan, must be finite"}}},
        {"an overflowing range", [](q &x) { x.src[0] = 3e38f; x.src[1] = -3e38f; x.zero_p = x.zero.data(); },
         {bad, {"src row 0: the group of columns 0 .. 3 has max - min beyond the f32 range"}}},
    };
}

TEST(validation_quantized, quantize_rules) {
    for (attn_impl impl : kImpls) {
        auto ctx = make_context(impl);
        ASSERT_TRUE(ctx);
        {
            quantize_call ok;
            ASSERT_EQ(ok.run(ctx.get()), ATTN_OK) << attn_last_error();
            EXPECT_FALSE(ok.untouched());  // the check below can see a write
        }
        for (const quantize_case &c : quantize_cases()) {
            quantize_call x;
            c.mutate(x);
            expect_outcome(x.run(ctx.get()), c.want, c.name);
            EXPECT_TRUE(x.untouched()) << c.name;  // aliased memory is in these buffers too
        }
        // nothing to do: no pointer needed
        EXPECT_EQ(attn_quantize(ctx.get(), 0, 8, nullptr, ATTN_DTYPE_F32, 8, nullptr,
                                ATTN_DTYPE_I8, 8, nullptr, nullptr, 1, 0),
                  ATTN_OK);
        EXPECT_EQ(attn_quantize(ctx.get(), 3, 0, nullptr, ATTN_DTYPE_F32, 0, nullptr,
                                ATTN_DTYPE_I8, 0, nullptr, nullptr, 0, 0),
                  ATTN_OK);
    }
}

}  // namespace
