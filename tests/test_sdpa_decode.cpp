// Decoding shapes (len_q 1..4, any len_kv) on the SIMD path, which runs them through the
// bandwidth-bound tile kernel (attention_decode.hpp), per ISA, and sequences of a few more rows
// (up to kernels::decode_few_queries, 8 over f32, fewer a head with grouped heads), which it
// runs in tiles of 4 rows there: the plan's choice, and the same values as the packed tiles
// those rows took before.
//
// Criterion as in test_sdpa_simd.cpp, per output (out, lse, weights), on every path (the
// reference included): e(x) = max |x - exact| / (1 + |exact|) against the float64 oracle,
//   e(path) <= 2 * e(plain) + 4e-6,
// plain the same computation in plain float32 here (test_util's sdpa_float; 4e-6 is about 32
// float ulps at 1, for the few-ulp exp and other summation orders).
// Results are bitwise identical for 1 and 2 threads and from one run to the next. NaN
// semantics: a key hidden from a row (causal, kv_len) is never read for it, a visible key
// with weight 0 (mask -inf) still multiplies its V row into the output.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention_args.hpp"
#include "kernels/kernels.hpp"
#include "ops/sdpa_plan.hpp"
#include "ops/sdpa_switch.hpp"
#include "test_util.hpp"

namespace {

using attn_test::random_tensor;
const float inf = std::numeric_limits<float>::infinity();
constexpr double floor_tolerance = 4e-6;

struct decode_case {
    int64_t batch = 2, heads_q = 2, heads_kv = 2, len_q = 1, len_kv = 1, dim_qk = 1, dim_v = 1;
    attn_causal causal = ATTN_CAUSAL_NONE;
    bool mask = false, kv_len = false, weights = false, lse = false;
    bool mask_shared_by_heads = false;  // mask [batch, 1, len_q, len_kv], head stride 0
    float dropout = 0.0f;

    std::string name() const {
        return "Lq" + std::to_string(len_q) + "_Lk" + std::to_string(len_kv) + "_Dqk" +
               std::to_string(dim_qk) + "_Dv" + std::to_string(dim_v) + "_H" +
               std::to_string(heads_q) + "/" + std::to_string(heads_kv) + "_causal" +
               std::to_string(int(causal)) + (mask ? "_mask" : "") + (kv_len ? "_kvlen" : "") +
               (dropout > 0 ? "_dropout" : "") + (weights ? "_weights" : "") +
               (lse ? "_lse" : "") + (mask_shared_by_heads ? "_headmask" : "");
    }
};

// Dense BHSD inputs of a case and its descriptor (pointers into this object).
struct problem {
    decode_case c;
    attn_sdpa_desc d;
    std::vector<float> q, k, v, mask;
    std::vector<int32_t> kv_len;

    explicit problem(const decode_case &c_) : c(c_) {
        d = attn_test::make_desc(c.batch, c.heads_q, c.heads_kv, c.len_q, c.len_kv, c.dim_qk,
                                 c.dim_v);
        q = random_tensor(size_t(c.batch * c.heads_q * c.len_q * c.dim_qk), 21);
        k = random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_qk), 22);
        v = random_tensor(size_t(c.batch * c.heads_kv * c.len_kv * c.dim_v), 23);
        d.causal = c.causal;
        d.dropout_p = c.dropout;
        d.dropout_seed = 0xdec0de;
        if (c.mask) {  // every (b, h, i, j) or (b, i, j), a third of it -inf
            const int64_t heads = c.mask_shared_by_heads ? 1 : c.heads_q;
            mask = random_tensor(size_t(c.batch * heads * c.len_q * c.len_kv), 24, -2, 2);
            for (size_t e = 0; e < mask.size(); e += 3) mask[e] = -inf;
            d.mask = mask.data();
            d.mask_strides = {heads * c.len_q * c.len_kv,
                              c.mask_shared_by_heads ? 0 : c.len_q * c.len_kv, c.len_kv};
        }
        if (c.kv_len) {  // batch 0 sees a little over half the keys, the last one all
            for (int64_t b = 0; b < c.batch; ++b)
                kv_len.push_back(int32_t(b + 1 == c.batch ? c.len_kv : c.len_kv / 2 + 1));
            d.kv_len = kv_len.data();
        }
    }

    int64_t rows() const { return c.batch * c.heads_q * c.len_q; }
};

struct result {
    std::vector<float> out, lse, weights;
};

result run(attn_context *ctx, const problem &p) {
    result r;
    r.out.assign(size_t(p.rows() * p.c.dim_v), NAN);
    r.lse.assign(p.c.lse ? size_t(p.rows()) : 0, NAN);
    r.weights.assign(p.c.weights ? size_t(p.rows() * p.c.len_kv) : 0, NAN);
    attn_sdpa_desc d = p.d;
    d.lse = p.c.lse ? r.lse.data() : nullptr;
    d.weights = p.c.weights ? r.weights.data() : nullptr;
    EXPECT_EQ(attn_sdpa_f32(ctx, &d, p.q.data(), p.k.data(), p.v.data(), r.out.data()), ATTN_OK)
        << attn_last_error();
    return r;
}

// Softmax weights A = exp(s - lse) in the number type T from an lse computed in T (0 where
// hidden or masked): T = double from the oracle's lse is exact, T = float the yardstick.
template <class T>
std::vector<T> weights_in(const problem &p, const std::vector<T> &lse) {
    const decode_case &c = p.c;
    std::vector<T> w(size_t(p.rows() * c.len_kv), T(0));
    const int64_t group = c.heads_q / c.heads_kv;
    for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t h = 0; h < c.heads_q; ++h)
            for (int64_t i = 0; i < c.len_q; ++i) {
                const int64_t row = (b * c.heads_q + h) * c.len_q + i;
                if (lse[size_t(row)] == -INFINITY) continue;
                for (int64_t j = 0; j < c.len_kv; ++j) {
                    if (c.causal == ATTN_CAUSAL_TOP_LEFT && j > i) continue;
                    if (c.causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + c.len_kv - c.len_q)
                        continue;
                    if (c.kv_len && j >= p.kv_len[size_t(b)]) continue;
                    T s = T(0);
                    for (int64_t e = 0; e < c.dim_qk; ++e)
                        s += T(p.q[size_t(row * c.dim_qk + e)]) *
                             T(p.k[size_t(((b * c.heads_kv + h / group) * c.len_kv + j) * c.dim_qk + e)]);
                    s *= T(p.d.scale);
                    if (c.mask)
                        s += T(p.mask[size_t(b * p.d.mask_strides.batch + h * p.d.mask_strides.head +
                                             i * p.d.mask_strides.seq + j)]);
                    w[size_t(row * c.len_kv + j)] = T(std::exp(s - lse[size_t(row)]));
                }
            }
    return w;
}

// len_q 1..4 x len_kv x dim, each combination with one of six option sets in turn, then
// grouped-query decoding with every option, and a short last tile of a longer query.
std::vector<decode_case> sweep() {
    std::vector<decode_case> cases;
    int variant = 0;
    for (int64_t len_q = 1; len_q <= 4; ++len_q)
        for (int64_t len_kv : {1, 15, 16, 17, 511, 1024, 4097})
            for (int64_t dim : {1, 7, 64, 128, 130}) {
                decode_case c;
                c.len_q = len_q;
                c.len_kv = len_kv;
                c.dim_qk = c.dim_v = dim;
                switch (variant++ % 6) {
                case 0: c.lse = true; break;
                case 1: c.mask = c.lse = true; break;
                case 2: c.causal = ATTN_CAUSAL_TOP_LEFT; c.kv_len = c.weights = true; break;
                case 3: c.causal = ATTN_CAUSAL_BOTTOM_RIGHT; c.dropout = 0.2f; c.lse = true; break;
                case 4:  // grouped-query attention
                    c.batch = 1;
                    c.heads_q = 8;
                    c.mask = c.lse = true;
                    c.dropout = 0.1f;
                    break;
                default:
                    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
                    c.dim_v = dim + 5;
                    c.mask = c.kv_len = c.weights = c.lse = true;
                    break;
                }
                cases.push_back(c);
            }
    // One query, grouped KV heads: groups of 6 query heads, run as tiles of 4 and 2 heads.
    for (attn_causal causal : {ATTN_CAUSAL_NONE, ATTN_CAUSAL_TOP_LEFT, ATTN_CAUSAL_BOTTOM_RIGHT})
        for (int64_t len_kv : {100, 4097}) {
            decode_case c;
            c.heads_q = 12;
            c.len_kv = len_kv;
            c.dim_qk = c.dim_v = 64;
            c.causal = causal;
            c.mask = c.kv_len = c.weights = c.lse = true;
            c.mask_shared_by_heads = len_kv == 100;
            c.dropout = 0.15f;
            cases.push_back(c);
        }
    // A few rows more than a tile holds (len_q 5..8 over f32): the decode entry's tiles of 4
    // rows, the last one short, each reading K and V in place, split or not, every option.
    variant = 0;
    for (int64_t len_q : {5, 7, 8})
        for (int64_t len_kv : {17, 1024, 4097}) {
            decode_case c;
            c.len_q = len_q;
            c.len_kv = len_kv;
            c.dim_qk = c.dim_v = len_kv == 17 ? 7 : 64;
            c.lse = c.weights = true;
            switch (variant++ % 3) {
            case 0: c.causal = ATTN_CAUSAL_BOTTOM_RIGHT; c.mask = c.kv_len = true; break;
            case 1: c.causal = ATTN_CAUSAL_TOP_LEFT; c.dropout = 0.2f; break;
            default: c.mask = c.mask_shared_by_heads = true; c.dropout = 0.1f; break;
            }
            cases.push_back(c);
        }
    // A last query tile of 2 rows (len_q = br + 2) in a split: rows 48 and 49 run here too.
    for (attn_causal causal : {ATTN_CAUSAL_TOP_LEFT, ATTN_CAUSAL_BOTTOM_RIGHT}) {
        decode_case c;
        c.batch = 1;
        c.len_q = 50;
        c.len_kv = 2500;
        c.dim_qk = c.dim_v = 64;
        c.causal = causal;
        c.mask = c.lse = c.weights = true;
        c.dropout = 0.1f;
        cases.push_back(c);
    }
    return cases;
}

class SdpaDecodeOracle : public testing::TestWithParam<attn_test::path> {};

TEST_P(SdpaDecodeOracle, WithinYardstickOnSweep) {
    auto ctx = attn_test::make_context(GetParam().impl, GetParam().isa);
    ASSERT_TRUE(ctx);
    for (const decode_case &c : sweep()) {
        SCOPED_TRACE(c.name());
        const problem p(c);
        const result got = run(ctx.get(), p);
        std::vector<double> lse_exact;
        std::vector<float> lse_plain;
        const std::vector<double> out_exact = attn_test::sdpa_double(
            p.d, attn_test::to_double(p.q), attn_test::to_double(p.k), attn_test::to_double(p.v),
            &lse_exact);
        const std::vector<float> out_plain = attn_test::sdpa_float(p.d, p.q, p.k, p.v, &lse_plain);
        EXPECT_TRUE(attn_test::within_yardstick(got.out, out_plain, out_exact, floor_tolerance))
            << "out";
        if (c.lse)
            EXPECT_TRUE(attn_test::within_yardstick(got.lse, lse_plain, lse_exact, floor_tolerance))
                << "lse";
        if (c.weights)
            EXPECT_TRUE(attn_test::within_yardstick(got.weights, weights_in(p, lse_plain),
                                                    weights_in(p, lse_exact), floor_tolerance))
                << "weights";
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, SdpaDecodeOracle, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

class SdpaDecode : public testing::TestWithParam<attn_test::path> {};

TEST_P(SdpaDecode, BitwiseAcrossThreadCountsAndRuns) {
    ATTN_SKIP_UNLESS_THREADS(2);
    auto one = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa, 1);
    auto two = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa, 2);
    ASSERT_TRUE(one && two);
    std::vector<decode_case> cases;
    for (int64_t len_q = 1; len_q <= 4; ++len_q) {
        decode_case c;  // split into key chunks (few query tiles, long KV)
        c.len_q = len_q;
        c.len_kv = 4097;
        c.dim_qk = c.dim_v = 130;
        c.mask = c.lse = true;
        c.dropout = 0.1f;
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        cases.push_back(c);
        c.len_kv = 700;  // not split
        c.heads_q = 8;
        c.weights = true;
        cases.push_back(c);
    }
    for (const decode_case &c : cases) {
        SCOPED_TRACE(c.name());
        const problem p(c);
        const result a = run(one.get(), p), b = run(two.get(), p), again = run(two.get(), p);
        EXPECT_TRUE(attn_test::bitwise_equal(a.out, b.out));
        EXPECT_TRUE(attn_test::bitwise_equal(a.lse, b.lse));
        EXPECT_TRUE(attn_test::bitwise_equal(a.weights, b.weights));
        EXPECT_TRUE(attn_test::bitwise_equal(b.out, again.out));
        EXPECT_TRUE(attn_test::bitwise_equal(b.lse, again.lse));
        EXPECT_TRUE(attn_test::bitwise_equal(b.weights, again.weights));
        // the outputs are real numbers, not all zeros
        double norm = 0.0;
        for (float x : a.out) norm += double(x) * x;
        EXPECT_GT(norm, 0.0);
    }
}

// Row 0 of every head masked by -inf on every key, and batch 1 with kv_len 0: zeros, lse -inf.
TEST_P(SdpaDecode, FullyMaskedRowsGiveZerosAndMinusInf) {
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa);
    ASSERT_TRUE(ctx);
    for (int64_t len_kv : {17, 600, 4097}) {
        SCOPED_TRACE(len_kv);
        decode_case c;
        c.len_q = 3;
        c.len_kv = len_kv;
        c.dim_qk = c.dim_v = 64;
        c.mask = c.lse = c.weights = true;
        problem p(c);
        p.kv_len = {int32_t(len_kv), 0};
        p.d.kv_len = p.kv_len.data();
        for (int64_t h = 0; h < c.heads_q; ++h)
            for (int64_t j = 0; j < len_kv; ++j) p.mask[size_t(h * c.len_q * len_kv + j)] = -inf;
        const result r = run(ctx.get(), p);
        for (int64_t row = 0; row < p.rows(); ++row) {
            const bool empty = row % c.len_q == 0 || row >= c.heads_q * c.len_q;
            if (!empty) {
                EXPECT_TRUE(std::isfinite(r.lse[size_t(row)])) << "row " << row;
                continue;
            }
            EXPECT_EQ(r.lse[size_t(row)], -inf) << "row " << row;
            for (int64_t e = 0; e < c.dim_v; ++e)
                EXPECT_EQ(r.out[size_t(row * c.dim_v + e)], 0.0f) << "row " << row;
            for (int64_t j = 0; j < len_kv; ++j)
                EXPECT_EQ(r.weights[size_t(row * len_kv + j)], 0.0f) << "row " << row;
        }
    }
}

bool row_all(const std::vector<float> &out, int64_t row, int64_t dim, bool (*pred)(float)) {
    for (int64_t e = 0; e < dim; ++e)
        if (!pred(out[size_t(row * dim + e)])) return false;
    return true;
}
bool is_finite(float x) { return std::isfinite(x); }
bool is_nan(float x) { return std::isnan(x); }

// One batch, one head: len_q query rows against len_kv keys of dim floats.
decode_case single_head(int64_t len_q, int64_t len_kv, int64_t dim, attn_causal causal) {
    decode_case c;
    c.batch = 1;
    c.heads_q = c.heads_kv = 1;
    c.len_q = len_q;
    c.len_kv = len_kv;
    c.dim_qk = c.dim_v = dim;
    c.causal = causal;
    return c;
}

// A NaN in a V row the row never sees (causal, kv_len) stays out of it; one in the V row of
// a key it sees with weight 0 (mask -inf) reaches it.
TEST_P(SdpaDecode, NanInValuesFollowsVisibility) {
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa);
    ASSERT_TRUE(ctx);
    for (int64_t len_kv : {40, 700, 4097}) {
        SCOPED_TRACE(len_kv);
        // causal top-left, 4 rows: key 2 is seen by rows 2 and 3 only
        decode_case c = single_head(4, len_kv, 33, ATTN_CAUSAL_TOP_LEFT);
        problem p(c);
        for (int64_t e = 0; e < c.dim_v; ++e) p.v[size_t(2 * c.dim_v + e)] = NAN;
        result r = run(ctx.get(), p);
        EXPECT_TRUE(row_all(r.out, 0, c.dim_v, is_finite));
        EXPECT_TRUE(row_all(r.out, 1, c.dim_v, is_finite));
        EXPECT_TRUE(row_all(r.out, 2, c.dim_v, is_nan));
        EXPECT_TRUE(row_all(r.out, 3, c.dim_v, is_nan));

        // kv_len hides the keys from len_kv / 2 + 1 on; NaN in the last V row
        c.causal = ATTN_CAUSAL_NONE;
        c.kv_len = true;
        c.batch = 2;
        problem hidden(c);
        for (int64_t e = 0; e < c.dim_v; ++e) hidden.v[size_t((len_kv - 1) * c.dim_v + e)] = NAN;
        r = run(ctx.get(), hidden);
        for (int64_t row = 0; row < c.len_q; ++row)
            EXPECT_TRUE(row_all(r.out, row, c.dim_v, is_finite)) << "row " << row;

        // mask -inf on key 5 of row 1, NaN in V row 5: row 1 NaN (weight 0 times NaN)
        c.kv_len = false;
        c.batch = 1;
        c.mask = true;
        problem masked(c);
        for (float &x : masked.mask) x = x == -inf ? 0.5f : x;
        masked.mask[size_t(1 * len_kv + 5)] = -inf;
        // and row 3's keys all -inf: a fully masked row stays zeros
        for (int64_t j = 0; j < len_kv; ++j) masked.mask[size_t(3 * len_kv + j)] = -inf;
        for (int64_t e = 0; e < c.dim_v; ++e) masked.v[size_t(5 * c.dim_v + e)] = NAN;
        r = run(ctx.get(), masked);
        EXPECT_TRUE(row_all(r.out, 1, c.dim_v, is_nan));
        // rows 0 and 2 see key 5 with a finite weight: NaN as well
        EXPECT_TRUE(row_all(r.out, 0, c.dim_v, is_nan));
        EXPECT_TRUE(row_all(r.out, 2, c.dim_v, is_nan));
        EXPECT_TRUE(row_all(r.out, 3, c.dim_v, [](float x) { return x == 0.0f; }));
    }
}

// A NaN in K makes the scores of the rows that see that key NaN: out and lse NaN, never zeros.
TEST_P(SdpaDecode, NanScoreMakesTheRowNan) {
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa);
    ASSERT_TRUE(ctx);
    for (int64_t len_kv : {40, 700, 4097}) {
        SCOPED_TRACE(len_kv);
        // bottom-right: row 0 does not see the last key
        decode_case c = single_head(2, len_kv, 64, ATTN_CAUSAL_BOTTOM_RIGHT);
        c.lse = true;
        problem p(c);
        p.k[size_t((len_kv - 1) * c.dim_qk + 3)] = NAN;
        const result r = run(ctx.get(), p);
        EXPECT_TRUE(row_all(r.out, 0, c.dim_v, is_finite));
        EXPECT_TRUE(std::isfinite(r.lse[0]));
        EXPECT_TRUE(row_all(r.out, 1, c.dim_v, is_nan));
        EXPECT_TRUE(std::isnan(r.lse[1]));
    }
}

// Sequences of a few rows against the packed tiles they took before the decode entry took them
// (ops/sdpa_switch.hpp): out, lse and weights within a few float ulps of each other (the same
// exact products, summed in another order), both sides checked against the oracle above.
TEST_P(SdpaDecode, FewRowsAgreeWithThePackedTiles) {
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa);
    ASSERT_TRUE(ctx);
    for (int64_t len_q : {5, 8}) {
        decode_case c;
        c.len_q = len_q;
        c.len_kv = 1500;
        c.dim_qk = c.dim_v = 64;
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        c.mask = c.lse = c.weights = true;
        SCOPED_TRACE(c.name());
        const problem p(c);
        const result few = run(ctx.get(), p);
        attn::ops::set_few_rows_on_decode(false);
        const result packed = run(ctx.get(), p);
        attn::ops::set_few_rows_on_decode(true);
        EXPECT_LE(attn_test::max_rel_error(few.out.data(), packed.out.data(), few.out.size()), 1e-5);
        EXPECT_LE(attn_test::max_rel_error(few.lse.data(), packed.lse.data(), few.lse.size()), 1e-6);
        EXPECT_LE(attn_test::max_rel_error(few.weights.data(), packed.weights.data(), few.weights.size()), 1e-5);
        EXPECT_FALSE(attn_test::bitwise_equal(few.out, packed.out));  // two different kernels ran
    }
}

// Where a call's K and V exceed the L3 they stream from memory, and decoding prefetches their
// rows otherwise (kernels::decode_prefetch(): on Zen 4 some into the L2 only, some not at all).
// Prefetching is no part of the results: every policy, here applied to caches of any size
// (an L3 of one byte), gives the bits of none of its rules. f32, D128 (rows of 512 bytes),
// D64 (256) and D16 (64), one and four query rows a KV head, keys split or not.
TEST_P(SdpaDecode, PrefetchPolicyLeavesTheBits) {
    using attn::kernels::decode_prefetch_policy;
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, GetParam().isa, 1);
    ASSERT_TRUE(ctx);
    const decode_prefetch_policy plain{8192, 0, 0, 0, 0};
    const decode_prefetch_policy streamed[] = {
        {1024, 128, 512, 256, 1},  // Zen 4's over a cache from memory
        {1024, 0, 0, 64, 1},       // every row prefetched, into the L2
        {1024, 0, 1 << 20, 0, 1},  // no row prefetched
    };
    for (const int64_t group : {1, 4})
        for (const int64_t dim : {128, 64, 16}) {
            decode_case c;
            c.batch = 2;
            c.heads_q = 4 * group;
            c.heads_kv = 4;
            c.len_kv = dim == 64 ? 4097 : 1500;
            c.dim_qk = c.dim_v = dim;
            c.lse = true;
            c.causal = dim == 16 ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
            SCOPED_TRACE(c.name());
            const problem p(c);
            attn::kernels::set_decode_prefetch(&plain);
            const result want = run(ctx.get(), p);
            for (const decode_prefetch_policy &policy : streamed) {
                attn::kernels::set_decode_prefetch(&policy);
                const result got = run(ctx.get(), p);
                EXPECT_TRUE(attn_test::bitwise_equal(got.out, want.out)) << policy.memory_l2_from;
                EXPECT_TRUE(attn_test::bitwise_equal(got.lse, want.lse)) << policy.memory_l2_from;
            }
            attn::kernels::set_decode_prefetch(nullptr);
        }
}

INSTANTIATE_TEST_SUITE_P(PerIsa, SdpaDecode, testing::ValuesIn(attn_test::simd_paths()),
                         attn_test::path_name);

// Which entry the plan gives a sequence of n rows: the decode entry up to attention_direct_rows
// rows, and up to decode_few_queries rows while query heads a KV head x rows x bits of a K
// element stay within decode_few_row_bits, in tiles of 4 rows; the packing entries beyond, and
// for a decoding step's heads as rows; the tiles for more than 4 rows with the switch off.
TEST(SdpaFewRowsPlan, DecodeEntryUpToItsLimitThenPackedTiles) {
    using attn::kernels::decode_few_queries;
    const attn::kernels::kernel_table *bf16_level = attn::kernels::kernel_table_for(ATTN_ISA_AVX512_BF16);
    ASSERT_NE(bf16_level, nullptr);
    const struct {
        int64_t heads_q, heads_kv, len_q;
        attn_dtype q, kv;
        const char *impl;
        int64_t q_tiles;
    } table[] = {
        {8, 8, 5, ATTN_DTYPE_F32, ATTN_DTYPE_F32, "decode", 2},
        {8, 8, 8, ATTN_DTYPE_F32, ATTN_DTYPE_F32, "decode", 2},
        {8, 8, 9, ATTN_DTYPE_F32, ATTN_DTYPE_F32, "f32_tiles", 1},
        {8, 4, 5, ATTN_DTYPE_F32, ATTN_DTYPE_F32, "f32_tiles", 1},  // 10 rows share a KV head
        {8, 8, decode_few_queries, ATTN_DTYPE_F32, ATTN_DTYPE_BF16, "decode_pv_pairs", 4},
        {8, 8, decode_few_queries + 1, ATTN_DTYPE_F32, ATTN_DTYPE_BF16, "f32_tiles", 1},
        {8, 8, 8, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, "decode_pairs", 2},  // pairs both ways: all the rows
        {8, 8, decode_few_queries, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, "decode_pairs", 4},
        {8, 8, decode_few_queries + 1, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, "bf16_pairs", 1},
        {32, 8, 5, ATTN_DTYPE_F32, ATTN_DTYPE_BF16, "f32_tiles", 1},
        {32, 8, 8, ATTN_DTYPE_F32, ATTN_DTYPE_I8, "decode", 2},
        {32, 8, 9, ATTN_DTYPE_F32, ATTN_DTYPE_I8, "f32_tiles", 1},
        {8, 8, decode_few_queries, ATTN_DTYPE_F32, ATTN_DTYPE_I4, "decode", 4},
        {8, 8, decode_few_queries + 1, ATTN_DTYPE_F32, ATTN_DTYPE_I4, "f32_tiles", 1},
        {8, 8, decode_few_queries, ATTN_DTYPE_BF16, ATTN_DTYPE_I8, "decode", 4},  // code pairs
        {32, 8, 8, ATTN_DTYPE_BF16, ATTN_DTYPE_I8, "bf16_code_pairs", 1},
        {12, 1, 1, ATTN_DTYPE_F32, ATTN_DTYPE_F32, "decode", 1},        // a decoding step: always
        {32, 8, 1, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, "decode_pairs", 1},  // 4 heads as a tile's rows
        {32, 8, 1, ATTN_DTYPE_F32, ATTN_DTYPE_BF16, "decode_pv_pairs", 1},  // S exact, P V on pairs
        {32, 8, 1, ATTN_DTYPE_F16, ATTN_DTYPE_BF16, "decode_pv_pairs", 1},
        {8, 8, 1, ATTN_DTYPE_F32, ATTN_DTYPE_BF16, "decode", 1},          // one row a KV head
        {32, 8, 1, ATTN_DTYPE_F32, ATTN_DTYPE_F16, "decode", 1},          // V not bf16
        {8, 8, 1, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, "decode", 1},         // one row a KV head
        {32, 2, 1, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, "bf16_pairs", 1},  // 16 heads as rows
    };
    for (const auto &e : table)
        for (const bool on : {true, false}) {
            SCOPED_TRACE(testing::Message() << "H" << e.heads_q << " KV" << e.heads_kv << " Lq" << e.len_q
                                            << " kv_type " << e.kv << (on ? "" : ", switch off"));
            attn_sdpa_desc d = attn_test::make_desc(1, e.heads_q, e.heads_kv, e.len_q, 3000, 64, 64);
            d.q_type = e.q;
            d.kv_type = e.kv;
            d.out_type = e.q;
            const attn::ops::plan_kernels k{&bf16_level->attention_impls, bf16_level->vector_floats,
                                            attn::ops::call_products_of(ATTN_FPMATH_STRICT, d),
                                            attn::ops::heads_as_rows_min_group, on};
            const attn::ops::sdpa_plan plan = attn::ops::plan_sdpa(d, k, 2);
            ASSERT_EQ(plan.sequences.size(), 1u);
            const bool few = e.len_q > attn::kernels::attention_direct_rows &&
                             std::string(e.impl).compare(0, 6, "decode") == 0;
            const char *packing = e.q != ATTN_DTYPE_BF16    ? "f32_tiles"
                                  : e.kv == ATTN_DTYPE_BF16 ? "bf16_pairs"
                                                            : "bf16_code_pairs";
            const std::string want = few && !on ? packing : e.impl;
            EXPECT_EQ(plan.sequences[0].impl->name, want);
            if (want == e.impl) EXPECT_EQ(plan.sequences[0].q_tiles, e.q_tiles);
        }
}

}  // namespace
