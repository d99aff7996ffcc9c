// The fused attention (attn_sdpa_f32) on every path, the reference included, per ISA.
//
// Criterion, per output (out, lse, weights), measured as e(x) = max |x - exact| / (1 + |exact|)
// against the float64 oracle of test_util.hpp:
//   e(path) <= 2 * e(plain) + 4e-6,
// plain the same attention computed here in plain float32 (test_util's sdpa_float). The 4e-6
// floor (about 32 float ulps at 1) covers the few-ulp exp and the different but equally exact
// summation orders where the plain computation happens to be nearly exact.
// Dropout decisions must be identical: with V the identity, out[i, j] = A_ij * factor_ij,
// so its zeros are exactly the dropped weights. Results are bitwise identical for 1, 2 and
// 3 threads, with and without the split of the keys used for decoding.
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::random_tensor;
const float inf = std::numeric_limits<float>::infinity();
constexpr double floor_tolerance = 4e-6;

enum class layout { bhsd, bshd, cache };  // cache: K, V inside a KV cache of larger capacity
enum class mask_kind { none, full, broadcast_batch_head, one_row_per_batch };

struct sdpa_case {
    std::string name;
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v;
    attn_causal causal = ATTN_CAUSAL_NONE;
    layout lay = layout::bhsd;
    mask_kind mask = mask_kind::none;
    std::vector<int32_t> kv_len;
    float scale = 0.0f;  // 0: the default 1/sqrt(dim_qk)
    float dropout = 0.0f;
    bool weights = false, lse = false;
    float input_range = 1.0f;
};

// A tensor [batch, heads, seq, dim] in a layout: its strides and its storage.
struct tensor {
    attn_layout strides;
    std::vector<float> data;
    int64_t heads, seq, dim;

    tensor(int64_t batch, int64_t heads_, int64_t seq_, int64_t dim_, layout lay,
           uint32_t seed, float range)
        : heads(heads_), seq(seq_), dim(dim_) {
        int64_t capacity = lay == layout::cache ? seq + 37 : seq;
        if (lay == layout::bshd)
            strides = {seq * heads * dim, dim, heads * dim};
        else
            strides = {heads * capacity * dim, capacity * dim, dim};
        // Unused capacity holds NaN: a kernel that reads it poisons its result.
        data = random_tensor(size_t(batch * heads * capacity * dim), seed, -range, range);
        if (lay == layout::cache)
            for (int64_t b = 0; b < batch; ++b)
                for (int64_t h = 0; h < heads; ++h)
                    for (int64_t s = seq; s < capacity; ++s)
                        for (int64_t c = 0; c < dim; ++c) data[size_t(at(b, h, s, c))] = NAN;
    }
    int64_t at(int64_t b, int64_t h, int64_t s, int64_t c) const {
        return b * strides.batch + h * strides.head + s * strides.seq + c;
    }
    // Dense BHSD copy, in double, for the oracle.
    std::vector<double> dense(int64_t batch) const {
        std::vector<double> out;
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t s = 0; s < seq; ++s)
                    for (int64_t c = 0; c < dim; ++c) out.push_back(data[size_t(at(b, h, s, c))]);
        return out;
    }
};

struct problem {
    attn_sdpa_desc d;
    tensor q, k, v;
    std::vector<float> mask;
    int64_t out_elems;
    attn_layout out_strides;

    explicit problem(const sdpa_case &c)
        : q(c.batch, c.heads_q, c.len_q, c.dim_qk,
            c.lay == layout::bshd ? layout::bshd : layout::bhsd, 11, c.input_range),
          k(c.batch, c.heads_kv, c.len_kv, c.dim_qk, c.lay, 12, c.input_range),
          v(c.batch, c.heads_kv, c.len_kv, c.dim_v, c.lay, 13, 1.0f) {
        attn_sdpa_desc_init(&d, c.batch, c.heads_q, c.len_q, c.len_kv, c.dim_qk);
        d.heads_kv = c.heads_kv;
        d.dim_v = c.dim_v;
        d.q = q.strides;
        d.k = k.strides;
        d.v = v.strides;
        if (c.lay == layout::bshd)
            out_strides = {c.len_q * c.heads_q * c.dim_v, c.dim_v, c.heads_q * c.dim_v};
        else
            out_strides = {c.heads_q * c.len_q * c.dim_v, c.len_q * c.dim_v, c.dim_v};
        d.out = out_strides;
        out_elems = c.batch * c.heads_q * c.len_q * c.dim_v;
        if (c.scale != 0.0f) d.scale = c.scale;
        d.causal = c.causal;
        d.dropout_p = c.dropout;
        d.dropout_seed = 0x5eed;
        if (!c.kv_len.empty()) d.kv_len = c.kv_len.data();
        const int64_t lq = c.len_q, lk = c.len_kv;
        switch (c.mask) {
        case mask_kind::none: break;
        case mask_kind::full:  // every (b, h, i, j), with a fully masked row 0 in head 0
            mask = random_tensor(size_t(c.batch * c.heads_q * lq * lk), 14, -2.0f, 2.0f);
            for (int64_t j = 0; j < lk; ++j) mask[size_t(j)] = -inf;
            d.mask_strides = {c.heads_q * lq * lk, lq * lk, lk};
            break;
        case mask_kind::broadcast_batch_head:  // [Lq, Lk] shared by all (b, h), some -inf
            mask = random_tensor(size_t(lq * lk), 15, -1.0f, 1.0f);
            for (size_t e = 0; e < mask.size(); e += 3) mask[e] = -inf;
            d.mask_strides = {0, 0, lk};
            break;
        case mask_kind::one_row_per_batch:  // [B, 1, 1, Lk]: key padding as a mask
            mask = random_tensor(size_t(c.batch * lk), 16, -1.0f, 1.0f);
            for (int64_t j = lk / 2; j < lk; ++j) mask[size_t(j)] = -inf;
            d.mask_strides = {lk, 0, 0};
            break;
        }
        if (!mask.empty()) d.mask = mask.data();
    }
};

struct result {
    std::vector<float> out, lse, weights;  // out gathered to dense BHSD
    attn_status status;
};

result run(attn_context *ctx, const sdpa_case &c, problem &p) {
    result r;
    std::vector<float> out_raw(size_t(p.out_elems), NAN);
    r.lse.assign(c.lse ? size_t(c.batch * c.heads_q * c.len_q) : 0, NAN);
    r.weights.assign(c.weights ? size_t(c.batch * c.heads_q * c.len_q * c.len_kv) : 0, NAN);
    attn_sdpa_desc d = p.d;
    d.lse = c.lse ? r.lse.data() : nullptr;
    d.weights = c.weights ? r.weights.data() : nullptr;
    r.status = attn_sdpa_f32(ctx, &d, p.q.data.data(), p.k.data.data(), p.v.data.data(),
                             out_raw.data());
    for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t h = 0; h < c.heads_q; ++h)
            for (int64_t i = 0; i < c.len_q; ++i)
                for (int64_t e = 0; e < c.dim_v; ++e)
                    r.out.push_back(out_raw[size_t(b * p.out_strides.batch +
                                                   h * p.out_strides.head +
                                                   i * p.out_strides.seq + e)]);
    return r;
}

std::vector<sdpa_case> sweep() {
    std::vector<sdpa_case> cases;
    // Head dimensions, with lengths that are not multiples of any vector or tile.
    for (int64_t dim : {1, 3, 16, 63, 64, 65, 128, 256})
        cases.push_back({"dim" + std::to_string(dim), 1, 2, 2, 37, 77, dim, dim});
    cases.push_back({"dqk48_dv80", 2, 2, 1, 50, 130, 48, 80});
    // Lengths from 1 to 1025, odd and unequal.
    cases.push_back({"len1x1", 1, 1, 1, 1, 1, 8, 8});
    cases.push_back({"len1x1025", 1, 3, 3, 1, 1025, 64, 64});
    cases.push_back({"len1025x1", 1, 1, 1, 1025, 1, 32, 32});
    cases.push_back({"len1025x1025", 1, 1, 1, 1025, 1025, 16, 16});
    cases.push_back({"len97x513_d128", 1, 2, 2, 97, 513, 128, 128});
    // Causal masks, both corners, tall and wide.
    for (auto causal : {ATTN_CAUSAL_TOP_LEFT, ATTN_CAUSAL_BOTTOM_RIGHT}) {
        const std::string tag = causal == ATTN_CAUSAL_TOP_LEFT ? "top_left" : "bottom_right";
        cases.push_back({"causal_" + tag + "_square", 1, 2, 2, 301, 301, 64, 64, causal});
        cases.push_back({"causal_" + tag + "_wide", 1, 2, 2, 70, 333, 32, 40, causal});
        cases.push_back({"causal_" + tag + "_tall", 1, 2, 2, 200, 61, 64, 64, causal});
    }
    // Layouts and grouped-query attention.
    {
        sdpa_case c{"bshd_gqa", 2, 8, 2, 45, 90, 64, 64};
        c.lay = layout::bshd;
        cases.push_back(c);
        c = {"kv_cache_gqa_causal", 2, 6, 3, 20, 150, 64, 32, ATTN_CAUSAL_BOTTOM_RIGHT};
        c.lay = layout::cache;
        cases.push_back(c);
    }
    // Masks (fully masked rows included), kv_len (0 included), scale.
    {
        sdpa_case c{"mask_full", 2, 2, 2, 33, 140, 32, 32};
        c.mask = mask_kind::full;
        c.lse = c.weights = true;
        cases.push_back(c);
        c = {"mask_broadcast_causal", 2, 3, 3, 60, 60, 16, 16, ATTN_CAUSAL_TOP_LEFT};
        c.mask = mask_kind::broadcast_batch_head;
        cases.push_back(c);
        c = {"mask_per_batch_row", 3, 2, 1, 10, 200, 64, 64};
        c.mask = mask_kind::one_row_per_batch;
        cases.push_back(c);
        c = {"kv_len", 3, 2, 2, 40, 150, 64, 64};
        c.kv_len = {0, 77, 150};
        c.lse = c.weights = true;
        cases.push_back(c);
        c = {"kv_len_causal_bottom_right", 3, 2, 2, 30, 100, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT};
        c.kv_len = {5, 64, 100};
        c.lse = true;
        cases.push_back(c);
        c = {"scale_one_wide_inputs", 1, 2, 2, 40, 90, 64, 64};
        c.scale = 1.0f;
        c.input_range = 2.0f;
        c.lse = true;
        cases.push_back(c);
        c = {"scale_small", 1, 2, 2, 40, 90, 64, 64};
        c.scale = 0.01f;
        cases.push_back(c);
    }
    // Weights, lse, dropout; decoding shapes that split the keys.
    {
        sdpa_case c{"weights_lse_causal", 2, 2, 2, 50, 200, 64, 64, ATTN_CAUSAL_TOP_LEFT};
        c.weights = c.lse = true;
        cases.push_back(c);
        c = {"dropout", 2, 2, 1, 50, 200, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT};
        c.dropout = 0.25f;
        c.lse = true;
        cases.push_back(c);
        c = {"decode_split", 1, 4, 2, 1, 4096, 128, 128};
        c.lse = true;
        cases.push_back(c);
        c = {"decode_split_weights_kv_len_dropout", 2, 2, 2, 3, 1500, 64, 64};
        c.kv_len = {1100, 600};
        c.weights = c.lse = true;
        c.dropout = 0.1f;
        cases.push_back(c);
        // few heads, whole query tiles, split keys: K packed once per head, shared by tiles
        c = {"prefill_split_packed_k", 1, 2, 1, 200, 1500, 72, 40, ATTN_CAUSAL_BOTTOM_RIGHT};
        c.mask = mask_kind::full;
        c.kv_len = {1300};
        c.weights = c.lse = true;
        c.dropout = 0.1f;
        cases.push_back(c);
    }
    return cases;
}

// The oracle (float64) and the yardstick (plain float32) of a case, both computed here,
// once per case: out, lse and weights.
struct expected {
    std::vector<double> out, lse, weights;
    std::vector<float> plain_out, plain_lse, plain_weights;
};

const expected &expected_for(const sdpa_case &c, problem &p) {
    static std::map<std::string, expected> cache;
    auto found = cache.find(c.name);
    if (found != cache.end()) return found->second;
    expected e;
    const std::vector<double> q = p.q.dense(c.batch), k = p.k.dense(c.batch), v = p.v.dense(c.batch);
    // the weights (taken before dropout) when the case asks for them
    e.out = attn_test::sdpa_double(p.d, q, k, v, &e.lse, c.weights ? &e.weights : nullptr);
    e.plain_out = attn_test::sdpa_float(p.d, attn_test::to_float(q), attn_test::to_float(k),
                                        attn_test::to_float(v), &e.plain_lse,
                                        c.weights ? &e.plain_weights : nullptr);
    return cache.emplace(c.name, std::move(e)).first->second;
}

// Every path, the reference included, against the float64 oracle with the plain f32
// computation as the yardstick.
class SdpaOracle : public testing::TestWithParam<attn_test::path> {};

TEST_P(SdpaOracle, WithinYardstickOnSweep) {
    auto ctx = attn_test::make_context(GetParam().impl, GetParam().isa);
    ASSERT_TRUE(ctx);
    for (const sdpa_case &c : sweep()) {
        SCOPED_TRACE(c.name);
        problem p(c);
        const expected &e = expected_for(c, p);
        const result got = run(ctx.get(), c, p);
        ASSERT_EQ(got.status, ATTN_OK) << attn_last_error();
        EXPECT_TRUE(attn_test::within_yardstick(got.out, e.plain_out, e.out, floor_tolerance))
            << "out";
        if (c.lse)
            EXPECT_TRUE(attn_test::within_yardstick(got.lse, e.plain_lse, e.lse, floor_tolerance))
                << "lse";
        if (c.weights)
            EXPECT_TRUE(attn_test::within_yardstick(got.weights, e.plain_weights, e.weights,
                                                    floor_tolerance))
                << "weights";
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, SdpaOracle, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

class SdpaSimd : public testing::TestWithParam<attn_test::path> {};

// The seed's three-token example (section D): A and the output to 4 decimals.
TEST_P(SdpaSimd, SeedExample) {
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa);
    const float qk[] = {1, 0, 0, 1, 1, 1};
    const float v[] = {1, 0, 0, 2, 3, 1};
    float out[6], weights[9];
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 3, 3, 2);
    d.weights = weights;
    ASSERT_EQ(attn_sdpa_f32(ctx.get(), &d, qk, qk, v, out), ATTN_OK);
    const float want_out[] = {1.6044f, 0.7967f, 1.4011f, 1.2033f, 1.7587f, 1.0000f};
    const float want_a[] = {0.4011f, 0.1978f, 0.4011f, 0.1978f, 0.4011f,
                            0.4011f, 0.2483f, 0.2483f, 0.5035f};
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[i], want_out[i], 5e-5) << i;
    for (int i = 0; i < 9; ++i) EXPECT_NEAR(weights[i], want_a[i], 5e-5) << i;
}

// Dropout decisions equal the reference's: with V = I, out[i, j] is 0 exactly where the
// weight was dropped (every visible weight is > 0 here), and the kept ones match.
TEST_P(SdpaSimd, DropoutDropsTheSameWeights) {
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa);
    auto ref_ctx = attn_test::make_context(ATTN_IMPL_REFERENCE);
    for (int64_t len_q : {int64_t{37}, int64_t{1}}) {
        SCOPED_TRACE(len_q);
        const int64_t heads = 2, len_kv = len_q == 1 ? 1100 : 300;
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, heads, len_q, len_kv, 16);
        d.dim_v = len_kv;
        d.v = {heads * len_kv * len_kv, len_kv * len_kv, len_kv};
        d.out = {heads * len_q * len_kv, len_q * len_kv, len_kv};
        d.dropout_p = 0.3f;
        d.dropout_seed = 42;
        const auto q = random_tensor(size_t(heads * len_q * 16), 1);
        const auto k = random_tensor(size_t(heads * len_kv * 16), 2);
        std::vector<float> eye(size_t(heads * len_kv * len_kv), 0.0f);
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t j = 0; j < len_kv; ++j) eye[size_t((h * len_kv + j) * len_kv + j)] = 1.0f;
        std::vector<float> got(size_t(heads * len_q * len_kv)), want(got.size());
        ASSERT_EQ(attn_sdpa_f32(ctx.get(), &d, q.data(), k.data(), eye.data(), got.data()),
                  ATTN_OK);
        ASSERT_EQ(attn_sdpa_f32(ref_ctx.get(), &d, q.data(), k.data(), eye.data(), want.data()),
                  ATTN_OK);
        size_t dropped = 0, mismatched = 0;
        for (size_t e = 0; e < got.size(); ++e) {
            dropped += want[e] == 0.0f;
            mismatched += (got[e] == 0.0f) != (want[e] == 0.0f);
        }
        EXPECT_EQ(mismatched, 0u);
        EXPECT_GT(dropped, got.size() / 5);  // p = 0.3: about 30% dropped
        EXPECT_LE(attn_test::max_rel_error(got.data(), want.data(), got.size()), 1e-6);
    }
}

// out, lse and weights are bitwise identical for 1, 2 and 3 threads: a prefill shape (many
// query tiles, causal, dropout) and decoding shapes whose keys are split into chunks.
TEST_P(SdpaSimd, BitwiseIdenticalAcrossThreadCounts) {
    ATTN_SKIP_UNLESS_THREADS(2);
    std::vector<sdpa_case> cases;
    sdpa_case c{"prefill", 2, 4, 2, 300, 300, 64, 64, ATTN_CAUSAL_TOP_LEFT};
    c.dropout = 0.2f;
    c.lse = true;
    cases.push_back(c);
    c = {"decode", 1, 2, 2, 1, 4096, 128, 128};
    c.lse = c.weights = true;
    cases.push_back(c);
    c = {"decode_gqa_kv_len", 2, 4, 1, 2, 3000, 64, 64};
    c.kv_len = {2999, 1234};
    c.lse = true;
    cases.push_back(c);
    c = {"prefill_split_packed_k", 1, 3, 3, 150, 2100, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT};
    c.lse = true;
    cases.push_back(c);
    for (const sdpa_case &sc : cases) {
        SCOPED_TRACE(sc.name);
        problem p(sc);
        std::vector<result> results;
        for (int threads : {1, 2, 3}) {
            auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa, threads);
            ASSERT_TRUE(ctx);
            results.push_back(run(ctx.get(), sc, p));
            ASSERT_EQ(results.back().status, ATTN_OK);
        }
        for (size_t t = 1; t < results.size(); ++t) {
            EXPECT_TRUE(attn_test::bitwise_equal(results[0].out, results[t].out)) << "threads " << t + 1;
            EXPECT_TRUE(attn_test::bitwise_equal(results[0].lse, results[t].lse)) << "threads " << t + 1;
            EXPECT_TRUE(attn_test::bitwise_equal(results[0].weights, results[t].weights)) << "threads " << t + 1;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(PerIsa, SdpaSimd, testing::ValuesIn(attn_test::simd_paths()),
                         attn_test::path_name);

}  // namespace
