// A serving step over a paged cache in one call (q_start + kv_len + block_table,
// ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN): prefill chunks and decoding tokens of sequences whose
// keys live in 16-key pages scattered over one pool give bitwise the rows and lse of the same
// keys stored contiguously and packed by kv_start, on every path, f32 and bf16, with GQA,
// sinks and a window.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "test_util.hpp"

namespace {

class ragged_paged_test : public attn_test::path_test {};

TEST_P(ragged_paged_test, PagedStepEqualsPackedContiguous) {
    // (queries, cached keys): a prefill chunk, long and short decodes, an idle sequence
    const std::vector<std::pair<int32_t, int32_t>> seqs = {{4, 40}, {1, 700}, {1, 35}, {0, 10},
                                                           {9, 300}};
    const int64_t H = 8, KV = 2, D = 32, page = 16, stride = 44;  // 44 >= ceil(700 / 16)
    std::vector<int32_t> q_start = {0}, kv_start = {0}, kv_len;
    for (auto [n, ctx] : seqs) {
        q_start.push_back(q_start.back() + n);
        kv_start.push_back(kv_start.back() + ctx);
        kv_len.push_back(ctx);
    }
    const std::vector<float> q = attn_test::random_tensor(size_t(q_start.back() * H * D), 81);
    const std::vector<float> k = attn_test::random_tensor(size_t(kv_start.back() * KV * D), 82);
    const std::vector<float> v = attn_test::random_tensor(size_t(kv_start.back() * KV * D), 83);
    // the pool: the pages of every sequence in a random order, unused rows NaN
    const int64_t pages = int64_t(seqs.size()) * stride;
    std::vector<int32_t> ids(static_cast<size_t>(pages)), table(size_t(pages), 0);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
    std::vector<float> k_pool(size_t(pages * KV * page * D), NAN), v_pool(k_pool.size(), NAN);
    for (size_t b = 0; b < seqs.size(); ++b)
        for (int64_t j = 0; j < seqs[b].second; ++j) {
            const int64_t p = ids[b * stride + size_t(j / page)];
            table[b * stride + size_t(j / page)] = int32_t(p);
            for (int64_t h = 0; h < KV; ++h) {
                const size_t from = size_t(((kv_start[b] + j) * KV + h) * D);
                const size_t to = size_t(((p * KV + h) * page + j % page) * D);
                std::memcpy(&k_pool[to], &k[from], sizeof(float) * size_t(D));
                std::memcpy(&v_pool[to], &v[from], sizeof(float) * size_t(D));
            }
        }
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, int64_t(seqs.size()), H, 9, 700, D);
    d.heads_kv = KV;
    d.q = d.out = attn_layout{0, D, H * D};
    d.q_start = q_start.data();
    d.kv_len = kv_len.data();
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    d.window_left = 200;
    const std::vector<float> sinks(size_t(H), 0.5f);
    d.sinks = sinks.data();
    attn_sdpa_desc paged = d, packed = d;
    paged.k = paged.v = attn_layout{KV * page * D, page * D, D};
    paged.block_table = table.data();
    paged.block_table_stride = stride;
    paged.page_size = page;
    paged.num_pages = pages;
    packed.k = packed.v = attn_layout{0, D, KV * D};
    packed.kv_start = kv_start.data();
    for (const bool bf16 : {false, true}) {
        SCOPED_TRACE(bf16 ? "bf16" : "f32");
        auto typed = [&](const std::vector<float> &x) {
            std::vector<uint16_t> b(x.size());
            attn_convert(nullptr, int64_t(x.size()), x.data(), ATTN_DTYPE_F32, b.data(), ATTN_DTYPE_BF16);
            return b;
        };
        const auto qb = typed(q), kb = typed(k), vb = typed(v), kpb = typed(k_pool), vpb = typed(v_pool);
        std::vector<float> out_p(q.size()), out_c(q.size()), lse_p(q.size() / D), lse_c(lse_p.size());
        paged.lse = lse_p.data(), packed.lse = lse_c.data();
        paged.q_type = paged.kv_type = packed.q_type = packed.kv_type =
            bf16 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        ASSERT_EQ(attn_sdpa(ctx(), &paged, bf16 ? (const void *)qb.data() : q.data(),
                            bf16 ? (const void *)kpb.data() : k_pool.data(),
                            bf16 ? (const void *)vpb.data() : v_pool.data(), out_p.data()),
                  ATTN_OK)
            << attn_last_error();
        ASSERT_EQ(attn_sdpa(ctx(), &packed, bf16 ? (const void *)qb.data() : q.data(),
                            bf16 ? (const void *)kb.data() : k.data(),
                            bf16 ? (const void *)vb.data() : v.data(), out_c.data()),
                  ATTN_OK)
            << attn_last_error();
        EXPECT_TRUE(attn_test::bitwise_equal(out_p, out_c));
        EXPECT_TRUE(attn_test::bitwise_equal(lse_p, lse_c));
        for (const float x : out_p) ASSERT_FALSE(std::isnan(x));  // no unused pool row read
    }
}

INSTANTIATE_TEST_SUITE_P(all, ragged_paged_test, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
