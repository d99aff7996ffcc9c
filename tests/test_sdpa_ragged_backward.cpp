// The fused backward of packed sequences (q_start, kv_start: each sequence its own query and
// key counts and causal alignment), on every SIMD level this CPU has, one case per group of
// options (masks, kv_len, the three causal alignments, GQA, dropout, windows, softcap, ALiBi,
// sinks with dsinks, sequences of no queries and of no keys, keys split into several chunks):
//   - against the reference path (src/ref, the oracle of every other backward test), with the
//     forward's lse and with the statistics recomputed: max |a - b| / (1 + |b|) <= 2e-5, the
//     tolerance of the fused-vs-composed comparison of test_sdpa_backward_fused_features.cpp
//     (two float32 computations of the same sums in different orders);
//   - the composed backward (ops/backward_switch.hpp) agrees to the same tolerance;
//   - with sinks, rows that see no key add nothing to dsinks even when out is not the
//     forward's (as the reference defines it);
//   - the gradients are the same bits for 1, 2 and 3 threads;
//   - batch invariance: every sequence's dq, dk, dv are the same bits as that sequence alone
//     in a dense call (with dropout, whose keys depend on the sequence's index, sequence 0);
//   - attn_sdpa_backward with f16 tensors agrees with the reference path's to one f16 rounding.
#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "ops/backward_switch.hpp"
#include "test_features_util.hpp"

namespace {

using attn_test::random_tensor;
constexpr double tolerance = 2e-5;

// One sequence: queries, keys (K_b), kv_len (-1: none given).
struct seq_shape {
    int32_t queries, keys, kv_len;
};

struct ragged_case {
    const char *name;
    std::vector<seq_shape> seqs;
    int64_t heads_q, heads_kv, dim;
    attn_causal causal;
    int64_t window_left, window_right;
    float softcap, dropout;
    bool alibi, sinks, mask;
};

// GoogleTest prints a case by its name instead of its bytes.
void PrintTo(const ragged_case &c, std::ostream *os) { *os << c.name; }

std::vector<ragged_case> ragged_cases() {
    const auto NONE = ATTN_CAUSAL_NONE, TL = ATTN_CAUSAL_TOP_LEFT, BR = ATTN_CAUSAL_BOTTOM_RIGHT,
               KVL = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    return {
        {"bottom_right_kv_len_window_gqa", {{20, 60, 50}, {0, 10, 10}, {1, 70, 70}, {33, 33, 33},
         {4, 0, 0}, {50, 30, 30}}, 4, 2, 16, BR, 30, -1, 0.0f, 0.0f, false, false, false},
        {"top_left_mask_softcap", {{50, 40, -1}, {7, 90, -1}, {130, 130, -1}}, 2, 2, 24, TL, -1,
         -1, 4.0f, 0.0f, false, false, true},
        {"kv_len_alignment_alibi_sinks", {{17, 80, 64}, {1, 200, 150}, {40, 40, 25}, {3, 0, 0},
         {0, 5, 5}}, 4, 1, 32, KVL, -1, -1, 0.0f, 0.0f, true, true, false},
        {"dropout_window_both_sides", {{60, 100, -1}, {0, 0, -1}, {35, 20, -1}}, 2, 1, 16, NONE,
         20, 10, 0.0f, 0.2f, false, false, false},
        {"split_keys_one_kv_head", {{40, 700, -1}, {5, 300, -1}, {90, 90, -1}, {9, 520, -1}}, 1,
         1, 40, NONE, -1, -1, 0.0f, 0.0f, false, true, false},
        {"keyless_sequence_then_window_softcap_sinks", {{12, 0, -1}, {1, 3, -1}}, 7, 1, 12, NONE,
         0, -1, 5.0f, 0.0f, false, true, false},
    };
}

std::string case_name(const testing::TestParamInfo<std::tuple<attn_test::path, ragged_case>> &i) {
    return std::get<1>(i.param).name + std::string("_") + std::get<0>(i.param).name;
}

// A case's packed tensors ([total, heads, dim] rows), its desc and the forward's out and lse.
struct problem {
    ragged_case c;
    std::vector<int32_t> q_start{0}, kv_start{0}, kv_len;
    std::vector<float> q, k, v, dout, mask, slopes, sinks, out, lse;
    attn_sdpa_desc d;
    bool has_kv_len = false;

    explicit problem(const ragged_case &rc) : c(rc) {
        int64_t len_q = 1, len_kv = 1;
        for (const seq_shape &s : c.seqs) {
            q_start.push_back(q_start.back() + s.queries);
            kv_start.push_back(kv_start.back() + s.keys);
            kv_len.push_back(s.kv_len >= 0 ? s.kv_len : s.keys);
            has_kv_len = has_kv_len || s.kv_len >= 0;
            len_q = std::max<int64_t>(len_q, s.queries);
            len_kv = std::max<int64_t>(len_kv, s.keys);
        }
        const int64_t batch = int64_t(c.seqs.size()), Hq = c.heads_q, D = c.dim;
        attn_sdpa_desc_init(&d, batch, Hq, len_q, len_kv, D);
        d.heads_kv = c.heads_kv;
        d.q = d.out = attn_layout{0, D, Hq * D};
        d.k = d.v = attn_layout{0, D, c.heads_kv * D};
        d.q_start = q_start.data();
        d.kv_start = kv_start.data();
        if (has_kv_len) d.kv_len = kv_len.data();
        d.causal = c.causal;
        d.window_left = c.window_left;
        d.window_right = c.window_right;
        d.softcap = c.softcap;
        d.dropout_p = c.dropout;
        d.dropout_seed = 1234;
        const size_t nq = size_t(std::max(q_start.back(), 1) * Hq * D);
        const size_t nk = size_t(std::max(kv_start.back(), 1) * c.heads_kv * D);
        // q, k wider than [-1, 1] so that softcap and the mask change the softmax visibly
        q = random_tensor(nq, 81, -2.0f, 2.0f), k = random_tensor(nk, 82, -2.0f, 2.0f);
        v = random_tensor(nk, 83), dout = random_tensor(nq, 84);
        slopes = attn_test::alibi_geometric(Hq);
        if (c.alibi) d.alibi_slopes = slopes.data();
        if (c.sinks) {
            sinks = random_tensor(size_t(Hq), 85, -1.0f, 3.0f);
            d.sinks = sinks.data();
        }
        if (c.mask) {  // [batch, heads_q, len_q, len_kv], sequence b's rows at its own b
            mask = random_tensor(size_t(batch * Hq * len_q * len_kv), 86, -2.0f, 2.0f);
            d.mask = mask.data();
            d.mask_strides = attn_layout{Hq * len_q * len_kv, len_q * len_kv, len_kv};
        }
        out.assign(nq / size_t(D) * size_t(D), 0.0f);
        lse.assign(nq / size_t(D), 0.0f);
        attn_sdpa_desc f = d;
        f.lse = lse.data();
        auto ref = attn_test::make_context(ATTN_IMPL_REFERENCE);
        EXPECT_EQ(attn_sdpa_f32(ref.get(), &f, q.data(), k.data(), v.data(), out.data()), ATTN_OK)
            << attn_last_error();
    }

    // dq, dk, dv, dsinks of one backward call (every element starts as NaN: a row left
    // unwritten shows).
    std::vector<std::vector<float>> backward(attn_context *ctx, bool with_lse) const {
        return attn_test::sdpa_backward_f32_grads(ctx, d, q, k, v, out, dout, with_lse ? lse.data() : nullptr,
                                                  sinks.size());
    }
};

const char *const grad_names[] = {"dq", "dk", "dv", "dsinks"};

void expect_close(const std::vector<std::vector<float>> &got,
                  const std::vector<std::vector<float>> &want, const std::string &what) {
    for (size_t x = 0; x < got.size(); ++x)
        EXPECT_LE(attn_test::max_rel_error(got[x].data(), want[x].data(), got[x].size()),
                  tolerance)
            << what << ": " << grad_names[x];
}

class RaggedBackward
    : public testing::TestWithParam<std::tuple<attn_test::path, ragged_case>> {};

TEST_P(RaggedBackward, ReferenceAndComposed) {
    const problem p(std::get<1>(GetParam()));
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, std::get<0>(GetParam()).isa, 1);
    auto ref = attn_test::make_context(ATTN_IMPL_REFERENCE);
    ASSERT_TRUE(ctx && ref);
    const auto want = p.backward(ref.get(), true);
    // the reference's gradients are not trivially zero
    double largest = 0.0;
    for (float g : want[0]) largest = std::max(largest, double(std::fabs(g)));
    EXPECT_GT(largest, 1e-2);
    const auto fused = p.backward(ctx.get(), true);
    expect_close(fused, want, "fused, lse given");
    expect_close(p.backward(ctx.get(), false), want, "fused, statistics recomputed");
    attn::ops::set_backward_composed(true);
    const auto composed = p.backward(ctx.get(), true);
    attn::ops::set_backward_composed(false);
    expect_close(fused, composed, "fused vs composed");
    EXPECT_FALSE(attn_test::bitwise_equal(fused[0], composed[0]));  // two computations
    // A row that sees no key (a sequence without keys, a window past its keys) takes no
    // gradient, its sink's included: its output, 0, depends on nothing. With the forward's
    // out its delta dO . O is 0 anyway; given other values in out (here random), the fused
    // backward once took -P_sink delta into dsinks from the lse alone (P_sink = 1) where the
    // reference adds nothing.
    if (p.sinks.empty()) return;
    problem other(std::get<1>(GetParam()));
    other.out = random_tensor(other.out.size(), 87);
    expect_close(other.backward(ctx.get(), true), other.backward(ref.get(), true),
                 "out not the forward's");
}

TEST_P(RaggedBackward, SameBitsForEveryThreadCount) {
    ATTN_SKIP_UNLESS_THREADS(2);
    const problem p(std::get<1>(GetParam()));
    std::vector<std::vector<float>> one[2];
    for (int threads : {1, 2, 3}) {
        auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, std::get<0>(GetParam()).isa, threads);
        for (bool with_lse : {true, false}) {
            const auto got = p.backward(ctx.get(), with_lse);
            if (threads == 1) {
                one[with_lse] = got;
                continue;
            }
            for (size_t x = 0; x < got.size(); ++x)
                EXPECT_TRUE(attn_test::bitwise_equal(got[x], one[with_lse][x]))
                    << grad_names[x] << ", " << threads << " threads, lse " << with_lse;
        }
    }
}

// Sequence b of a packed call, alone: a dense call of its own counts (its kv_len, its mask
// rows), its lse transposed to the dense [heads_q, n_b] order.
TEST_P(RaggedBackward, EachSequenceAsAlone) {
    const problem p(std::get<1>(GetParam()));
    // with dropout, a row's key is of (sequence index, head, query): only sequence 0 keeps its
    // index alone
    const int64_t compared = p.c.dropout > 0.0f ? 1 : p.d.batch;
    const int64_t Hq = p.c.heads_q, Hkv = p.c.heads_kv, D = p.c.dim;
    for (int threads : {1, 2}) {
        auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, std::get<0>(GetParam()).isa, threads);
        for (bool with_lse : {true, false}) {
            const auto packed = p.backward(ctx.get(), with_lse);
            for (int64_t b = 0; b < compared; ++b) {
                const int64_t n = p.q_start[b + 1] - p.q_start[b];
                const int64_t K = p.kv_start[b + 1] - p.kv_start[b];
                if (n == 0 || K == 0) continue;  // no dense call of no queries or no keys
                attn_sdpa_desc one = p.d;
                one.batch = 1, one.len_q = n, one.len_kv = K;
                one.q_start = one.kv_start = nullptr;
                if (p.has_kv_len) one.kv_len = &p.kv_len[size_t(b)];
                if (p.c.mask) one.mask = p.mask.data() + b * p.d.mask_strides.batch;
                const size_t qo = size_t(p.q_start[b] * Hq * D), ko = size_t(p.kv_start[b] * Hkv * D);
                std::vector<float> lse1(size_t(Hq * n)), dq(size_t(n * Hq * D), NAN),
                    dk(size_t(K * Hkv * D), NAN), dv(dk.size(), NAN), dsinks(p.sinks.size());
                for (int64_t h = 0; h < Hq; ++h)
                    for (int64_t i = 0; i < n; ++i)
                        lse1[size_t(h * n + i)] = p.lse[size_t((p.q_start[b] + i) * Hq + h)];
                if (!p.sinks.empty()) one.dsinks = dsinks.data();
                ASSERT_EQ(attn_sdpa_backward_f32(ctx.get(), &one, p.q.data() + qo,
                                                 p.k.data() + ko, p.v.data() + ko,
                                                 p.out.data() + qo, p.dout.data() + qo,
                                                 with_lse ? lse1.data() : nullptr, dq.data(),
                                                 dk.data(), dv.data()),
                          ATTN_OK)
                    << attn_last_error();
                auto slice = [](const std::vector<float> &x, size_t at, size_t count) {
                    return std::vector<float>(x.begin() + long(at), x.begin() + long(at + count));
                };
                EXPECT_TRUE(attn_test::bitwise_equal(slice(packed[0], qo, dq.size()), dq))
                    << "dq of sequence " << b << ", " << threads << " threads, lse " << with_lse;
                EXPECT_TRUE(attn_test::bitwise_equal(slice(packed[1], ko, dk.size()), dk))
                    << "dk of sequence " << b << ", " << threads << " threads, lse " << with_lse;
                EXPECT_TRUE(attn_test::bitwise_equal(slice(packed[2], ko, dv.size()), dv))
                    << "dv of sequence " << b << ", " << threads << " threads, lse " << with_lse;
            }
        }
    }
}

// attn_sdpa_backward with f16 tensors: widened, the f32 backward, each gradient rounded once,
// on both paths; the two f32 backwards differ by at most the tolerance above, so the rounded
// gradients by at most one f16 rounding (2^-11 relative, taken as 2^-10 for the two sides)
// beyond it.
TEST_P(RaggedBackward, F16TypedAgreesWithReference) {
    const problem p(std::get<1>(GetParam()));
    auto ctx = attn_test::make_context(ATTN_IMPL_SIMD, std::get<0>(GetParam()).isa, 1);
    auto ref = attn_test::make_context(ATTN_IMPL_REFERENCE);
    auto to_f16 = [&](const std::vector<float> &x) {
        std::vector<uint16_t> h(x.size());
        EXPECT_EQ(attn_convert(ref.get(), int64_t(x.size()), x.data(), ATTN_DTYPE_F32, h.data(),
                               ATTN_DTYPE_F16), ATTN_OK);
        return h;
    };
    const auto q = to_f16(p.q), k = to_f16(p.k), v = to_f16(p.v), out = to_f16(p.out),
               dout = to_f16(p.dout);
    std::vector<std::vector<float>> grads[2];
    for (int which = 0; which < 2; ++which) {
        std::vector<uint16_t> dq(q.size(), 0x7e01), dk(k.size(), 0x7e01), dv(v.size(), 0x7e01);
        std::vector<float> dsinks(p.sinks.size(), NAN);
        attn_sdpa_desc t = p.d;
        t.q_type = t.kv_type = t.out_type = ATTN_DTYPE_F16;
        if (!p.sinks.empty()) t.dsinks = dsinks.data();
        ASSERT_EQ(attn_sdpa_backward(which ? ref.get() : ctx.get(), &t, q.data(), k.data(),
                                     v.data(), out.data(), dout.data(), p.lse.data(), dq.data(),
                                     dk.data(), dv.data()),
                  ATTN_OK)
            << attn_last_error();
        for (const std::vector<uint16_t> *g : {&dq, &dk, &dv}) {
            std::vector<float> wide(g->size());
            EXPECT_EQ(attn_convert(ref.get(), int64_t(g->size()), g->data(), ATTN_DTYPE_F16,
                                   wide.data(), ATTN_DTYPE_F32), ATTN_OK);
            grads[which].push_back(wide);
        }
        grads[which].push_back(dsinks);
    }
    for (size_t x = 0; x < 4; ++x)
        EXPECT_LE(attn_test::max_rel_error(grads[0][x].data(), grads[1][x].data(),
                                           grads[0][x].size()),
                  tolerance + std::ldexp(1.0, -10))
            << grad_names[x];
}

INSTANTIATE_TEST_SUITE_P(PerIsa, RaggedBackward,
                         testing::Combine(testing::ValuesIn(attn_test::simd_paths()),
                                          testing::ValuesIn(ragged_cases())),
                         case_name);

}  // namespace
