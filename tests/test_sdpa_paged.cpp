// Paged K/V (attn_sdpa_desc::block_table): pages of 1, 16 and 256 keys scattered over a pool
// in random order give bitwise the results of the same values stored contiguously, on every
// path (prefill tile loop, bf16 pairs, decode kernel, split keys and merge, grouped heads),
// for f32 and bf16 caches; and a continuous batch of 16 sequences of 100..4000 keys sharing
// one pool, aligned by ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN, matches 16 separate calls bit for bit.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "test_features_util.hpp"

namespace {

// A pool of pages [num_pages, heads, page_size, dim] holding the dense [batch, heads, len,
// dim] rows x, the pages of every batch in a random order, and the block table.
struct paged_pool {
    std::vector<float> pool;
    std::vector<int32_t> table;
    int64_t stride = 0, num_pages = 0;
};

paged_pool page_out(const std::vector<float> &x, int64_t batch, int64_t heads, int64_t len,
                    int64_t dim, int64_t page_size, uint32_t seed, int64_t spare_pages = 3) {
    paged_pool p;
    p.stride = (len + page_size - 1) / page_size;
    p.num_pages = batch * p.stride + spare_pages;
    std::vector<int32_t> ids(size_t(p.num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    p.table.assign(size_t(batch * p.stride), 0);
    for (size_t e = 0; e < p.table.size(); ++e) p.table[e] = ids[e];
    p.pool.assign(size_t(p.num_pages * heads * page_size * dim), NAN);  // unused rows: NaN
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t j = 0; j < len; ++j) {
                const int64_t page = p.table[size_t(b * p.stride + j / page_size)];
                std::memcpy(&p.pool[size_t(((page * heads + h) * page_size + j % page_size) * dim)],
                            &x[size_t(((b * heads + h) * len + j) * dim)], sizeof(float) * size_t(dim));
            }
    return p;
}

void use_pages(attn_sdpa_desc &d, const paged_pool &p, int64_t page_size) {
    const attn_layout pages{d.heads_kv * page_size * d.dim_qk, page_size * d.dim_qk, d.dim_qk};
    d.k = d.v = pages;
    d.block_table = p.table.data();
    d.block_table_stride = p.stride;
    d.page_size = page_size;
    d.num_pages = p.num_pages;
}

struct paged_shape {
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim;
    bool bf16;
};

class paged_test : public attn_test::path_test {};

TEST_P(paged_test, BitwiseEqualToContiguous) {
    const paged_shape shapes[] = {
        {2, 4, 2, 100, 700, 32, false},   // prefill: per-head packing through the pages
        {1, 8, 2, 1, 3000, 64, false},    // decode, split keys, grouped heads as rows
        {2, 4, 4, 1, 600, 32, false},     // decode, no split
        {1, 2, 2, 3, 1500, 16, false},    // a few rows (decode kernel, per-row windows)
        {1, 4, 2, 90, 500, 32, true},     // bf16 cache (bf16 pairs on avx512_bf16)
    };
    for (const paged_shape &sh : shapes)
        for (const int64_t page_size : {int64_t(1), int64_t(16), int64_t(256)}) {
            SCOPED_TRACE(testing::Message() << "Lq " << sh.len_q << " Lk " << sh.len_kv
                                            << " page " << page_size << (sh.bf16 ? " bf16" : ""));
            attn_sdpa_desc d = attn_test::make_desc(sh.batch, sh.heads_q, sh.heads_kv, sh.len_q,
                                                    sh.len_kv, sh.dim, sh.dim);
            d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            d.window_left = sh.len_kv / 3;
            d.softcap = 20.0f;
            const std::vector<float> slopes = attn_test::alibi_geometric(sh.heads_q);
            std::vector<float> sinks(size_t(sh.heads_q), 2.0f);
            d.alibi_slopes = slopes.data();
            d.sinks = sinks.data();
            std::vector<int32_t> kv_len(size_t(sh.batch), int32_t(sh.len_kv));
            kv_len.back() = int32_t(sh.len_kv * 2 / 3);
            d.kv_len = kv_len.data();
            const std::vector<float> q = attn_test::random_tensor(size_t(sh.batch * sh.heads_q * sh.len_q * sh.dim), 41);
            const std::vector<float> k = attn_test::random_tensor(size_t(sh.batch * sh.heads_kv * sh.len_kv * sh.dim), 42);
            const std::vector<float> v = attn_test::random_tensor(size_t(sh.batch * sh.heads_kv * sh.len_kv * sh.dim), 43);
            const size_t out_n = size_t(sh.batch * sh.heads_q * sh.len_q * sh.dim);
            std::vector<float> out_c(out_n), out_p(out_n), lse_c(out_n / size_t(sh.dim)),
                lse_p(out_n / size_t(sh.dim));
            std::vector<float> w_c(out_n / size_t(sh.dim) * size_t(sh.len_kv)), w_p(w_c.size());
            const paged_pool kp = page_out(k, sh.batch, sh.heads_kv, sh.len_kv, sh.dim, page_size, 7);
            const paged_pool vp = page_out(v, sh.batch, sh.heads_kv, sh.len_kv, sh.dim, page_size, 7);
            attn_sdpa_desc paged = d;
            use_pages(paged, kp, page_size);
            d.lse = lse_c.data(), d.weights = w_c.data();
            paged.lse = lse_p.data(), paged.weights = w_p.data();
            if (!sh.bf16) {
                ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out_c.data()), ATTN_OK)
                    << attn_last_error();
                ASSERT_EQ(attn_sdpa_f32(ctx(), &paged, q.data(), kp.pool.data(), vp.pool.data(),
                                        out_p.data()), ATTN_OK)
                    << attn_last_error();
            } else {
                auto bf = [](const std::vector<float> &x) {
                    std::vector<uint16_t> b(x.size());
                    attn_convert(nullptr, int64_t(x.size()), x.data(), ATTN_DTYPE_F32, b.data(),
                                 ATTN_DTYPE_BF16);
                    return b;
                };
                d.q_type = d.kv_type = paged.q_type = paged.kv_type = ATTN_DTYPE_BF16;
                const auto qb = bf(q), kb = bf(k), vb = bf(v), kpb = bf(kp.pool), vpb = bf(vp.pool);
                ASSERT_EQ(attn_sdpa(ctx(), &d, qb.data(), kb.data(), vb.data(), out_c.data()), ATTN_OK);
                ASSERT_EQ(attn_sdpa(ctx(), &paged, qb.data(), kpb.data(), vpb.data(), out_p.data()),
                          ATTN_OK)
                    << attn_last_error();
            }
            EXPECT_TRUE(attn_test::bitwise_equal(out_c, out_p));
            EXPECT_TRUE(attn_test::bitwise_equal(lse_c, lse_p));
            EXPECT_TRUE(attn_test::bitwise_equal(w_c, w_p));
            // and the values are right (not merely equal): against the oracle
            if (!sh.bf16) {
                std::vector<double> want_lse;
                const std::vector<double> want = attn_test::sdpa_features_double(
                    d, attn_test::to_double(q), attn_test::to_double(k), attn_test::to_double(v),
                    &want_lse);
                EXPECT_LT(attn_test::max_rel_error(out_p, want), 3e-5);
                EXPECT_LT(attn_test::max_rel_error(lse_p, want_lse), 3e-5);
            }
        }
}

// 16 sequences of 100..4000 keys in one pool of 16-key pages (random order), queries at the
// end of each sequence (ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN with kv_len), len_q = the most new
// tokens of any sequence; each sequence's rows equal a separate call on its own contiguous
// keys (ATTN_CAUSAL_BOTTOM_RIGHT, len_kv = its length), bit for bit.
TEST_P(paged_test, ContinuousBatchMatchesSeparateCalls) {
    // 64 heads: enough tiles that neither the batch nor a single sequence splits its keys
    const int64_t B = 16, H = 64, D = 8, page = 16, Lmax = 4000;
    std::vector<int32_t> lens(static_cast<size_t>(B));
    std::vector<int64_t> first_page(static_cast<size_t>(B));
    int64_t pages = 0;
    for (int64_t b = 0; b < B; ++b) {
        lens[size_t(b)] = int32_t(100 + b * (Lmax - 100) / (B - 1));
        first_page[size_t(b)] = pages;
        pages += (lens[size_t(b)] + page - 1) / page;
    }
    // each sequence's own contiguous K, V [H, L, D], and the shared pool of pages in random order
    std::vector<std::vector<float>> k(static_cast<size_t>(B)), v(static_cast<size_t>(B));
    const int64_t stride = Lmax / page;
    std::vector<int32_t> ids(static_cast<size_t>(pages)), table(static_cast<size_t>(B * stride), -1);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
    std::vector<float> k_pool(size_t(pages * H * page * D), NAN), v_pool(k_pool.size(), NAN);
    for (int64_t b = 0; b < B; ++b) {
        const int64_t L = lens[size_t(b)];
        k[size_t(b)] = attn_test::random_tensor(size_t(H * L * D), uint32_t(60 + b));
        v[size_t(b)] = attn_test::random_tensor(size_t(H * L * D), uint32_t(80 + b));
        for (int64_t e = 0; e < (L + page - 1) / page; ++e)
            table[size_t(b * stride + e)] = ids[size_t(first_page[size_t(b)] + e)];
        for (int64_t h = 0; h < H; ++h)
            for (int64_t j = 0; j < L; ++j) {
                const int64_t at = ((table[size_t(b * stride + j / page)] * H + h) * page + j % page) * D;
                std::memcpy(&k_pool[size_t(at)], &k[size_t(b)][size_t((h * L + j) * D)], sizeof(float) * D);
                std::memcpy(&v_pool[size_t(at)], &v[size_t(b)][size_t((h * L + j) * D)], sizeof(float) * D);
            }
    }
    for (const int64_t Lq : {int64_t(1), int64_t(3), int64_t(8)}) {
        SCOPED_TRACE(testing::Message() << "Lq " << Lq);
        const std::vector<float> q = attn_test::random_tensor(size_t(B * H * Lq * D), 53);
        attn_sdpa_desc d = attn_test::make_desc(B, H, H, Lq, Lmax, D, D);
        d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
        d.kv_len = lens.data();
        d.window_left = 700;
        d.k = d.v = attn_layout{H * page * D, page * D, D};
        d.block_table = table.data();
        d.block_table_stride = stride;
        d.page_size = page;
        d.num_pages = pages;
        std::vector<float> out(size_t(B * H * Lq * D)), lse(size_t(B * H * Lq));
        d.lse = lse.data();
        ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k_pool.data(), v_pool.data(), out.data()),
                  ATTN_OK)
            << attn_last_error();
        for (int64_t b = 0; b < B; ++b) {
            const int64_t L = lens[size_t(b)];
            attn_sdpa_desc one = attn_test::make_desc(1, H, H, Lq, L, D, D);
            one.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            one.window_left = 700;
            std::vector<float> out1(size_t(H * Lq * D)), lse1(size_t(H * Lq));
            one.lse = lse1.data();
            ASSERT_EQ(attn_sdpa_f32(ctx(), &one, &q[size_t(b * H * Lq * D)], k[size_t(b)].data(),
                                    v[size_t(b)].data(), out1.data()), ATTN_OK);
            EXPECT_EQ(std::memcmp(out1.data(), &out[size_t(b * H * Lq * D)], sizeof(float) * out1.size()), 0)
                << "sequence " << b << " (" << L << " keys)";
            EXPECT_EQ(std::memcmp(lse1.data(), &lse[size_t(b * H * Lq)], sizeof(float) * lse1.size()), 0)
                << "sequence " << b;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, paged_test, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
