// Packed sequences of their own lengths in one call (attn_sdpa_desc::q_start, kv_start):
//   - against a float64 oracle written here from the header's sentences (each sequence's
//     counts n_b, K_b, its alignment, lse packed [total_q, heads_q]), on every path, with
//     sequences of no queries and of no keys, GQA, windows, softcap, ALiBi, sinks, mask,
//     dropout;
//   - batch invariance: every sequence of a mixed batch (packed, and dense with padding) is
//     bitwise the same sequence computed alone, at several batch positions, for 1..4 threads
//     and on every ISA level, including long decoding contexts (split keys) and bf16 pairs;
//   - the backward: packed gradients equal to each sequence's own backward, dk / dv rows of
//     keys no query sees are zeros;
//   - the plan: every visible key of every row covered by exactly one task, tasks in bounds.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "ops/sdpa_plan.hpp"
#include "core/seq_rows.hpp"
#include "fake_impls.hpp"
#include "test_features_util.hpp"

namespace {

using attn_test::random_tensor;

// One sequence of a batch: queries, keys (K_b) and kv_len (-1: none).
struct seq_shape {
    int32_t queries, keys, kv_len;
};

// A packed batch: rows [total, heads, dim] (BSHD, no batch stride) of q, k, v, out.
struct packed_batch {
    std::vector<int32_t> q_start, kv_start, kv_len;
    std::vector<float> q, k, v;
    int64_t heads_q, heads_kv, dim;
};

packed_batch make_batch(const std::vector<seq_shape> &seqs, int64_t heads_q, int64_t heads_kv,
                        int64_t dim, uint32_t seed) {
    packed_batch p;
    p.heads_q = heads_q, p.heads_kv = heads_kv, p.dim = dim;
    p.q_start = {0};
    p.kv_start = {0};
    for (const seq_shape &s : seqs) {
        p.q_start.push_back(p.q_start.back() + s.queries);
        p.kv_start.push_back(p.kv_start.back() + s.keys);
        p.kv_len.push_back(s.kv_len >= 0 ? s.kv_len : s.keys);
    }
    p.q = random_tensor(size_t(std::max(p.q_start.back(), 1) * heads_q * dim), seed);
    p.k = random_tensor(size_t(std::max(p.kv_start.back(), 1) * heads_kv * dim), seed + 1);
    p.v = random_tensor(size_t(std::max(p.kv_start.back(), 1) * heads_kv * dim), seed + 2);
    return p;
}

// The packed desc: len_q / len_kv the largest counts, BSHD rows.
attn_sdpa_desc packed_desc(const packed_batch &p) {
    attn_sdpa_desc d;
    int64_t len_q = 1, len_kv = 1;
    for (size_t b = 0; b + 1 < p.q_start.size(); ++b) {
        len_q = std::max<int64_t>(len_q, p.q_start[b + 1] - p.q_start[b]);
        len_kv = std::max<int64_t>(len_kv, p.kv_start[b + 1] - p.kv_start[b]);
    }
    attn_sdpa_desc_init(&d, int64_t(p.q_start.size()) - 1, p.heads_q, len_q, len_kv, p.dim);
    d.heads_kv = p.heads_kv;
    d.q = d.out = attn_layout{0, p.dim, p.heads_q * p.dim};
    d.k = d.v = attn_layout{0, p.dim, p.heads_kv * p.dim};
    d.q_start = p.q_start.data();
    d.kv_start = p.kv_start.data();
    return d;
}

// The float64 oracle of a packed call: rows and lse in the packed layouts.
void oracle(const attn_sdpa_desc &d, const packed_batch &p, std::vector<double> &out,
            std::vector<double> &lse) {
    const int64_t Hq = d.heads_q, group = Hq / d.heads_kv, D = d.dim_qk;
    out.assign(size_t(d.q_start[d.batch] * Hq * D), 0.0);
    lse.assign(size_t(d.q_start[d.batch] * Hq), -INFINITY);
    for (int64_t b = 0; b < d.batch; ++b) {
        const int64_t n = d.q_start[b + 1] - d.q_start[b], K = d.kv_start[b + 1] - d.kv_start[b];
        const int64_t keys = d.kv_len ? std::min<int64_t>(K, d.kv_len[b]) : K;
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < n; ++i) {
                const int64_t r = d.q_start[b] + i, hk = h / group;
                int64_t at = i + K - n;  // i' on the sequence's own key axis
                if (d.causal == ATTN_CAUSAL_TOP_LEFT) at = i;
                if (d.causal == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN) at = i + d.kv_len[b] - n;
                std::vector<double> s(size_t(K), -INFINITY);
                const double sink = d.sinks ? d.sinks[h] : -INFINITY;
                double m = sink;
                for (int64_t j = 0; j < keys; ++j) {
                    if (d.causal != ATTN_CAUSAL_NONE && j > at) continue;
                    if (d.window_left >= 0 && j < at - d.window_left) continue;
                    if (d.window_right >= 0 && j > at + d.window_right) continue;
                    double dot = 0.0;
                    for (int64_t c = 0; c < D; ++c)
                        dot += double(p.q[size_t((r * Hq + h) * D + c)]) *
                               p.k[size_t(((d.kv_start[b] + j) * d.heads_kv + hk) * D + c)];
                    double x = double(d.scale) * dot;
                    if (d.softcap > 0.0f) x = double(d.softcap) * std::tanh(x / double(d.softcap));
                    if (d.mask)
                        x += d.mask[b * d.mask_strides.batch + h * d.mask_strides.head +
                                    i * d.mask_strides.seq + j];
                    if (d.alibi_slopes) x -= double(d.alibi_slopes[h]) * std::fabs(double(at - j));
                    s[size_t(j)] = x;
                    m = std::max(m, x);
                }
                if (m == -INFINITY) continue;  // no key and no sink: zeros, lse -inf
                double sum = sink == -INFINITY ? 0.0 : std::exp(sink - m);
                for (int64_t j = 0; j < K; ++j) sum += std::exp(s[size_t(j)] - m);
                lse[size_t(r * Hq + h)] = m + std::log(sum);
                const uint32_t key = attn::dropout::row_key(d.dropout_seed, b, h, i);
                for (int64_t j = 0; j < K; ++j) {
                    double w = std::exp(s[size_t(j)] - m) / sum;
                    if (d.dropout_p > 0.0f)
                        w = attn::dropout::dropped(key, j, attn::dropout::threshold(d.dropout_p))
                                ? 0.0
                                : w / (1.0 - d.dropout_p);
                    for (int64_t c = 0; c < D && w != 0.0; ++c)
                        out[size_t((r * Hq + h) * D + c)] +=
                            w * p.v[size_t(((d.kv_start[b] + j) * d.heads_kv + hk) * D + c)];
                }
            }
    }
}

class ragged_test : public attn_test::path_test {};

TEST_P(ragged_test, PackedBatchMatchesFloat64) {
    // sequence 1 has no queries (skipped), sequences 3 and 6 no keys (zeros; lse = the sink;
    // a few rows and a tile's worth), sequence 4 decodes one query over 1300 keys, limited
    // by kv_len
    const std::vector<seq_shape> seqs = {{37, 90, -1}, {0, 20, -1}, {5, 5, -1}, {3, 0, -1},
                                         {1, 1300, 1100}, {130, 200, -1}, {9, 0, -1}};
    for (const attn_causal causal :
         {ATTN_CAUSAL_NONE, ATTN_CAUSAL_TOP_LEFT, ATTN_CAUSAL_BOTTOM_RIGHT,
          ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN}) {
        SCOPED_TRACE(testing::Message() << "causal " << int(causal));
        packed_batch p = make_batch(seqs, 4, 2, 16, 11 + uint32_t(causal));
        attn_sdpa_desc d = packed_desc(p);
        d.causal = causal;
        d.kv_len = p.kv_len.data();
        const std::vector<float> slopes = attn_test::alibi_geometric(4);
        const std::vector<float> sinks = {0.5f, -INFINITY, 1.0f, 2.0f};
        const std::vector<float> mask = random_tensor(size_t(d.batch * 4 * d.len_q * d.len_kv), 5);
        if (causal == ATTN_CAUSAL_NONE) d.window_left = 40, d.window_right = 3;
        if (causal == ATTN_CAUSAL_TOP_LEFT) d.alibi_slopes = slopes.data(), d.softcap = 5.0f;
        if (causal == ATTN_CAUSAL_BOTTOM_RIGHT) d.dropout_p = 0.25f, d.dropout_seed = 99;
        if (causal == ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN) {
            d.sinks = sinks.data();
            d.mask = mask.data();
            d.mask_strides = attn_layout{4 * d.len_q * d.len_kv, d.len_q * d.len_kv, d.len_kv};
        }
        std::vector<float> out(size_t(p.q_start.back() * 4 * 16), NAN);
        std::vector<float> lse(size_t(p.q_start.back() * 4), NAN);
        d.lse = lse.data();
        ASSERT_EQ(attn_sdpa_f32(ctx(), &d, p.q.data(), p.k.data(), p.v.data(), out.data()), ATTN_OK)
            << attn_last_error();
        std::vector<double> want_out, want_lse;
        oracle(d, p, want_out, want_lse);
        // f32 sums of up to 1300 products of terms in [-1, 1]: well inside 1e-4 relative
        EXPECT_LT(attn_test::max_rel_error(out, want_out), 1e-4);
        EXPECT_LT(attn_test::max_rel_error(lse, want_lse), 1e-5);
    }
}

INSTANTIATE_TEST_SUITE_P(all, ragged_test, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

// ---- batch invariance ----

// A path and a thread count; skipped by name when the machine has fewer hardware threads.
class invariance_test : public testing::TestWithParam<std::tuple<attn_test::path, int>> {
  protected:
    void SetUp() override {
        const auto &[path, threads] = GetParam();
        ctx_ = attn_test::make_context(path.impl, path.isa, threads);
        ASSERT_TRUE(ctx_) << "cannot create a context for " << path.name;
        if (attn_context_num_threads(ctx_.get()) < threads)
            GTEST_SKIP() << threads << " threads asked, the machine has "
                         << attn_context_num_threads(ctx_.get()) << " hardware threads";
    }
    attn_context *ctx() const { return ctx_.get(); }

  private:
    attn_test::context_ptr ctx_;
};

// Rounds every element of x to bf16 in place (so f32 and bf16 calls see the same values).
std::vector<uint16_t> to_bf16(const std::vector<float> &x) {
    std::vector<uint16_t> b(x.size());
    attn_convert(nullptr, int64_t(x.size()), x.data(), ATTN_DTYPE_F32, b.data(), ATTN_DTYPE_BF16);
    return b;
}

// Calls attn_sdpa with f32 or bf16 q / k / v (out f32).
attn_status call(attn_context *ctx, attn_sdpa_desc d, bool bf16, const float *q, const float *k,
                 const float *v, const uint16_t *qb, const uint16_t *kb, const uint16_t *vb,
                 float *out) {
    if (!bf16) return attn_sdpa(ctx, &d, q, k, v, out);
    d.q_type = d.kv_type = ATTN_DTYPE_BF16;
    return attn_sdpa(ctx, &d, qb, kb, vb, out);
}

// The sequences of a serving step: decoding over long contexts (split keys), a chunked
// prefill, a few-row tail, short decodes; each packed call in two orders.
TEST_P(invariance_test, EverySequenceAsIfAlone) {
    const std::vector<seq_shape> step = {{1, 5000, 4800}, {100, 700, 700}, {1, 300, 300},
                                         {6, 2100, 2000}, {0, 50, 50}, {1, 3000, 1500}};
    for (const bool bf16 : {false, true}) {
        // the tile model (scalar, slow) runs the bf16 inputs its tiles take; its f32 entries
        // are the avx512_bf16 level's, tested there
        if (!bf16 && std::get<0>(GetParam()).isa == ATTN_ISA_AMX_EMULATED) continue;
        for (const bool reversed : {false, true}) {
            SCOPED_TRACE(testing::Message() << (bf16 ? "bf16" : "f32")
                                            << (reversed ? " reversed" : ""));
            std::vector<seq_shape> seqs = step;
            if (reversed) std::reverse(seqs.begin(), seqs.end());
            const packed_batch p = make_batch(seqs, 8, 2, 32, 21);
            const auto qb = to_bf16(p.q), kb = to_bf16(p.k), vb = to_bf16(p.v);
            attn_sdpa_desc d = packed_desc(p);
            d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
            d.kv_len = p.kv_len.data();
            d.window_left = 1800;
            d.softcap = 10.0f;
            const std::vector<float> sinks(8, 0.25f);
            d.sinks = sinks.data();
            std::vector<float> out(p.q.size() / 32 * 32), lse(p.q.size() / 32);
            d.lse = lse.data();
            ASSERT_EQ(call(ctx(), d, bf16, p.q.data(), p.k.data(), p.v.data(), qb.data(),
                           kb.data(), vb.data(), out.data()), ATTN_OK)
                << attn_last_error();
            for (int64_t b = 0; b < d.batch; ++b) {
                const int64_t n = p.q_start[b + 1] - p.q_start[b];
                if (n == 0) continue;
                // alone: a dense call of batch 1, len_q = n_b, len_kv = K_b, at the same rows
                attn_sdpa_desc one = d;
                one.batch = 1;
                one.len_q = n;
                one.len_kv = p.kv_start[b + 1] - p.kv_start[b];
                one.q_start = one.kv_start = nullptr;
                one.kv_len = &p.kv_len[size_t(b)];
                std::vector<float> out1(size_t(n * 8 * 32)), lse1(size_t(8 * n));
                one.lse = lse1.data();
                const size_t qo = size_t(p.q_start[b] * 8 * 32), ko = size_t(p.kv_start[b] * 2 * 32);
                ASSERT_EQ(call(ctx(), one, bf16, p.q.data() + qo, p.k.data() + ko, p.v.data() + ko,
                               qb.data() + qo, kb.data() + ko, vb.data() + ko, out1.data()),
                          ATTN_OK)
                    << attn_last_error();
                const std::vector<float> rows(out.begin() + long(qo), out.begin() + long(qo) + long(out1.size()));
                EXPECT_TRUE(attn_test::bitwise_equal(rows, out1)) << "sequence " << b;
                for (int64_t h = 0; h < 8; ++h)  // alone: dense [h, i]; packed: [row, h]
                    for (int64_t i = 0; i < n; ++i)
                        ASSERT_EQ(std::memcmp(&lse[size_t((p.q_start[b] + i) * 8 + h)],
                                              &lse1[size_t(h * n + i)], 4), 0)
                            << "lse of sequence " << b << " head " << h << " row " << i;
            }
        }
    }
}

// Dense batches with padding: each sequence of a [batch, len_q] call whose keys end at its
// kv_len equals the same sequence alone with len_kv = kv_len (and the packed form).
TEST_P(invariance_test, DensePaddedBatchAsIfAlone) {
    const int64_t B = 4, H = 4, L = 3, Lk = 4200, D = 32;
    const std::vector<float> q = random_tensor(size_t(B * H * L * D), 31);
    const std::vector<float> k = random_tensor(size_t(B * H * Lk * D), 32);
    const std::vector<float> v = random_tensor(size_t(B * H * Lk * D), 33);
    std::vector<int32_t> kv_len = {4200, 900, 2500, 17};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, L, Lk, D);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    d.kv_len = kv_len.data();
    std::vector<float> out(q.size());
    ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
        << attn_last_error();
    for (int64_t b = 0; b < B; ++b) {
        attn_sdpa_desc one = d;
        one.batch = 1;
        one.len_kv = kv_len[size_t(b)];
        one.k = one.v = attn_layout{0, Lk * D, D};  // the same rows, read in place
        one.kv_len = nullptr;
        one.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        std::vector<float> out1(size_t(H * L * D));
        ASSERT_EQ(attn_sdpa_f32(ctx(), &one, q.data() + b * H * L * D, k.data() + b * H * Lk * D,
                                v.data() + b * H * Lk * D, out1.data()), ATTN_OK)
            << attn_last_error();
        const std::vector<float> rows(out.begin() + b * H * L * D, out.begin() + (b + 1) * H * L * D);
        EXPECT_TRUE(attn_test::bitwise_equal(rows, out1)) << "sequence " << b;
    }
}

std::vector<std::tuple<attn_test::path, int>> invariance_params() {
    std::vector<std::tuple<attn_test::path, int>> params;
    for (const attn_test::path &p : attn_test::all_paths())  // the reference runs on one
        for (int threads = 1; threads <= (p.impl == ATTN_IMPL_REFERENCE ? 1 : 4); ++threads)
            params.emplace_back(p, threads);
    return params;
}

INSTANTIATE_TEST_SUITE_P(
    all, invariance_test, testing::ValuesIn(invariance_params()),
    [](const testing::TestParamInfo<std::tuple<attn_test::path, int>> &info) {
        return std::get<0>(info.param).name + "_threads" + std::to_string(std::get<1>(info.param));
    });

// ---- backward ----

// The packed backward equals each sequence's own backward (dq, dk, dv rows; 1e-5 relative:
// the packed call takes the forward's lse, each sequence alone recomputes its statistics,
// which may differ in their last bits; bitwise equality from the same statistics is
// test_sdpa_ragged_backward.cpp's), and the
// rows of dk, dv of keys no query sees (past kv_len, left of every window) are zeros.
TEST_P(ragged_test, BackwardEqualsPerSequence) {
    const std::vector<seq_shape> seqs = {{20, 60, 50}, {0, 10, 10}, {1, 70, 70}, {33, 33, 33},
                                         {4, 0, 0}};
    const packed_batch p = make_batch(seqs, 4, 2, 16, 51);
    attn_sdpa_desc d = packed_desc(p);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    d.kv_len = p.kv_len.data();
    d.window_left = 30;
    std::vector<float> out(p.q.size()), lse(p.q.size() / 16);
    d.lse = lse.data();
    ASSERT_EQ(attn_sdpa_f32(ctx(), &d, p.q.data(), p.k.data(), p.v.data(), out.data()), ATTN_OK)
        << attn_last_error();
    const std::vector<float> dout = random_tensor(out.size(), 52);
    std::vector<float> dq(p.q.size(), NAN), dk(p.k.size(), NAN), dv(p.v.size(), NAN);
    ASSERT_EQ(attn_sdpa_backward_f32(ctx(), &d, p.q.data(), p.k.data(), p.v.data(), out.data(),
                                     dout.data(), lse.data(), dq.data(), dk.data(), dv.data()),
              ATTN_OK)
        << attn_last_error();
    for (int64_t b = 0; b < d.batch; ++b) {
        const int64_t n = p.q_start[b + 1] - p.q_start[b], K = p.kv_start[b + 1] - p.kv_start[b];
        const size_t qo = size_t(p.q_start[b] * 4 * 16), ko = size_t(p.kv_start[b] * 2 * 16);
        if (n == 0) {  // no query sees its keys: zeros
            for (size_t e = ko; e < ko + size_t(K * 2 * 16); ++e) ASSERT_EQ(dk[e], 0.0f);
            continue;
        }
        if (K == 0) continue;
        attn_sdpa_desc one = d;
        one.batch = 1, one.len_q = n, one.len_kv = K;
        one.q_start = one.kv_start = nullptr;
        one.kv_len = &p.kv_len[size_t(b)];
        one.lse = nullptr;
        std::vector<float> out1(size_t(n * 4 * 16)), dq1(out1.size()), dk1(size_t(K * 2 * 16)),
            dv1(dk1.size());
        ASSERT_EQ(attn_sdpa_f32(ctx(), &one, p.q.data() + qo, p.k.data() + ko, p.v.data() + ko,
                                out1.data()), ATTN_OK);
        ASSERT_EQ(attn_sdpa_backward_f32(ctx(), &one, p.q.data() + qo, p.k.data() + ko,
                                         p.v.data() + ko, out1.data(), dout.data() + qo, nullptr,
                                         dq1.data(), dk1.data(), dv1.data()),
                  ATTN_OK)
            << attn_last_error();
        auto slice = [](const std::vector<float> &x, size_t at, size_t n_) {
            return std::vector<float>(x.begin() + long(at), x.begin() + long(at + n_));
        };
        EXPECT_LT(attn_test::max_rel_error(slice(dq, qo, dq1.size()), attn_test::to_double(dq1)), 1e-5);
        EXPECT_LT(attn_test::max_rel_error(slice(dk, ko, dk1.size()), attn_test::to_double(dk1)), 1e-5);
        EXPECT_LT(attn_test::max_rel_error(slice(dv, ko, dv1.size()), attn_test::to_double(dv1)), 1e-5);
        for (int64_t j = p.kv_len[size_t(b)]; j < K; ++j)  // past kv_len: no query sees them
            for (int64_t c = 0; c < 2 * 16; ++c) ASSERT_EQ(dv[ko + size_t(j * 32 + c)], 0.0f);
    }
}

// ---- validation ----

TEST(ragged_validation, RulesNameFieldAndEntryAndWriteNothing) {
    const packed_batch p = make_batch({{3, 8, -1}, {2, 5, -1}}, 2, 2, 8, 61);
    std::vector<float> out(p.q.size(), 7.0f);
    struct bad {
        std::vector<int32_t> q_start, kv_start;
        const char *says;
    };
    const bad cases[] = {
        {{1, 3, 5}, {0, 8, 13}, "desc->q_start[0] = 1, must be 0"},
        {{0, 3, 2}, {0, 8, 13}, "desc->q_start[2] = 2, must be >= desc->q_start[1] = 3"},
        {{0, 3, 9}, {0, 8, 13}, "desc->q_start[2] - desc->q_start[1] = 6 (sequence 1), must be <= desc->len_q = 3"},
        {{0, 3, 5}, {0, 8, 30}, "desc->kv_start[2] - desc->kv_start[1] = 22 (sequence 1), must be <= desc->len_kv = 8"},
    };
    for (const bad &c : cases) {
        attn_sdpa_desc d = packed_desc(p);
        d.q_start = c.q_start.data();
        d.kv_start = c.kv_start.data();
        EXPECT_EQ(attn_sdpa_f32(nullptr, &d, p.q.data(), p.k.data(), p.v.data(), out.data()),
                  ATTN_INVALID_ARGUMENT);
        EXPECT_NE(std::string(attn_last_error()).find(c.says), std::string::npos) << attn_last_error();
    }
    attn_sdpa_desc d = packed_desc(p);
    std::vector<int32_t> kv_len = {8, 6};  // sequence 1 has 5 keys
    d.kv_len = kv_len.data();
    EXPECT_EQ(attn_sdpa_f32(nullptr, &d, p.q.data(), p.k.data(), p.v.data(), out.data()),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error()).find("desc->kv_len[1] = 6, must be <= desc->kv_start[2] - desc->kv_start[1] = 5"),
              std::string::npos) << attn_last_error();
    d = packed_desc(p);
    std::vector<float> weights(1000);
    d.weights = weights.data();
    EXPECT_EQ(attn_sdpa_f32(nullptr, &d, p.q.data(), p.k.data(), p.v.data(), out.data()),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error()).find("desc->weights"), std::string::npos);
    d = packed_desc(p);
    const std::vector<int32_t> table = {0, 1};
    d.block_table = table.data(), d.block_table_stride = 1, d.page_size = 8, d.num_pages = 2;
    EXPECT_EQ(attn_sdpa_f32(nullptr, &d, p.q.data(), p.k.data(), p.v.data(), out.data()),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error()).find("desc->kv_start"), std::string::npos);
    d = packed_desc(p);
    const float scale = 1.0f;
    // with packed sequences the quantized-cache fields keep their own rules
    d.k_scale = &scale;
    EXPECT_EQ(attn_sdpa_f32(nullptr, &d, p.q.data(), p.k.data(), p.v.data(), out.data()),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error())
                  .find("desc->k_scale = 0x"), std::string::npos) << attn_last_error();
    EXPECT_NE(std::string(attn_last_error()).find("must be NULL unless desc->kv_type is quantized"),
              std::string::npos) << attn_last_error();
    d = packed_desc(p);
    d.v_group = 3;
    EXPECT_EQ(attn_sdpa_f32(nullptr, &d, p.q.data(), p.k.data(), p.v.data(), out.data()),
              ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error()).find("desc->v_group = 3, must divide desc->dim_v"),
              std::string::npos) << attn_last_error();
    for (const float x : out) ASSERT_EQ(x, 7.0f);  // nothing written
}

// ---- the plan ----

// Every visible key of every row is covered by exactly one task; tasks stay within their
// sequence's pairs, chunks and kv heads; a split sequence's chunks start at multiples of the
// chunk on its own key axis.
TEST(ragged_plan, EveryKeyOfEveryRowOnce) {
    const packed_batch p = make_batch({{1, 9000, 9000}, {200, 3000, 2800}, {0, 10, 10},
                                       {7, 4000, 4000}, {1, 100, 60}}, 8, 2, 16, 71);
    attn_sdpa_desc d = packed_desc(p);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    d.kv_len = p.kv_len.data();
    d.window_left = 2500;
    attn::kernels::attention_impl_list impls = attn_test::fake_impls();
    const attn::ops::plan_kernels k{&impls, 16, false};
    const attn::kernels::attention_impl &kb = impls.entries[1];  // both entries' blocks
    const attn::core::seq_rows rows(d);
    for (const int slots : {1, 2, 64}) {
        const attn::ops::sdpa_plan plan = attn::ops::plan_sdpa(d, k, slots);
        // covered[(seq, h, i, j)] counts
        for (size_t si = 0; si < plan.sequences.size(); ++si) {
            const attn::ops::sequence_plan &s = plan.sequences[si];
            if (s.chunks > 1) EXPECT_EQ(s.chunk_keys % kb.bc, 0);
            EXPECT_STREQ(s.impl->name, s.queries <= 4 ? "decode" : "tiles");
            const attn::core::key_visibility vis = rows.visibility(s.b);
            std::vector<int> covered(size_t(d.heads_q * s.queries * s.keys), 0);
            for (const attn::ops::sdpa_task &t : plan.tasks) {
                if (t.seq != int64_t(si)) continue;
                ASSERT_GE(t.hk, 0);
                ASSERT_LT(t.hk, d.heads_kv);
                ASSERT_LE(t.pair_end, s.head_tiles * s.q_tiles);
                ASSERT_LT(t.chunk, s.chunks);
                for (int64_t pair = t.pair_begin; pair < t.pair_end; ++pair) {
                    const int64_t ht = pair / s.q_tiles, i0 = (pair % s.q_tiles) * kb.br;
                    const int64_t heads = s.head_rows > 1 ? s.head_rows : 1;
                    const int64_t tile_rows = s.head_rows > 1 ? 1 : std::min<int64_t>(kb.br, s.queries - i0);
                    for (int64_t hr = 0; hr < heads; ++hr)
                        for (int64_t r = 0; r < tile_rows; ++r) {
                            const int64_t h = t.hk * (d.heads_q / d.heads_kv) + ht * s.head_rows + hr;
                            const int64_t i = i0 + r;
                            const auto seen = vis.row(i);
                            for (int64_t j = std::max<int64_t>(seen.lo, t.chunk * s.chunk_keys);
                                 j < std::min(seen.hi, (t.chunk + 1) * s.chunk_keys); ++j)
                                ++covered[size_t((h * s.queries + i) * s.keys + j)];
                        }
                }
            }
            for (int64_t h = 0; h < d.heads_q; ++h)
                for (int64_t i = 0; i < s.queries; ++i) {
                    const auto seen = vis.row(i);
                    for (int64_t j = 0; j < s.keys; ++j)
                        ASSERT_EQ(covered[size_t((h * s.queries + i) * s.keys + j)],
                                  j >= seen.lo && j < seen.hi ? 1 : 0)
                            << "sequence " << s.b << " head " << h << " row " << i << " key " << j;
                }
        }
        EXPECT_GT(attn::ops::plan_efficiency(plan, slots), 0.0);
    }
}

// The tile loops find the keys a block of rows shares from its first and last rows alone: a
// row's visible range, cut to any key span, never moves left as the row grows. Every
// alignment offset, window (none, one side, both) and kv_len padding, rows past both ends.
TEST(key_visibility, RowRangesOnlyMoveRight) {
    for (const int64_t offset : {-40, 0, 7, 300})
        for (const int64_t left : {-1, 0, 3, 50})
            for (const int64_t right : {-1, 0, 5})
                for (const int64_t keys : {0, 1, 64, 200}) {
                    const attn::core::key_visibility vis{offset, left, right, keys};
                    for (const int64_t begin : {0, 32}) {
                        const int64_t end = begin + 96;
                        attn::core::key_range prev = vis.row_within(-60, begin, end);
                        for (int64_t i = -59; i < 400; ++i) {
                            const attn::core::key_range r = vis.row_within(i, begin, end);
                            ASSERT_GE(r.lo, prev.lo) << offset << ' ' << left << ' ' << right << ' ' << keys << " row " << i;
                            ASSERT_GE(r.hi, prev.hi) << offset << ' ' << left << ' ' << right << ' ' << keys << " row " << i;
                            prev = r;
                        }
                    }
                }
}

}  // namespace
