// Decoding over a bf16 cache, on every path, with bf16 queries: the decode_pairs entry on the
// levels with AVX512-BF16 (VDPBF16PS over K's pairs of dims and over pairs of keys of V, read
// in place: kernels/attention_decode_pairs.hpp), and with f32 queries: decode_pv_pairs there
// (S exact in f32 as the decode entry forms it, P V on the same pairs); the f32 decode entry
// elsewhere. Against the float64 oracle on the stored values, within twice the error of the
// plain 16-bit computation (f32 sums of the exact products, P rounded to bf16 as V is bf16)
// plus 4e-6; the shapes reach
// every part of the kernel: 1 to 4 query heads a KV head (3 padded to 4), 1, 3 and 9 query
// rows (9 of one head: tiles of 4, 4 and 1 rows, as few rows take them), rows that see
// different keys (causal rows, windows: ranges of odd start and odd length, the last key
// without a partner), dims that are not a multiple of 32 (masked spans), blocks of 512 keys,
// split keys, every score option; V rows a window hides hold NaN and are never read; the same
// bits for 1 and 2 threads.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"
#include "ref/convert.hpp"
#include "test_features_util.hpp"
#include "test_util.hpp"

namespace {

struct pairs_case {
    int64_t heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v;
    attn_causal causal;
    int64_t window_left;
    bool options;  // softcap, ALiBi, sinks, kv_len
    std::string name() const {
        return "H" + std::to_string(heads_q) + "/" + std::to_string(heads_kv) + "_Lq" +
               std::to_string(len_q) + "_Lk" + std::to_string(len_kv) + "_D" + std::to_string(dim_qk) +
               "/" + std::to_string(dim_v) + "_causal" + std::to_string(int(causal)) + "_window" +
               std::to_string(window_left) + (options ? "_options" : "");
    }
};

std::vector<pairs_case> sweep() {
    std::vector<pairs_case> cases;
    const int64_t dims[][2] = {{128, 128}, {33, 80}, {64, 16}, {96, 40}};
    int variant = 0;
    for (const auto &heads : {std::pair<int64_t, int64_t>{4, 1}, {3, 1}, {2, 2}, {1, 1}})
        for (int64_t len_q : {1, 3, 9})
            for (int64_t len_kv : {1, 2, 31, 517, 1300}) {
                const auto &d = dims[variant % 4];
                const bool top_left = variant % 3 == 1;
                cases.push_back({heads.first, heads.second, len_q, len_kv, d[0], d[1],
                                 top_left ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_BOTTOM_RIGHT,
                                 variant % 2 ? 37 : -1, variant % 5 == 2});
                ++variant;
            }
    return cases;
}

// A tensor stored in bf16 and its stored values.
struct bf16_tensor {
    std::vector<uint16_t> bits;
    std::vector<double> values;
    explicit bf16_tensor(const std::vector<float> &x) : bits(x.size()), values(x.size()) {
        for (size_t i = 0; i < x.size(); ++i) {
            bits[i] = attn::convert::f32_to_bf16(x[i]);
            values[i] = attn::convert::bf16_to_f32(bits[i]);
        }
    }
};

// Queries stored in bf16 or in f32, and their stored values.
struct query_tensor {
    attn_dtype type;
    bf16_tensor b;
    std::vector<float> f;
    std::vector<double> values;
    query_tensor(attn_dtype t, const std::vector<float> &x) : type(t), b(x), f(x) {
        values = t == ATTN_DTYPE_BF16 ? b.values : std::vector<double>(x.begin(), x.end());
    }
    const void *data() const {
        return type == ATTN_DTYPE_BF16 ? static_cast<const void *>(b.bits.data()) : f.data();
    }
};

const attn_dtype query_types[] = {ATTN_DTYPE_BF16, ATTN_DTYPE_F32};

class SdpaDecodePairs : public attn_test::path_test {};

TEST_P(SdpaDecodePairs, WithinTheRuleOnSweep) {
    uint32_t seed = 300;
    for (const attn_dtype q_type : query_types)
        for (const pairs_case &c : sweep()) {
            SCOPED_TRACE(c.name() + (q_type == ATTN_DTYPE_F32 ? "_f32q" : "_bf16q"));
            attn_sdpa_desc d = attn_test::make_desc(2, c.heads_q, c.heads_kv, c.len_q, c.len_kv, c.dim_qk, c.dim_v);
            d.q_type = q_type;
            d.kv_type = ATTN_DTYPE_BF16;
            d.causal = c.causal;
            d.window_left = c.window_left;
            const std::vector<float> slopes = attn_test::alibi_geometric(c.heads_q);
            const std::vector<float> sinks = {1.0f, -1.0f, 3.0f, -3.0f};
            const std::vector<int32_t> kv_len = {int32_t(c.len_kv / 2 + 1), int32_t(c.len_kv)};
            if (c.options) {
                d.softcap = 10.0f;
                d.alibi_slopes = slopes.data();
                d.sinks = sinks.data();
                d.kv_len = kv_len.data();
            }
            const int64_t q_size = 2 * c.heads_q * c.len_q * c.dim_qk, out_size = 2 * c.heads_q * c.len_q * c.dim_v;
            const query_tensor q(q_type, attn_test::random_tensor(size_t(q_size), ++seed, -3, 3));
            const bf16_tensor k(attn_test::random_tensor(size_t(2 * c.heads_kv * c.len_kv * c.dim_qk), ++seed));
            const bf16_tensor v(attn_test::random_tensor(size_t(2 * c.heads_kv * c.len_kv * c.dim_v), ++seed));
            std::vector<float> out(size_t(out_size), NAN), lse(size_t(2 * c.heads_q * c.len_q), NAN);
            d.lse = lse.data();
            ASSERT_EQ(attn_sdpa(ctx(), &d, q.data(), k.bits.data(), v.bits.data(), out.data()), ATTN_OK)
                << attn_last_error();
            std::vector<double> want_lse;
            const std::vector<double> want =
                attn_test::sdpa_features_double(d, q.values, k.values, v.values, &want_lse);
            std::vector<float> plain_lse;
            const std::vector<float> plain = attn_test::sdpa_features_in<float>(
                d, attn_test::to_float(q.values), attn_test::to_float(k.values), attn_test::to_float(v.values),
                &plain_lse, nullptr, nullptr, true);
            EXPECT_TRUE(attn_test::within_yardstick(out, plain, want, 4e-6)) << "out";
            EXPECT_TRUE(attn_test::within_yardstick(lse, plain_lse, want_lse, 4e-6)) << "lse";
        }
}

// Weights of a decoding step with the forward (bf16 queries: the bf16-pair tiles' weights, from
// the same pairs of q; f32 queries: the f32 tiles', whose exponential formed P): each row sums
// to 1, and each weight is within 1e-5 of the oracle's.
TEST_P(SdpaDecodePairs, WeightsWithTheForward) {
    for (const attn_dtype q_type : query_types) {
        SCOPED_TRACE(q_type == ATTN_DTYPE_F32 ? "f32 queries" : "bf16 queries");
        const int64_t Hq = 8, Hkv = 2, Lk = 1100, D = 64;
        attn_sdpa_desc d = attn_test::make_desc(1, Hq, Hkv, 1, Lk, D, D);
        d.q_type = q_type;
        d.kv_type = ATTN_DTYPE_BF16;
        const query_tensor q(q_type, attn_test::random_tensor(size_t(Hq * D), 41, -3, 3));
        const bf16_tensor k(attn_test::random_tensor(size_t(Hkv * Lk * D), 42));
        const bf16_tensor v(attn_test::random_tensor(size_t(Hkv * Lk * D), 43));
        std::vector<float> out(size_t(Hq * D)), weights(size_t(Hq * Lk), NAN);
        d.weights = weights.data();
        ASSERT_EQ(attn_sdpa(ctx(), &d, q.data(), k.bits.data(), v.bits.data(), out.data()), ATTN_OK)
            << attn_last_error();
        std::vector<double> want_weights;
        attn_test::sdpa_features_double(d, q.values, k.values, v.values, nullptr, &want_weights);
        for (int64_t r = 0; r < Hq; ++r) {
            double sum = 0.0, worst = 0.0;
            for (int64_t j = 0; j < Lk; ++j) {
                sum += weights[size_t(r * Lk + j)];
                worst = std::max(worst, std::fabs(weights[size_t(r * Lk + j)] - want_weights[size_t(r * Lk + j)]));
            }
            EXPECT_NEAR(sum, 1.0, 1e-4) << "row " << r;
            EXPECT_LE(worst, 1e-5) << "row " << r;
        }
    }
}

// V rows before a window, and past kv_len, hold NaN: never read, the output is
// finite; a NaN in a V row a row sees reaches it.
TEST_P(SdpaDecodePairs, HiddenValueRowsNeverRead) {
    for (const attn_dtype q_type : query_types) {
        SCOPED_TRACE(q_type == ATTN_DTYPE_F32 ? "f32 queries" : "bf16 queries");
        const int64_t Hq = 4, Lk = 600, D = 48, window = 36;  // row 0 sees [563, 600)
        attn_sdpa_desc d = attn_test::make_desc(2, Hq, 1, 1, Lk, D, D);
        d.q_type = q_type;
        d.kv_type = ATTN_DTYPE_BF16;
        d.window_left = window;
        const std::vector<int32_t> kv_len = {int32_t(Lk), 301};  // batch 1 sees [264, 301)
        d.kv_len = kv_len.data();
        d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
        const query_tensor q(q_type, attn_test::random_tensor(size_t(2 * Hq * D), 51));
        const bf16_tensor k(attn_test::random_tensor(size_t(2 * Lk * D), 52));
        bf16_tensor v(attn_test::random_tensor(size_t(2 * Lk * D), 53));
        const uint16_t nan = 0x7fc0;
        for (int64_t j = 0; j < Lk; ++j) {
            const bool seen0 = j >= Lk - 1 - window, seen1 = j >= 300 - window && j < 301;
            for (int64_t e = 0; e < D; ++e) {
                if (!seen0) v.bits[size_t(j * D + e)] = nan;
                if (!seen1) v.bits[size_t((Lk + j) * D + e)] = nan;
            }
        }
        std::vector<float> out(size_t(2 * Hq * D));
        ASSERT_EQ(attn_sdpa(ctx(), &d, q.data(), k.bits.data(), v.bits.data(), out.data()), ATTN_OK)
            << attn_last_error();
        for (float x : out) ASSERT_TRUE(std::isfinite(x));
        v.bits[size_t((Lk - 1) * D + 5)] = nan;  // batch 0's last key, of 37: a key alone
        ASSERT_EQ(attn_sdpa(ctx(), &d, q.data(), k.bits.data(), v.bits.data(), out.data()), ATTN_OK);
        for (int64_t h = 0; h < Hq; ++h) {
            EXPECT_TRUE(std::isnan(out[size_t(h * D + 5)])) << "head " << h;
            EXPECT_TRUE(std::isfinite(out[size_t(h * D + 4)])) << "head " << h;
        }
    }
}

// The same bits for 1 and 2 threads and on a second run: keys split into chunks, 4 heads a KV head.
TEST_P(SdpaDecodePairs, BitwiseAcrossThreadCounts) {
    ATTN_SKIP_UNLESS_THREADS(2);
    auto one = attn_test::make_context(GetParam().impl, GetParam().isa, 1);
    auto two = attn_test::make_context(GetParam().impl, GetParam().isa, 2);
    ASSERT_TRUE(one && two);
    for (const attn_dtype q_type : query_types) {
        SCOPED_TRACE(q_type == ATTN_DTYPE_F32 ? "f32 queries" : "bf16 queries");
        const int64_t Hq = 8, Hkv = 2, Lk = 4099, D = 128;
        attn_sdpa_desc d = attn_test::make_desc(1, Hq, Hkv, 1, Lk, D, D);
        d.q_type = q_type;
        d.kv_type = d.out_type = ATTN_DTYPE_BF16;
        const query_tensor q(q_type, attn_test::random_tensor(size_t(Hq * D), 61));
        const bf16_tensor k(attn_test::random_tensor(size_t(Hkv * Lk * D), 62));
        const bf16_tensor v(attn_test::random_tensor(size_t(Hkv * Lk * D), 63));
        std::vector<uint16_t> a(size_t(Hq * D)), b(a.size()), again(a.size());
        ASSERT_EQ(attn_sdpa(one.get(), &d, q.data(), k.bits.data(), v.bits.data(), a.data()), ATTN_OK);
        ASSERT_EQ(attn_sdpa(two.get(), &d, q.data(), k.bits.data(), v.bits.data(), b.data()), ATTN_OK);
        ASSERT_EQ(attn_sdpa(two.get(), &d, q.data(), k.bits.data(), v.bits.data(), again.data()), ATTN_OK);
        EXPECT_EQ(a, b);
        EXPECT_EQ(b, again);
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, SdpaDecodePairs, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
