// Values of attn_sdpa_f32 on every path: against an independent double-precision forward
// (tests/test_util.hpp) over causal, mask, kv_len, GQA and dropout; and properties: causal
// rows ignore the future, GQA equals repeated heads, BSHD equals BHSD, a KV cache's unused
// capacity is never read, mask broadcasting, kv_len equals truncation, dropout statistics.
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::path_test;
using attn_test::make_desc;
using attn_test::random_tensor;
const float inf = std::numeric_limits<float>::infinity();

size_t q_size(const attn_sdpa_desc &d) { return size_t(d.batch * d.heads_q * d.len_q * d.dim_qk); }
size_t k_size(const attn_sdpa_desc &d) {
    return size_t(d.batch * d.heads_kv * d.len_kv * d.dim_qk);
}
size_t v_size(const attn_sdpa_desc &d) { return size_t(d.batch * d.heads_kv * d.len_kv * d.dim_v); }
size_t out_size(const attn_sdpa_desc &d) { return size_t(d.batch * d.heads_q * d.len_q * d.dim_v); }

struct qkv {
    std::vector<float> q, k, v;
};
qkv random_qkv(const attn_sdpa_desc &d, uint32_t seed) {
    return {random_tensor(q_size(d), seed), random_tensor(k_size(d), seed + 1),
            random_tensor(v_size(d), seed + 2)};
}

class SdpaValues : public path_test {
  protected:
    std::vector<float> run(const attn_sdpa_desc &d, const float *q, const float *k, const float *v,
                           size_t out_elems = 0) {
        std::vector<float> out(out_elems ? out_elems : out_size(d), NAN);
        EXPECT_EQ(attn_sdpa_f32(ctx(), &d, q, k, v, out.data()), ATTN_OK) << attn_last_error();
        return out;
    }
    std::vector<float> run(const attn_sdpa_desc &d, const qkv &t) {
        return run(d, t.q.data(), t.k.data(), t.v.data());
    }
};

// One configuration of the double-oracle comparison.
struct oracle_case {
    const char *name;
    attn_sdpa_desc d;
    std::vector<float> mask;      // dense [B, Hq, Lq, Lkv] when non-empty
    std::vector<int32_t> kv_len;  // [B] when non-empty
};

std::vector<oracle_case> oracle_cases() {
    std::vector<oracle_case> cases;
    auto add = [&](const char *name, attn_sdpa_desc d) { cases.push_back({name, d, {}, {}}); };
    add("plain", make_desc(2, 3, 3, 5, 7, 4, 3));
    add("scale_one", make_desc(1, 2, 2, 4, 6, 8, 8));
    cases.back().d.scale = 1.0f;
    add("causal_top_left", make_desc(2, 2, 2, 6, 6, 5, 4));
    cases.back().d.causal = ATTN_CAUSAL_TOP_LEFT;
    add("causal_top_left_long_keys", make_desc(1, 2, 2, 4, 9, 5, 4));
    cases.back().d.causal = ATTN_CAUSAL_TOP_LEFT;
    add("causal_bottom_right", make_desc(1, 2, 2, 4, 9, 5, 4));
    cases.back().d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    add("causal_bottom_right_more_queries", make_desc(1, 2, 2, 6, 4, 3, 3));  // rows 0,1 empty
    cases.back().d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    add("gqa", make_desc(2, 6, 2, 3, 5, 4, 6));
    add("gqa_causal_dropout", make_desc(1, 4, 1, 7, 7, 8, 8));
    cases.back().d.causal = ATTN_CAUSAL_TOP_LEFT;
    cases.back().d.dropout_p = 0.3f;
    cases.back().d.dropout_seed = 77;
    add("dropout", make_desc(2, 2, 2, 5, 11, 4, 4));
    cases.back().d.dropout_p = 0.5f;
    cases.back().d.dropout_seed = 1234567;
    add("tiles", make_desc(1, 2, 1, 37, 70, 40, 24));
    cases.back().d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    // Shapes past any query tile (tens of rows), key tile (64-256 keys) and the length at which
    // a long key range may be split into chunks and merged (hundreds of keys).
    add("long_keys_causal_dropout", make_desc(1, 2, 1, 50, 600, 20, 12));
    cases.back().d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    cases.back().d.dropout_p = 0.1f;
    cases.back().d.dropout_seed = 31337;
    add("decode_gqa_kv_len", make_desc(2, 8, 2, 1, 1030, 16, 16));
    cases.back().kv_len = {1030, 701};
    {
        add("long_keys_mask", make_desc(1, 2, 2, 5, 530, 8, 8));
        oracle_case &c = cases.back();
        c.mask = random_tensor(2 * 5 * 530, 56, -3.0f, 1.0f);
        for (size_t x = 0; x < c.mask.size(); x += 7) c.mask[x] = -inf;
        c.d.mask_strides = {2 * 5 * 530, 5 * 530, 530};
    }
    {
        add("mask", make_desc(2, 2, 2, 4, 6, 4, 4));
        oracle_case &c = cases.back();
        c.mask = random_tensor(2 * 2 * 4 * 6, 55, -2.0f, 2.0f);
        c.mask[5] = c.mask[7] = -inf;
        for (int j = 0; j < 6; ++j) c.mask[6 * 6 + j] = -inf;  // one fully masked row
        c.d.mask_strides = {2 * 4 * 6, 4 * 6, 6};
    }
    {
        add("kv_len", make_desc(3, 2, 1, 4, 8, 4, 5));
        cases.back().kv_len = {8, 3, 0};  // batch 2 has no keys at all
    }
    return cases;
}

// out, lse and weights against the double oracle; weights rows sum to 1 (or are all 0).
TEST_P(SdpaValues, MatchesDoubleOracle) {
    for (oracle_case &c : oracle_cases()) {
        attn_sdpa_desc d = c.d;
        if (!c.mask.empty()) d.mask = c.mask.data();
        if (!c.kv_len.empty()) d.kv_len = c.kv_len.data();
        const qkv t = random_qkv(d, 100);
        const size_t rows = size_t(d.batch * d.heads_q * d.len_q);
        std::vector<float> weights(rows * d.len_kv, NAN), lse(rows, NAN);
        d.weights = weights.data();
        d.lse = lse.data();
        const auto out = run(d, t);

        std::vector<double> want_lse;
        const auto want =
            attn_test::sdpa_double(d, attn_test::to_double(t.q), attn_test::to_double(t.k),
                                   attn_test::to_double(t.v), &want_lse);
        EXPECT_LE(attn_test::max_rel_error(out, want), 2e-6) << c.name;
        EXPECT_LE(attn_test::max_rel_error(lse, want_lse), 2e-6) << c.name;
        for (size_t r = 0; r < rows; ++r) {
            double sum = 0.0;
            for (int64_t j = 0; j < d.len_kv; ++j) {
                EXPECT_GE(weights[r * d.len_kv + j], 0.0f) << c.name;
                sum += weights[r * d.len_kv + j];
            }
            EXPECT_NEAR(sum, std::isinf(want_lse[r]) ? 0.0 : 1.0, 1e-5) << c.name << " row " << r;
        }
    }
}

// Keys of length 1: the only weight is 1, so out = v and lse = scale * q.k.
TEST_P(SdpaValues, SingleKeyCopiesItsValue) {
    attn_sdpa_desc d = make_desc(1, 1, 1, 3, 1, 4, 5);
    const qkv t = random_qkv(d, 7);
    std::vector<float> lse(3);
    d.lse = lse.data();
    const auto out = run(d, t);
    for (int i = 0; i < 3; ++i) {
        for (int c = 0; c < 5; ++c) EXPECT_FLOAT_EQ(out[i * 5 + c], t.v[c]);
        double dot = 0.0;
        for (int c = 0; c < 4; ++c) dot += double(t.q[i * 4 + c]) * t.k[c];
        EXPECT_NEAR(lse[i], 0.5 * dot, 1e-6);
    }
}

// q = 0 makes every visible key equally weighted: out row i of causal attention is the
// mean of v_0..v_i.
TEST_P(SdpaValues, ZeroQueryAveragesVisibleValues) {
    attn_sdpa_desc d = make_desc(1, 1, 1, 5, 5, 3, 2);
    d.causal = ATTN_CAUSAL_TOP_LEFT;
    std::vector<float> q(q_size(d), 0.0f), k = random_tensor(k_size(d), 3);
    const std::vector<float> v = {1, 10, 2, 20, 3, 30, 4, 40, 5, 50};
    const auto out = run(d, q.data(), k.data(), v.data());
    for (int i = 0; i < 5; ++i) {
        EXPECT_NEAR(out[i * 2], (i + 2) / 2.0, 1e-5) << i;  // mean of 1..i+1
        EXPECT_NEAR(out[i * 2 + 1], 10.0 * (i + 2) / 2.0, 1e-4) << i;
    }
}

// Causal rows ignore the future: changing keys and values a row cannot see leaves that row
// bitwise unchanged, while rows that see them do change.
TEST_P(SdpaValues, CausalRowsIgnoreTheFuture) {
    struct blind_case {
        attn_causal causal;
        int64_t len_q, len_kv, first_changed, rows_blind;
    };
    // TOP_LEFT: row i sees j <= i. BOTTOM_RIGHT 4 x 7: row i sees j <= i + 3.
    for (auto [causal, lq, lk, first_changed, rows_blind] :
         {blind_case{ATTN_CAUSAL_TOP_LEFT, 8, 8, 5, 5},
          blind_case{ATTN_CAUSAL_BOTTOM_RIGHT, 4, 7, 5, 2}}) {
        attn_sdpa_desc d = make_desc(2, 2, 2, lq, lk, 6, 5);
        d.causal = causal;
        const qkv t = random_qkv(d, 21);
        qkv changed = t;
        for (int64_t bh = 0; bh < 4; ++bh)
            for (int64_t j = first_changed; j < lk; ++j) {
                for (int64_t c = 0; c < 6; ++c) changed.k[(bh * lk + j) * 6 + c] += 0.75f;
                for (int64_t c = 0; c < 5; ++c) changed.v[(bh * lk + j) * 5 + c] -= 3.0f;
            }
        const auto before = run(d, t), after = run(d, changed);
        for (int64_t bh = 0; bh < 4; ++bh)
            for (int64_t i = 0; i < lq; ++i) {
                bool same = true;
                for (int64_t c = 0; c < 5; ++c)
                    same = same && before[(bh * lq + i) * 5 + c] == after[(bh * lq + i) * 5 + c];
                EXPECT_EQ(same, i < rows_blind) << "causal " << causal << " row " << i;
            }
    }
}

// Grouped-query attention equals ordinary attention with each K/V head repeated for its
// group of query heads.
TEST_P(SdpaValues, GqaEqualsRepeatedHeads) {
    const int64_t B = 2, Hq = 6, Hkv = 2, L = 9, D = 8, group = Hq / Hkv;
    attn_sdpa_desc gqa = make_desc(B, Hq, Hkv, L, L, D, D);
    gqa.causal = ATTN_CAUSAL_TOP_LEFT;
    const qkv t = random_qkv(gqa, 31);
    attn_sdpa_desc full = make_desc(B, Hq, Hq, L, L, D, D);
    full.causal = ATTN_CAUSAL_TOP_LEFT;
    std::vector<float> k_rep(q_size(full)), v_rep(q_size(full));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t x = 0; x < L * D; ++x) {
                k_rep[(b * Hq + h) * L * D + x] = t.k[(b * Hkv + h / group) * L * D + x];
                v_rep[(b * Hq + h) * L * D + x] = t.v[(b * Hkv + h / group) * L * D + x];
            }
    const auto got = run(gqa, t), want = run(full, t.q.data(), k_rep.data(), v_rep.data());
    EXPECT_LE(attn_test::max_rel_error(got.data(), want.data(), got.size()), 1e-6);
}

// [batch, seq, heads, dim] tensors through strides give the same attention as BHSD.
TEST_P(SdpaValues, BshdEqualsBhsd) {
    const int64_t B = 2, H = 3, Lq = 5, Lk = 7, D = 4;
    attn_sdpa_desc bhsd = make_desc(B, H, H, Lq, Lk, D, D);
    bhsd.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    const qkv t = random_qkv(bhsd, 41);
    auto to_bshd = [&](const std::vector<float> &x, int64_t len) {
        std::vector<float> y(x.size());
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t s = 0; s < len; ++s)
                    for (int64_t c = 0; c < D; ++c)
                        y[((b * len + s) * H + h) * D + c] = x[((b * H + h) * len + s) * D + c];
        return y;
    };
    attn_sdpa_desc bshd = bhsd;
    bshd.q = bshd.out = {Lq * H * D, D, H * D};
    bshd.k = bshd.v = {Lk * H * D, D, H * D};
    const auto q = to_bshd(t.q, Lq), k = to_bshd(t.k, Lk), v = to_bshd(t.v, Lk);
    const auto got = run(bshd, q.data(), k.data(), v.data());
    const auto want = to_bshd(run(bhsd, t), Lq);
    EXPECT_LE(attn_test::max_rel_error(got.data(), want.data(), got.size()), 1e-6);
}

// K and V inside a KV cache (seq stride = capacity, len_kv = filled length): the unused
// capacity, filled with NaN here, is never read.
TEST_P(SdpaValues, KvCacheCapacityIsNotRead) {
    const int64_t B = 2, H = 2, Lq = 3, Lk = 10, cap = 16, D = 8;
    attn_sdpa_desc dense = make_desc(B, H, H, Lq, Lk, D, D);
    const qkv t = random_qkv(dense, 51);
    std::vector<float> k_cache(B * H * cap * D, NAN), v_cache(B * H * cap * D, NAN);
    for (int64_t bh = 0; bh < B * H; ++bh)
        for (int64_t x = 0; x < Lk * D; ++x) {
            k_cache[bh * cap * D + x] = t.k[bh * Lk * D + x];
            v_cache[bh * cap * D + x] = t.v[bh * Lk * D + x];
        }
    attn_sdpa_desc cached = dense;
    cached.k = cached.v = {H * cap * D, cap * D, D};
    const auto got = run(cached, t.q.data(), k_cache.data(), v_cache.data());
    const auto want = run(dense, t);
    EXPECT_LE(attn_test::max_rel_error(got.data(), want.data(), got.size()), 1e-6);
}

// A mask with zero strides broadcasts: [Lq, Lkv] shared by all batches and heads, and a
// per-batch key mask [B, Lkv], each equal to the materialised [B, H, Lq, Lkv] mask.
TEST_P(SdpaValues, MaskBroadcastEqualsMaterialisedMask) {
    const int64_t B = 2, H = 3, Lq = 4, Lk = 6, D = 4;
    attn_sdpa_desc d = make_desc(B, H, H, Lq, Lk, D, D);
    const qkv t = random_qkv(d, 61);
    auto materialise = [&](const std::vector<float> &m, attn_layout s) {
        std::vector<float> full(B * H * Lq * Lk);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < Lq; ++i)
                    for (int64_t j = 0; j < Lk; ++j)
                        full[((b * H + h) * Lq + i) * Lk + j] =
                            m[b * s.batch + h * s.head + i * s.seq + j];
        return full;
    };
    std::vector<float> per_query = random_tensor(Lq * Lk, 62, -1.5f, 1.5f);
    per_query[3] = -inf;
    std::vector<float> per_batch_keys = {0, 0, 0, -inf, -inf, -inf, 0, -1, 0, -2, 0, 0};
    for (auto [mask, strides] : {std::pair{per_query, attn_layout{0, 0, Lk}},
                                 std::pair{per_batch_keys, attn_layout{Lk, 0, 0}}}) {
        const auto full = materialise(mask, strides);
        attn_sdpa_desc broadcast = d, materialised = d;
        broadcast.mask = mask.data();
        broadcast.mask_strides = strides;
        materialised.mask = full.data();
        materialised.mask_strides = {H * Lq * Lk, Lq * Lk, Lk};
        const auto got = run(broadcast, t), want = run(materialised, t);
        EXPECT_LE(attn_test::max_rel_error(got.data(), want.data(), got.size()), 1e-6);
    }
}

// An additive -inf mask above the diagonal is TOP_LEFT causal masking.
TEST_P(SdpaValues, NegativeInfinityMaskEqualsCausal) {
    const int64_t L = 7;
    attn_sdpa_desc d = make_desc(1, 2, 2, L, L, 5, 5);
    const qkv t = random_qkv(d, 71);
    std::vector<float> mask(L * L, 0.0f);
    for (int64_t i = 0; i < L; ++i)
        for (int64_t j = i + 1; j < L; ++j) mask[i * L + j] = -inf;
    attn_sdpa_desc masked = d, causal = d;
    masked.mask = mask.data();
    masked.mask_strides = {0, 0, L};
    causal.causal = ATTN_CAUSAL_TOP_LEFT;
    const auto got = run(masked, t), want = run(causal, t);
    EXPECT_LE(attn_test::max_rel_error(got.data(), want.data(), got.size()), 1e-6);
}

// kv_len[b] keys equals attention over a truncated key set; kv_len 0 gives zeros and -inf.
TEST_P(SdpaValues, KvLenEqualsTruncatedKeys) {
    const int64_t B = 3, H = 2, Lq = 4, Lk = 9, D = 4;
    attn_sdpa_desc d = make_desc(B, H, H, Lq, Lk, D, D);
    const std::vector<int32_t> kv_len = {4, 9, 0};
    d.kv_len = kv_len.data();
    const qkv t = random_qkv(d, 81);
    std::vector<float> lse(B * H * Lq);
    d.lse = lse.data();
    const auto got = run(d, t);
    for (int64_t b = 0; b < 2; ++b) {
        attn_sdpa_desc one = make_desc(1, H, H, Lq, kv_len[b], D, D);
        one.k = one.v = d.k;  // keep the full tensors' strides, read only kv_len[b] keys
        const int64_t q_off = b * d.q.batch, kv_off = b * d.k.batch;
        const auto want = run(one, t.q.data() + q_off, t.k.data() + kv_off, t.v.data() + kv_off);
        EXPECT_LE(attn_test::max_rel_error(got.data() + b * H * Lq * D, want.data(), want.size()),
                  1e-6)
            << "batch " << b;
    }
    for (int64_t x = 2 * H * Lq * D; x < B * H * Lq * D; ++x) ASSERT_EQ(got[x], 0.0f);
    for (int64_t r = 2 * H * Lq; r < B * H * Lq; ++r) EXPECT_EQ(lse[r], -inf);
}

// A fully masked row: zeros (never NaN), weights zeros, lse -inf; other rows are normal.
TEST_P(SdpaValues, FullyMaskedRowIsZero) {
    const int64_t L = 4, D = 3;
    attn_sdpa_desc d = make_desc(1, 1, 1, L, L, D, D);
    const qkv t = random_qkv(d, 91);
    std::vector<float> mask(L * L, 0.0f), weights(L * L, NAN), lse(L, NAN);
    for (int64_t j = 0; j < L; ++j) mask[2 * L + j] = -inf;
    d.mask = mask.data();
    d.mask_strides = {0, 0, L};
    d.weights = weights.data();
    d.lse = lse.data();
    const auto out = run(d, t);
    for (int64_t c = 0; c < D; ++c) EXPECT_EQ(out[2 * D + c], 0.0f);
    for (int64_t j = 0; j < L; ++j) EXPECT_EQ(weights[2 * L + j], 0.0f);
    EXPECT_EQ(lse[2], -inf);
    for (int64_t i : {0, 1, 3}) EXPECT_TRUE(std::isfinite(lse[i]));
}

// With V = identity (dim_v = len_kv) the output row is the dropped-out weights row itself,
// out[i,j] = A[i,j] z[i,j], so the keep/drop decisions can be read off exactly.
class SdpaDropout : public SdpaValues {
  protected:
    static constexpr int64_t B = 1, H = 2, Lq = 64, Lk = 256;
    void run_identity(float p, uint64_t seed) {
        d = make_desc(B, H, H, Lq, Lk, 16, Lk);
        d.dropout_p = p;
        d.dropout_seed = seed;
        q = random_tensor(q_size(d), 5);
        k = random_tensor(k_size(d), 6);
        v.assign(v_size(d), 0.0f);
        for (int64_t h = 0; h < H; ++h)
            for (int64_t j = 0; j < Lk; ++j) v[(h * Lk + j) * Lk + j] = 1.0f;
        weights.assign(B * H * Lq * Lk, NAN);
        d.weights = weights.data();
        out = run(d, q.data(), k.data(), v.data());
    }
    attn_sdpa_desc d;
    std::vector<float> q, k, v, weights, out;
};

// The kept fraction is within 4 sigma of 1 - p; each decision is the generator's
// (src/ref/dropout.hpp) for (seed, b, h, i, j); kept weights are scaled by 1/(1-p).
TEST_P(SdpaDropout, KeptFractionAndDecisionsFollowTheGenerator) {
    const float p = 0.3f;
    run_identity(p, 2024);
    const uint32_t thresh = attn::dropout::threshold(p);
    int64_t kept = 0, mismatched = 0;
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Lq; ++i) {
            const uint32_t key = attn::dropout::row_key(2024, 0, h, i);
            for (int64_t j = 0; j < Lk; ++j) {
                const int64_t x = (h * Lq + i) * Lk + j;
                const bool is_dropped = attn::dropout::dropped(key, j, thresh);
                if (is_dropped != (out[x] == 0.0f)) ++mismatched;
                if (!is_dropped) {
                    ++kept;
                    EXPECT_NEAR(out[x], weights[x] / (1.0f - p), 1e-6f * (1 + out[x]));
                }
            }
        }
    EXPECT_EQ(mismatched, 0);
    const double n = double(H * Lq * Lk), sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(double(kept) / n, 1.0 - p, 4 * sigma);
}

// p = 0 is no dropout, bitwise, whatever the seed; the weights are always pre-dropout.
TEST_P(SdpaDropout, ZeroProbabilityEqualsNoDropout) {
    run_identity(0.0f, 99);
    const auto out_p0 = out, weights_p0 = weights;
    run_identity(0.0f, 0);
    EXPECT_EQ(out, out_p0);
    run_identity(0.4f, 99);
    EXPECT_EQ(weights, weights_p0);
    EXPECT_NE(out, out_p0);
}

// The same seed gives the same result bitwise; a different seed drops different weights.
TEST_P(SdpaDropout, SeedDeterminesTheResult) {
    run_identity(0.2f, 5);
    const auto first = out;
    run_identity(0.2f, 5);
    EXPECT_EQ(out, first);
    run_identity(0.2f, 6);
    int64_t differing = 0;
    for (size_t x = 0; x < out.size(); ++x) differing += (out[x] == 0.0f) != (first[x] == 0.0f);
    // Two independent masks with p = 0.2 disagree on 2 p (1 - p) = 32% of the weights.
    EXPECT_GT(differing, int64_t(out.size() / 5));
}

INSTANTIATE_TEST_SUITE_P(Paths, SdpaValues, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);
INSTANTIATE_TEST_SUITE_P(Paths, SdpaDropout, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
