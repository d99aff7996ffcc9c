// Decoding steps whose query heads are the rows of the tile kernels (sdpa_plan.hpp's
// heads_as_rows): latent attention (MLA: 16 or 128 query heads over one latent KV head,
// dim_qk 576, dim_v 512, V the first 512 elements of each cached row, so v points into k) and
// grouped-query decoding with groups of 16 and 32, over f32 and bf16 caches, contiguous and
// paged, with the options a tile maps row by row (mask per head, ALiBi, sinks, dropout) and
// each visibility of a single query row (causal alignments, windows, kv_len).
//
// Criterion (test_sdpa_simd.cpp's), per output (out, lse), on every path, the reference
// included: e(x) = max |x - exact| / (1 + |exact|) against float64 computed here from the
// stored values, e(path) <= 2 e(plain) + 4e-6, plain the same computation in float32
// (test_features_util.hpp) with the weights rounded to bf16 before P V when the cache is bf16
// (the rounding attn.h allows there); 4e-6 is about 32 float ulps at 1, for the few-ulp exp
// and other summation orders. Bitwise: a decoding sequence of a packed call equals the same
// sequence alone, and 1 and 2 threads give the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_impl.hpp"
#include "ops/sdpa_plan.hpp"
#include "ref/convert.hpp"
#include "fake_impls.hpp"
#include "test_features_util.hpp"

namespace {

constexpr double floor_tolerance = 4e-6;

struct rows_case {
    const char *name;
    int64_t heads_q, heads_kv, len_kv, dim_qk, dim_v;
    bool v_inside_k, bf16;
    int64_t page_size;  // 0: contiguous
    attn_causal causal;
    int64_t window_left, kv_len;  // -1: none
    bool mask, alibi, sinks, dropout;
};

// MLA over 1100 keys is split into key chunks (split keys), over 300 it is not.
const rows_case cases[] = {
    {"mla_H16_bf16_split_kv_len", 16, 1, 1100, 576, 512, true, true, 0,
     ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN, -1, 1000, false, false, true, false},
    {"mla_H16_f32_mask_per_head", 16, 1, 1100, 576, 512, true, false, 0, ATTN_CAUSAL_NONE, -1, -1,
     true, false, false, false},
    {"mla_H128_bf16", 128, 1, 300, 576, 512, true, true, 0, ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1,
     false, false, false, false},
    {"mla_H128_f32_paged", 128, 1, 300, 576, 512, true, false, 16, ATTN_CAUSAL_NONE, -1, 250,
     false, false, false, false},
    {"mla_H16_bf16_paged_window", 16, 1, 700, 576, 512, true, true, 16, ATTN_CAUSAL_BOTTOM_RIGHT,
     200, -1, false, false, false, false},
    {"gqa16_D128_bf16_alibi_sinks_dropout", 32, 2, 1300, 128, 128, false, true, 0,
     ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1, false, true, true, true},
    {"gqa32_D128_f32_top_left_sees_key_0", 32, 1, 500, 128, 128, false, false, 0,
     ATTN_CAUSAL_TOP_LEFT, -1, -1, true, false, false, false},
    {"gqa32_D128_bf16_window_mask", 64, 2, 900, 128, 128, false, true, 0,
     ATTN_CAUSAL_BOTTOM_RIGHT, 300, -1, true, false, true, false},
};

// A tensor as stored (f32 or bf16 bytes) and its stored values.
struct stored {
    std::vector<uint8_t> bytes;
    std::vector<double> values;
};

stored store(const std::vector<float> &x, bool bf16) {
    stored s;
    s.bytes.resize(x.size() * (bf16 ? 2 : 4));
    for (size_t i = 0; i < x.size(); ++i) {
        if (!bf16) {
            std::memcpy(&s.bytes[i * 4], &x[i], 4);
            s.values.push_back(x[i]);
            continue;
        }
        const uint16_t h = attn::convert::f32_to_bf16(x[i]);
        std::memcpy(&s.bytes[i * 2], &h, 2);
        s.values.push_back(attn::convert::bf16_to_f32(h));
    }
    return s;
}

// One decoding step (batch 1, len_q 1) of a case: its desc, its stored inputs (K, and V when
// not inside K, in pages when paged), and the logical dense q, k, v for the oracle.
struct problem {
    rows_case c;
    attn_sdpa_desc d;
    stored q, k, v;             // k: [heads_kv, len_kv, dim_qk] rows; v unused when inside k
    std::vector<uint8_t> pool;  // paged: pages of [heads_kv, page_size, dim_qk] rows of k (the
                                // paged cases have v inside k)
    std::vector<int32_t> table, kv_len;
    std::vector<float> mask, slopes, sinks;
    std::vector<double> vd;     // the logical V (inside k: the first dim_v of each row)

    explicit problem(const rows_case &c_) : c(c_) {
        const int64_t H = c.heads_q, Hkv = c.heads_kv, L = c.len_kv;
        d = attn_test::make_desc(1, H, Hkv, 1, L, c.dim_qk, c.dim_v);
        d.q_type = d.kv_type = c.bf16 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        q = store(attn_test::random_tensor(size_t(H * c.dim_qk), 51, -2.0f, 2.0f), c.bf16);
        k = store(attn_test::random_tensor(size_t(Hkv * L * c.dim_qk), 52, -2.0f, 2.0f), c.bf16);
        if (c.v_inside_k) {
            d.v = d.k;  // rows of dim_qk elements, the first dim_v of them read
            for (int64_t r = 0; r < Hkv * L; ++r)
                for (int64_t e = 0; e < c.dim_v; ++e) vd.push_back(k.values[size_t(r * c.dim_qk + e)]);
        } else {
            v = store(attn_test::random_tensor(size_t(Hkv * L * c.dim_v), 53), c.bf16);
            vd = v.values;
        }
        set_options();
        if (c.page_size > 0) page_k();
    }

    void set_options() {
        d.causal = c.causal;
        d.window_left = c.window_left;
        if (c.kv_len >= 0) {
            kv_len = {int32_t(c.kv_len)};
            d.kv_len = kv_len.data();
        }
        if (c.mask) {  // [1, H, 1, len_kv]: each head its own row, a fifth of it -inf
            mask = attn_test::random_tensor(size_t(c.heads_q * c.len_kv), 54, -2.0f, 2.0f);
            for (size_t e = 0; e < mask.size(); e += 5) mask[e] = -INFINITY;
            d.mask = mask.data();
            d.mask_strides = {c.heads_q * c.len_kv, c.len_kv, c.len_kv};
        }
        if (c.alibi) {
            slopes = attn_test::alibi_geometric(c.heads_q);
            d.alibi_slopes = slopes.data();
        }
        if (c.sinks) {
            sinks = attn_test::random_tensor(size_t(c.heads_q), 55, -1.0f, 3.0f);
            d.sinks = sinks.data();
        }
        if (c.dropout) {
            d.dropout_p = 0.2f;
            d.dropout_seed = 0x1a7e;
        }
    }

    // K's rows into pages in a shuffled order, two spare pages of NaN (never read).
    void page_k() {
        const int64_t per = (c.len_kv + c.page_size - 1) / c.page_size, pages = per + 2;
        const size_t elem = c.bf16 ? 2 : 4, row = size_t(c.dim_qk) * elem;
        std::vector<int32_t> ids(static_cast<size_t>(pages));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
        table.assign(ids.begin(), ids.begin() + per);
        pool.assign(size_t(pages * c.heads_kv * c.page_size) * row, 0xff);  // NaN bytes
        for (int64_t h = 0; h < c.heads_kv; ++h)
            for (int64_t j = 0; j < c.len_kv; ++j) {
                const int64_t at = (table[size_t(j / c.page_size)] * c.heads_kv + h) * c.page_size +
                                   j % c.page_size;
                std::memcpy(&pool[size_t(at) * row], &k.bytes[size_t(h * c.len_kv + j) * row], row);
            }
        d.k = d.v = {c.heads_kv * c.page_size * c.dim_qk, c.page_size * c.dim_qk, c.dim_qk};
        d.block_table = table.data();
        d.block_table_stride = per;
        d.page_size = c.page_size;
        d.num_pages = pages;
    }

    const void *k_data() const { return c.page_size > 0 ? pool.data() : k.bytes.data(); }
    const void *v_data() const { return c.v_inside_k || c.page_size > 0 ? k_data() : v.bytes.data(); }
};

struct result {
    std::vector<float> out, lse;
};

result run(attn_context *ctx, const problem &p) {
    result r;
    r.out.assign(size_t(p.c.heads_q * p.c.dim_v), NAN);
    r.lse.assign(size_t(p.c.heads_q), NAN);
    attn_sdpa_desc d = p.d;
    d.lse = r.lse.data();
    EXPECT_EQ(attn_sdpa(ctx, &d, p.q.bytes.data(), p.k_data(), p.v_data(), r.out.data()), ATTN_OK)
        << attn_last_error();
    return r;
}

class HeadsAsRowsOracle : public attn_test::path_test {};

TEST_P(HeadsAsRowsOracle, WithinYardstick) {
    for (const rows_case &c : cases) {
        SCOPED_TRACE(c.name);
        const problem p(c);
        std::vector<double> lse_exact;
        std::vector<float> lse_plain;
        const std::vector<double> exact =
            attn_test::sdpa_features_in<double>(p.d, p.q.values, p.k.values, p.vd, &lse_exact);
        const std::vector<float> plain = attn_test::sdpa_features_in<float>(
            p.d, attn_test::to_float(p.q.values), attn_test::to_float(p.k.values),
            attn_test::to_float(p.vd), &lse_plain, nullptr,
            nullptr, c.bf16);
        const result got = run(ctx(), p);
        EXPECT_TRUE(attn_test::within_yardstick(got.out, plain, exact, floor_tolerance)) << "out";
        EXPECT_TRUE(attn_test::within_yardstick(got.lse, lse_plain, lse_exact, floor_tolerance)) << "lse";
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, HeadsAsRowsOracle, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

class HeadsAsRowsBits : public testing::TestWithParam<attn_test::path> {
  protected:
    attn_test::context_ptr context(int threads) const {
        return attn_test::make_context(GetParam().impl, GetParam().isa, threads);
    }
};

// 1 and 2 threads: the same bits (split keys over 1100 keys, and not).
TEST_P(HeadsAsRowsBits, SameBitsForOneAndTwoThreads) {
    ATTN_SKIP_UNLESS_THREADS(2);
    const attn_test::context_ptr one = context(1), two = context(2);
    for (const rows_case &c : cases) {
        SCOPED_TRACE(c.name);
        const problem p(c);
        const result a = run(one.get(), p), b = run(two.get(), p);
        EXPECT_TRUE(attn_test::bitwise_equal(a.out, b.out));
        EXPECT_TRUE(attn_test::bitwise_equal(a.lse, b.lse));
    }
}

// MLA decoding sequences of a packed serving step (with a 5-query chunk between them) give the
// bits of each computed alone, at 1 and 2 threads, f32 and bf16.
TEST_P(HeadsAsRowsBits, DecodingSequenceOfAPackedCallAsIfAlone) {
    const int64_t H = 16, Dqk = 576, Dv = 512;
    const std::vector<int32_t> q_start = {0, 1, 6, 7, 8}, kv_start = {0, 1100, 1300, 1400, 2000};
    const std::vector<int32_t> kv_len = {1100, 200, 100, 500};  // sequence 0 split
    const int64_t total_q = q_start.back(), total_kv = kv_start.back();
    for (const bool bf16 : {false, true})
        for (const int threads : {1, 2}) {
            SCOPED_TRACE(testing::Message() << (bf16 ? "bf16" : "f32") << " threads " << threads);
            const attn_test::context_ptr ctx = context(threads);
            const stored q = store(attn_test::random_tensor(size_t(total_q * H * Dqk), 61), bf16);
            const stored k = store(attn_test::random_tensor(size_t(total_kv * Dqk), 62), bf16);
            attn_sdpa_desc d;
            attn_sdpa_desc_init(&d, 4, H, 5, 1100, Dqk);
            d.heads_kv = 1;
            d.dim_v = Dv;
            d.q_type = d.kv_type = bf16 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
            d.q = attn_layout{0, Dqk, H * Dqk};
            d.out = attn_layout{0, Dv, H * Dv};
            d.k = d.v = attn_layout{0, Dqk, Dqk};  // v inside k
            d.q_start = q_start.data();
            d.kv_start = kv_start.data();
            d.kv_len = kv_len.data();
            d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
            std::vector<float> out(size_t(total_q * H * Dv)), lse(size_t(total_q * H));
            d.lse = lse.data();
            ASSERT_EQ(attn_sdpa(ctx.get(), &d, q.bytes.data(), k.bytes.data(), k.bytes.data(),
                                out.data()), ATTN_OK) << attn_last_error();
            const size_t elem = bf16 ? 2 : 4;
            for (const int64_t b : {0, 2, 3}) {  // the decoding sequences
                attn_sdpa_desc one = d;
                one.batch = 1;
                one.len_q = 1;
                one.len_kv = kv_start[size_t(b) + 1] - kv_start[size_t(b)];
                one.q_start = one.kv_start = nullptr;
                one.kv_len = &kv_len[size_t(b)];
                std::vector<float> out1(static_cast<size_t>(H * Dv)), lse1(static_cast<size_t>(H));
                one.lse = lse1.data();
                const uint8_t *k1 = k.bytes.data() + size_t(kv_start[size_t(b)] * Dqk) * elem;
                ASSERT_EQ(attn_sdpa(ctx.get(), &one, q.bytes.data() + size_t(q_start[size_t(b)] * H * Dqk) * elem,
                                    k1, k1, out1.data()), ATTN_OK) << attn_last_error();
                const auto at = out.begin() + q_start[size_t(b)] * H * Dv;
                EXPECT_TRUE(attn_test::bitwise_equal(std::vector<float>(at, at + H * Dv), out1))
                    << "sequence " << b;
                const auto lse_at = lse.begin() + q_start[size_t(b)] * H;
                EXPECT_TRUE(attn_test::bitwise_equal(std::vector<float>(lse_at, lse_at + H), lse1))
                    << "lse of sequence " << b;
            }
        }
}

INSTANTIATE_TEST_SUITE_P(Paths, HeadsAsRowsBits, testing::ValuesIn(attn_test::simd_paths()),
                         attn_test::path_name);

// The plan: one query with a group of heads_as_rows_min_group heads or more goes to the tile
// entry with the group's heads as rows, in as few tiles of at most br rows as cover it; smaller
// groups, more queries, or the switch at 0 keep the decode entry, as does (whatever the switch)
// a group of no more heads than the decode entry takes in one tile.
TEST(heads_as_rows_plan, GroupsBecomeTileRows) {
    attn::kernels::attention_impl_list impls = attn_test::fake_impls();
    struct expect {
        int64_t heads_q, heads_kv, len_q, from;
        const char *impl;
        int64_t head_rows, head_tiles;
    };
    const expect table[] = {
        {16, 1, 1, attn::ops::heads_as_rows_min_group, "tiles", 16, 1},
        {128, 1, 1, attn::ops::heads_as_rows_min_group, "tiles", 64, 2},
        {100, 1, 1, attn::ops::heads_as_rows_min_group, "tiles", 50, 2},
        {64, 2, 1, attn::ops::heads_as_rows_min_group, "tiles", 32, 1},
        {32, 8, 1, attn::ops::heads_as_rows_min_group, "decode", 4, 1},
        {16, 1, 2, attn::ops::heads_as_rows_min_group, "decode", 1, 16},
        {16, 1, 1, 0, "decode", 4, 4},
        {32, 8, 1, 2, "decode", 4, 1},  // a group the decode entry takes whole: as before
        {64, 8, 1, 8, "tiles", 8, 1},
    };
    for (const expect &e : table) {
        SCOPED_TRACE(testing::Message() << "H" << e.heads_q << " KV" << e.heads_kv << " Lq" << e.len_q
                                        << " from " << e.from);
        attn_sdpa_desc d = attn_test::make_desc(1, e.heads_q, e.heads_kv, e.len_q, 3000, 576, 512);
        const attn::ops::plan_kernels k{&impls, 16, true, e.from};
        const attn::ops::sdpa_plan plan = attn::ops::plan_sdpa(d, k, 2);
        ASSERT_EQ(plan.sequences.size(), 1u);
        const attn::ops::sequence_plan &s = plan.sequences[0];
        EXPECT_STREQ(s.impl->name, e.impl);
        EXPECT_EQ(s.head_rows, e.head_rows);
        EXPECT_EQ(s.head_tiles, e.head_tiles);
        EXPECT_EQ(s.heads_as_rows, std::string(e.impl) == "tiles");
        if (s.heads_as_rows) EXPECT_FALSE(s.prepacked);
    }
}

}  // namespace
