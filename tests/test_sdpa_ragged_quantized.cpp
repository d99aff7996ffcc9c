// Packed sequences over quantized K/V caches (I8 per row with zero points, I4 per group of 32,
// FP8 E4M3 per row), on every path:
// - a serving step packed by q_start + kv_start (prefill chunks, decoding tokens, an idle
//   sequence, BOTTOM_RIGHT_KV_LEN with kv_len) gives each sequence bitwise the rows and lse of
//   the same sequence computed alone (batch invariance), its scales addressed by packed row;
// - the same step over a paged cache (q_start + block_table, scales in the pages) gives the
//   same bits as the packed contiguous one.
// The values themselves are held against float64 by test_sdpa_quantized.cpp (a sequence alone
// is an ordinary dense call).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "test_util.hpp"

namespace {

struct cache_type {
    attn_dtype type;
    int64_t group;  // 0: per row
    bool zeros;
};

// Rows x D values quantized to t (rows of D elements, scales [rows, D / group]).
struct quantized_rows {
    std::vector<uint8_t> codes;
    std::vector<float> scale, zero;
    int64_t row_bytes, groups;
};

quantized_rows quantize(const std::vector<float> &x, int64_t rows, int64_t D, const cache_type &c) {
    quantized_rows q;
    const int64_t bits = attn_dtype_bits(c.type);
    q.row_bytes = D * bits / 8;
    q.groups = c.group ? D / c.group : 1;
    q.codes.assign(size_t(rows * q.row_bytes), 0);
    q.scale.assign(size_t(rows * q.groups), 0.0f);
    q.zero.assign(c.zeros ? q.scale.size() : 0, 0.0f);
    EXPECT_EQ(attn_quantize(nullptr, rows, D, x.data(), ATTN_DTYPE_F32, D, q.codes.data(), c.type,
                            D, q.scale.data(), c.zeros ? q.zero.data() : nullptr, q.groups, c.group),
              ATTN_OK)
        << attn_last_error();
    return q;
}

class ragged_quantized_test : public attn_test::path_test {};

TEST_P(ragged_quantized_test, PackedStepEqualsEachSequenceAloneAndPaged) {
    // (queries, cached keys): short chunks (4 rows on the decode entry; 9 there over 4-bit
    // codes, packed over 8-bit ones), long and short decodes, an idle sequence, a prefill
    // chunk of more rows than the decode entry takes
    const std::vector<std::pair<int32_t, int32_t>> seqs = {{4, 40}, {1, 600}, {1, 35}, {0, 10},
                                                           {9, 130}, {21, 150}};
    const int64_t B = int64_t(seqs.size()), H = 8, KV = 2, D = 64, page = 16, stride = 38;
    std::vector<int32_t> q_start = {0}, kv_start = {0}, kv_len;
    for (auto [n, keys] : seqs) {
        q_start.push_back(q_start.back() + n);
        kv_start.push_back(kv_start.back() + keys);
        kv_len.push_back(keys);
    }
    const int64_t total_q = q_start.back(), total_k = kv_start.back();
    const std::vector<float> q = attn_test::random_tensor(size_t(total_q * H * D), 91);
    const std::vector<float> kf = attn_test::random_tensor(size_t(total_k * KV * D), 92);
    const std::vector<float> vf = attn_test::random_tensor(size_t(total_k * KV * D), 93);
    const std::vector<float> sinks(size_t(H), 0.25f);
    for (const cache_type c : {cache_type{ATTN_DTYPE_I8, 0, true}, cache_type{ATTN_DTYPE_I4, 32, false},
                               cache_type{ATTN_DTYPE_FP8_E4M3, 0, false}}) {
        SCOPED_TRACE(testing::Message() << "kv_type " << c.type);
        // packed rows [total_k, KV, D], their scales [total_k, KV, groups]
        const quantized_rows k = quantize(kf, total_k * KV, D, c), v = quantize(vf, total_k * KV, D, c);
        const int64_t g = k.groups;
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, B, H, 21, 600, D);
        d.heads_kv = KV;
        d.kv_type = c.type;
        d.q = d.out = attn_layout{0, D, H * D};
        d.q_start = q_start.data();
        d.kv_len = kv_len.data();
        d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
        d.sinks = sinks.data();
        d.k_group = d.v_group = c.group;
        attn_sdpa_desc packed = d;
        packed.kv_start = kv_start.data();
        packed.k = packed.v = attn_layout{0, D, KV * D};
        packed.k_scale = k.scale.data(), packed.v_scale = v.scale.data();
        if (c.zeros) packed.k_zero = k.zero.data(), packed.v_zero = v.zero.data();
        packed.k_scale_strides = packed.v_scale_strides = attn_layout{0, g, KV * g};
        std::vector<float> out(q.size(), NAN), lse(size_t(total_q * H), NAN);
        packed.lse = lse.data();
        ASSERT_EQ(attn_sdpa(ctx(), &packed, q.data(), k.codes.data(), v.codes.data(), out.data()), ATTN_OK)
            << attn_last_error();

        // each sequence alone: a dense call of its own counts over its own rows and scales
        for (int64_t b = 0; b < B; ++b) {
            const int64_t n = seqs[size_t(b)].first, keys = seqs[size_t(b)].second, r0 = kv_start[size_t(b)];
            if (n == 0) continue;
            attn_sdpa_desc one;
            attn_sdpa_desc_init(&one, 1, H, n, keys, D);
            one.heads_kv = KV;
            one.kv_type = d.kv_type;
            one.q = one.out = attn_layout{0, D, H * D};
            one.k = one.v = attn_layout{0, D, KV * D};
            one.kv_len = &kv_len[size_t(b)];
            one.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
            one.sinks = sinks.data();
            one.k_group = one.v_group = c.group;
            one.k_scale = k.scale.data() + r0 * KV * g, one.v_scale = v.scale.data() + r0 * KV * g;
            if (c.zeros) one.k_zero = k.zero.data() + r0 * KV * g, one.v_zero = v.zero.data() + r0 * KV * g;
            one.k_scale_strides = one.v_scale_strides = attn_layout{0, g, KV * g};
            std::vector<float> out1(size_t(n * H * D)), lse1(size_t(n * H));
            one.lse = lse1.data();
            const int64_t q0 = q_start[size_t(b)];
            ASSERT_EQ(attn_sdpa(ctx(), &one, q.data() + q0 * H * D, k.codes.data() + r0 * KV * k.row_bytes,
                                v.codes.data() + r0 * KV * v.row_bytes, out1.data()),
                      ATTN_OK)
                << attn_last_error();
            const std::vector<float> rows(out.begin() + q0 * H * D, out.begin() + (q0 + n) * H * D);
            std::vector<float> rows_lse(size_t(n * H));  // packed [row, h]; alone [h, row]
            for (int64_t i = 0; i < n; ++i)
                for (int64_t h = 0; h < H; ++h) rows_lse[size_t(h * n + i)] = lse[size_t((q0 + i) * H + h)];
            EXPECT_TRUE(attn_test::bitwise_equal(rows, out1)) << "sequence " << b;
            EXPECT_TRUE(attn_test::bitwise_equal(rows_lse, lse1)) << "sequence " << b;
        }

        // the same step over a paged cache: pages of 16 keys in a shuffled pool, unused rows
        // never read (their scales NaN), codes [pages, KV, page, D], scales [pages, KV, page, g]
        const int64_t pages = B * stride;
        std::vector<int32_t> ids(static_cast<size_t>(pages)), table(size_t(pages), 0);
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
        auto pool_of = [&](const quantized_rows &x, std::vector<uint8_t> *codes, std::vector<float> *scale,
                           std::vector<float> *zero) {
            codes->assign(size_t(pages * KV * page * x.row_bytes), 0);
            scale->assign(size_t(pages * KV * page * g), NAN);
            zero->assign(x.zero.empty() ? 0 : scale->size(), 0.0f);
            for (int64_t b = 0; b < B; ++b)
                for (int64_t j = 0; j < seqs[size_t(b)].second; ++j) {
                    const int64_t p = ids[size_t(b * stride + j / page)];
                    table[size_t(b * stride + j / page)] = int32_t(p);
                    for (int64_t h = 0; h < KV; ++h) {
                        const int64_t from = (kv_start[size_t(b)] + j) * KV + h, to = (p * KV + h) * page + j % page;
                        std::memcpy(codes->data() + to * x.row_bytes, x.codes.data() + from * x.row_bytes,
                                    size_t(x.row_bytes));
                        for (int64_t e = 0; e < g; ++e) {
                            (*scale)[size_t(to * g + e)] = x.scale[size_t(from * g + e)];
                            if (!x.zero.empty()) (*zero)[size_t(to * g + e)] = x.zero[size_t(from * g + e)];
                        }
                    }
                }
        };
        std::vector<uint8_t> kp, vp;
        std::vector<float> kps, vps, kpz, vpz;
        pool_of(k, &kp, &kps, &kpz);
        pool_of(v, &vp, &vps, &vpz);
        attn_sdpa_desc paged = d;
        paged.k = paged.v = attn_layout{KV * page * D, page * D, D};
        paged.block_table = table.data();
        paged.block_table_stride = stride;
        paged.page_size = page;
        paged.num_pages = pages;
        paged.k_scale = kps.data(), paged.v_scale = vps.data();
        if (c.zeros) paged.k_zero = kpz.data(), paged.v_zero = vpz.data();
        paged.k_scale_strides = paged.v_scale_strides = attn_layout{KV * page * g, page * g, g};
        std::vector<float> out_p(q.size(), NAN), lse_p(lse.size(), NAN);
        paged.lse = lse_p.data();
        ASSERT_EQ(attn_sdpa(ctx(), &paged, q.data(), kp.data(), vp.data(), out_p.data()), ATTN_OK)
            << attn_last_error();
        EXPECT_TRUE(attn_test::bitwise_equal(out_p, out));
        EXPECT_TRUE(attn_test::bitwise_equal(lse_p, lse));
        for (const float x : out_p) ASSERT_FALSE(std::isnan(x));
    }
}

INSTANTIATE_TEST_SUITE_P(all, ragged_quantized_test, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
