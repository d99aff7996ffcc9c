// Packed sequences (q_start, kv_start) through attn_sdpa_backward with bf16 tensors: the typed
// backward widens each packed tensor exactly, runs the f32 backward, and rounds each gradient
// once, so its gradients are, bit for bit, the f32 backward's on the widened inputs rounded
// to bf16 (the header: widen, compute in f32, round once). Every packed row is compared, so a
// row read or written at a dense address instead of its packed one shows.
#include <cstring>
#include <vector>

#include "test_util.hpp"

namespace {

using attn_test::random_tensor;

class ragged_typed_test : public attn_test::path_test {};

// f32 -> bf16 (round to nearest even) -> the exact f32 of the bf16 value.
void to_bf16(attn_context *ctx, const std::vector<float> &x, std::vector<uint16_t> &h,
             std::vector<float> &w) {
    h.assign(x.size(), 0);
    w.assign(x.size(), 0.0f);
    ASSERT_EQ(attn_convert(ctx, int64_t(x.size()), x.data(), ATTN_DTYPE_F32, h.data(),
                           ATTN_DTYPE_BF16), ATTN_OK);
    ASSERT_EQ(attn_convert(ctx, int64_t(x.size()), h.data(), ATTN_DTYPE_BF16, w.data(),
                           ATTN_DTYPE_F32), ATTN_OK);
}

TEST_P(ragged_typed_test, Bf16BackwardIsF32BackwardRoundedOnce) {
    // sequences (queries, keys): a prefill, an empty one, a decode, a long one
    const int32_t q_start[] = {0, 7, 7, 8, 29};
    const int32_t kv_start[] = {0, 12, 15, 40, 61};
    const int32_t kv_len[] = {10, 3, 25, 21};
    const int64_t batch = 4, hq = 4, hkv = 2, dim = 16, total_q = 29, total_kv = 61;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, batch, hq, 21, 25, dim);
    d.heads_kv = hkv;
    d.q = d.out = attn_layout{0, dim, hq * dim};
    d.k = d.v = attn_layout{0, dim, hkv * dim};
    d.q_start = q_start;
    d.kv_start = kv_start;
    d.kv_len = kv_len;
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    std::vector<uint16_t> q16, k16, v16, out16, do16;
    std::vector<float> q, k, v, out, dout;
    to_bf16(ctx(), random_tensor(size_t(total_q * hq * dim), 71), q16, q);
    to_bf16(ctx(), random_tensor(size_t(total_kv * hkv * dim), 72), k16, k);
    to_bf16(ctx(), random_tensor(size_t(total_kv * hkv * dim), 73), v16, v);
    to_bf16(ctx(), random_tensor(size_t(total_q * hq * dim), 74), do16, dout);
    std::vector<float> out32(q.size()), lse(size_t(total_q * hq));
    d.lse = lse.data();
    ASSERT_EQ(attn_sdpa_f32(ctx(), &d, q.data(), k.data(), v.data(), out32.data()), ATTN_OK)
        << attn_last_error();
    d.lse = nullptr;
    to_bf16(ctx(), out32, out16, out);

    // expected: the f32 backward on the widened values, each gradient rounded to bf16
    std::vector<float> dq(q.size(), NAN), dk(k.size(), NAN), dv(v.size(), NAN);
    ASSERT_EQ(attn_sdpa_backward_f32(ctx(), &d, q.data(), k.data(), v.data(), out.data(),
                                     dout.data(), lse.data(), dq.data(), dk.data(), dv.data()),
              ATTN_OK)
        << attn_last_error();
    std::vector<uint16_t> dq_want, dk_want, dv_want;
    std::vector<float> unused;
    to_bf16(ctx(), dq, dq_want, unused);
    to_bf16(ctx(), dk, dk_want, unused);
    to_bf16(ctx(), dv, dv_want, unused);

    attn_sdpa_desc t = d;
    t.q_type = t.kv_type = t.out_type = ATTN_DTYPE_BF16;
    std::vector<uint16_t> dq16(q.size(), 0x7fc1), dk16(k.size(), 0x7fc1), dv16(v.size(), 0x7fc1);
    ASSERT_EQ(attn_sdpa_backward(ctx(), &t, q16.data(), k16.data(), v16.data(), out16.data(),
                                 do16.data(), lse.data(), dq16.data(), dk16.data(), dv16.data()),
              ATTN_OK)
        << attn_last_error();
    EXPECT_EQ(dq16, dq_want);
    EXPECT_EQ(dk16, dk_want);
    EXPECT_EQ(dv16, dv_want);
    // sanity of the comparison: the gradients are not all zero
    size_t nonzero = 0;
    for (uint16_t x : dq16) nonzero += (x & 0x7fff) != 0;
    EXPECT_GT(nonzero, dq16.size() / 2);
}

INSTANTIATE_TEST_SUITE_P(all, ragged_typed_test, testing::ValuesIn(attn_test::all_paths()),
                         attn_test::path_name);

}  // namespace
