// Strides a packed layout does not use: with q_start, q.batch and out.batch address nothing
// (query rows are q + r * q.seq + h * q.head), with kv_start likewise k.batch and v.batch. The
// header says they are not used, so any value there, negative or extreme, gives a valid call
// with the same bits as a batch stride of 0, forward and backward, on every path.
#include <cstdint>
#include <vector>

#include "test_util.hpp"

namespace {

class packed_strides_test : public attn_test::path_test {};

// Two sequences (3 queries over 8 keys, 2 queries over 5), 2 heads, dim 8, rows [total, head, dim].
struct packed_call {
    std::vector<int32_t> q_start{0, 3, 5}, kv_start{0, 8, 13};
    std::vector<float> q = attn_test::random_tensor(5 * 2 * 8, 91), k = attn_test::random_tensor(13 * 2 * 8, 92),
                       v = attn_test::random_tensor(13 * 2 * 8, 93), dout = attn_test::random_tensor(5 * 2 * 8, 94);
    attn_sdpa_desc desc(int64_t q_batch, int64_t out_batch, int64_t k_batch, int64_t v_batch) const {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 2, 2, 3, 8, 8);
        d.q = attn_layout{q_batch, 8, 16};
        d.out = attn_layout{out_batch, 8, 16};
        d.k = attn_layout{k_batch, 8, 16};
        d.v = attn_layout{v_batch, 8, 16};
        d.q_start = q_start.data();
        d.kv_start = kv_start.data();
        d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        return d;
    }
};

TEST_P(packed_strides_test, UnusedBatchStridesAreIgnored) {
    const packed_call c;
    const attn_sdpa_desc plain = c.desc(0, 0, 0, 0);
    std::vector<float> out0(c.q.size()), lse0(5 * 2);
    attn_sdpa_desc with_lse = plain;
    with_lse.lse = lse0.data();
    ASSERT_EQ(attn_sdpa_f32(ctx(), &with_lse, c.q.data(), c.k.data(), c.v.data(), out0.data()), ATTN_OK)
        << attn_last_error();
    std::vector<float> dq0(c.q.size()), dk0(c.k.size()), dv0(c.v.size());
    ASSERT_EQ(attn_sdpa_backward_f32(ctx(), &plain, c.q.data(), c.k.data(), c.v.data(), out0.data(), c.dout.data(),
                                     lse0.data(), dq0.data(), dk0.data(), dv0.data()),
              ATTN_OK)
        << attn_last_error();
    const int64_t odd[][4] = {{-1, -7, -3, -2}, {INT64_MIN, INT64_MAX, INT64_MAX, INT64_MIN}, {1000000, 0, -1, 5}};
    for (const auto &s : odd) {
        SCOPED_TRACE(testing::Message() << "batch strides q " << s[0] << " out " << s[1] << " k " << s[2] << " v " << s[3]);
        const attn_sdpa_desc d = c.desc(s[0], s[1], s[2], s[3]);
        std::vector<float> out(c.q.size(), 7.0f), dq(c.q.size()), dk(c.k.size()), dv(c.v.size());
        ASSERT_EQ(attn_sdpa_f32(ctx(), &d, c.q.data(), c.k.data(), c.v.data(), out.data()), ATTN_OK)
            << attn_last_error();
        EXPECT_EQ(std::memcmp(out.data(), out0.data(), out.size() * sizeof(float)), 0);
        ASSERT_EQ(attn_sdpa_backward_f32(ctx(), &d, c.q.data(), c.k.data(), c.v.data(), out0.data(), c.dout.data(),
                                         lse0.data(), dq.data(), dk.data(), dv.data()),
                  ATTN_OK)
            << attn_last_error();
        EXPECT_EQ(std::memcmp(dq.data(), dq0.data(), dq.size() * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(dk.data(), dk0.data(), dk.size() * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(dv.data(), dv0.data(), dv.size() * sizeof(float)), 0);
    }
    // A stride the layout does use keeps its rule.
    attn_sdpa_desc d = c.desc(-1, -1, -1, -1);
    d.q.seq = -16;
    std::vector<float> out(c.q.size(), 7.0f);
    EXPECT_EQ(attn_sdpa_f32(ctx(), &d, c.q.data(), c.k.data(), c.v.data(), out.data()), ATTN_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attn_last_error()).find("desc->q.seq = -16, must be >= 0"), std::string::npos)
        << attn_last_error();
    for (const float x : out) ASSERT_EQ(x, 7.0f);
}

// A packed call whose sequences have no queries has a q and an out of no element: any head
// stride is accepted there and nothing is written to out or dq. (The extent of such a layout,
// (heads - 1) * head stride, overflowed int64 in the check that out does not overlap itself:
// undefined behaviour, found by the fuzzer under UBSan.) The backward writes the dk, dv rows
// of the keys, which no query sees, as zeros.
TEST_P(packed_strides_test, NoQueriesAnyHeadStride) {
    const std::vector<int32_t> none = {0, 0, 0}, kv_start = {0, 8, 13};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 2, 3, 3, 8, 8);  // 3 heads: 2 * (INT64_MAX / 2) overflows
    d.q_start = none.data();
    d.kv_start = kv_start.data();
    d.q = d.out = attn_layout{0, INT64_MAX / 2, 24};
    d.k = d.v = attn_layout{0, 8, 24};  // [13 rows, 3 heads, 8]
    const std::vector<float> q(8, 0.5f), k(13 * 3 * 8, 0.25f);
    std::vector<float> out(8, 7.0f), dq(8, 7.0f), dk(k.size(), 7.0f), dv(k.size(), 7.0f);
    EXPECT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), k.data(), out.data()), ATTN_OK) << attn_last_error();
    for (const float x : out) EXPECT_EQ(x, 7.0f);
    EXPECT_EQ(attn_sdpa_backward_f32(ctx(), &d, q.data(), k.data(), k.data(), q.data(), q.data(), nullptr, dq.data(),
                                     dk.data(), dv.data()),
              ATTN_OK)
        << attn_last_error();
    for (const float x : dq) EXPECT_EQ(x, 7.0f);
    for (size_t i = 0; i < dk.size(); ++i) {
        ASSERT_EQ(dk[i], 0.0f) << i;
        ASSERT_EQ(dv[i], 0.0f) << i;
    }
}

// Likewise a packed k and v of no row (every sequence without keys): any head stride is
// accepted, and the output rows are zeros with lse -inf. (Row pointers formed from such a
// stride overflowed int64 in the drivers: undefined behaviour, found by the fuzzer.)
TEST_P(packed_strides_test, NoKeysAnyHeadStride) {
    const std::vector<int32_t> q_start = {0, 2, 3}, none = {0, 0, 0};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 2, 3, 2, 4, 8);
    d.q_start = q_start.data();
    d.kv_start = none.data();
    d.q = d.out = attn_layout{0, 8, 24};                  // [3 rows, 3 heads, 8]
    d.k = d.v = attn_layout{0, INT64_MAX / 3, 24};        // no row: nothing to bound the head stride
    const std::vector<float> q(3 * 3 * 8, 0.5f), k(8, 0.25f);
    std::vector<float> out(q.size(), 7.0f), lse(3 * 3, 7.0f);
    d.lse = lse.data();
    ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), k.data(), out.data()), ATTN_OK) << attn_last_error();
    for (const float x : out) EXPECT_EQ(x, 0.0f);
    for (const float x : lse) EXPECT_EQ(x, -INFINITY);
}

// One packed key row with the largest row stride (nothing bounds it: no second row is read),
// decoded by two query heads sharing it: the output is that V row. (The decode passes' prefetch
// set-up multiplied the stride by the element's bits: int64 overflow, found by the fuzzer.)
TEST_P(packed_strides_test, OneKeyRowAnyRowStride) {
    const std::vector<int32_t> one = {0, 1};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 2, 1, 1, 8);
    d.heads_kv = 1;
    d.q_start = d.kv_start = one.data();
    d.q = d.out = attn_layout{0, 8, 16};                // [1 row, 2 heads, 8]
    d.k = d.v = attn_layout{0, 8, INT64_MAX};           // [1 row, 1 head, 8], any row stride
    const std::vector<float> q = {0.5f, -1.0f, 0.25f, 2.0f, 1.0f, 0.0f, -0.5f, 3.0f,
                                  1.5f, 0.5f, -2.0f, 0.0f, 0.25f, 1.0f, 0.75f, -1.0f};
    const std::vector<float> k = {1.0f, 2.0f, -1.0f, 0.5f, 0.0f, 1.0f, 2.0f, -3.0f};
    std::vector<float> out(16, 7.0f);
    ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), k.data(), out.data()), ATTN_OK) << attn_last_error();
    for (int i = 0; i < 16; ++i) EXPECT_EQ(out[size_t(i)], k[size_t(i % 8)]) << i;
}

// The same with a second sequence of no query and no key after it: its start is one past the
// last row, so the largest row stride times that start overflowed int64 when its (unread) rows
// were addressed (undefined behaviour, found by the fuzzer under UBSan). Sequence 0's output is
// its one V row; backward, dq is zero (one key: the softmax is constant) and dv is dout summed.
TEST_P(packed_strides_test, EmptyLastSequenceAnyRowStride) {
    const std::vector<int32_t> starts = {0, 1, 1};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 2, 2, 1, 1, 4);
    d.heads_kv = 1;
    d.q_start = d.kv_start = starts.data();
    d.q = d.out = attn_layout{0, 4, INT64_MAX};  // [1 row, 2 heads, 4], any row stride
    d.k = d.v = attn_layout{0, 4, INT64_MAX};    // [1 row, 1 head, 4]
    const std::vector<float> q = {0.5f, -1.0f, 0.25f, 2.0f, 1.0f, 0.0f, -0.5f, 3.0f};
    const std::vector<float> k = {1.0f, 2.0f, -1.0f, 0.5f}, v = {-2.0f, 0.75f, 4.0f, 1.5f};
    std::vector<float> out(8, 7.0f), lse(2, 7.0f);
    d.lse = lse.data();
    ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data()), ATTN_OK) << attn_last_error();
    for (int i = 0; i < 8; ++i) EXPECT_EQ(out[size_t(i)], v[size_t(i % 4)]) << i;
    const std::vector<float> dout = {1.0f, 2.0f, 3.0f, 4.0f, -1.0f, 0.5f, 0.0f, 2.0f};
    std::vector<float> dq(8, 7.0f), dk(4, 7.0f), dv(4, 7.0f);
    d.lse = nullptr;
    ASSERT_EQ(attn_sdpa_backward_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data(), dout.data(), lse.data(),
                                     dq.data(), dk.data(), dv.data()),
              ATTN_OK)
        << attn_last_error();
    for (int i = 0; i < 8; ++i) EXPECT_EQ(dq[size_t(i)], 0.0f) << i;
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(dk[size_t(i)], 0.0f) << i;
        EXPECT_EQ(dv[size_t(i)], dout[size_t(i)] + dout[size_t(i + 4)]) << i;
    }
}

INSTANTIATE_TEST_SUITE_P(all, packed_strides_test, testing::ValuesIn(attn_test::all_paths()), attn_test::path_name);

}  // namespace
