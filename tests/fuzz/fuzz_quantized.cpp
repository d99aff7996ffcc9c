// attn_sdpa over quantized K/V caches in the API fuzzer: any quantized kv_type (now and then
// one with a broken rule), scales per row, per group, per channel, per head or per tensor, zero
// points or not, random codes (FP8 NaN codes included), now and then a NaN or infinite scale,
// small shapes, causal, kv_len, GQA, now and then packed sequences (q_start, kv_start: the
// scales then addressed by packed row), q and out in f32 or in bf16 (where a cache with a scale
// a row and no zero points takes the codes' pair path); on the reference and one SIMD ISA with
// 1 and 2 threads.
// The contract checked:
//  - every path gives the same status; a rejected call sets a message and writes nothing;
//  - 1 and 2 threads agree bitwise (out and lse);
//  - with finite scales and values, SIMD and reference agree within f32 precision (a few units
//    of bf16's last place with bf16 q and out), and NaN lands in the same places.
#include "fuzz_decode.hpp"

namespace fuzz {

namespace {

attn_dtype quantized_type_in(FuzzedDataProvider &in) {
    return attn_dtype(in.ConsumeIntegralInRange<int>(ATTN_DTYPE_I8, ATTN_DTYPE_FP8_E5M2));
}

bool four_bit(attn_dtype t) { return t == ATTN_DTYPE_I4 || t == ATTN_DTYPE_U4; }
bool integer(attn_dtype t) { return t >= ATTN_DTYPE_I8 && t <= ATTN_DTYPE_U4; }

// Scale strides and group of one side, dim elements a row, for one of five granularities.
void scale_layout(FuzzedDataProvider &in, attn_dtype t, int64_t heads, int64_t len, int64_t dim,
                  attn_layout *s, int64_t *group) {
    const int64_t pair = four_bit(t) ? 2 : 1;
    switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0: *s = {heads * len, len, 1}, *group = 0; break;                       // per row
    case 1: {                                                                     // per group
        *group = dim % (2 * pair) == 0 ? dim / 2 : dim;
        const int64_t g = dim / *group;
        *s = {heads * len * g, len * g, g};
        break;
    }
    case 2: *s = {heads * (dim / pair), dim / pair, 0}, *group = pair; break;    // per channel
    case 3: *s = {heads, 1, 0}, *group = 0; break;                               // per head
    default: *s = {0, 0, 0}, *group = 0; break;                                  // per tensor
    }
}

}  // namespace

void fuzz_sdpa_quantized(FuzzedDataProvider &in, value_source &src, attn_context *const ctx[3]) {
    const attn_dtype t = quantized_type_in(in);
    const int64_t batch = in.ConsumeIntegralInRange<int64_t>(1, 2);
    const int64_t heads_kv = in.ConsumeIntegralInRange<int64_t>(1, 2);
    const int64_t heads_q = heads_kv * in.ConsumeIntegralInRange<int64_t>(1, 4);
    const int64_t len_q = in.ConsumeIntegralInRange<int64_t>(1, in.ConsumeBool() ? 4 : 40);
    const int64_t len_kv = in.ConsumeIntegralInRange<int64_t>(1, in.ConsumeBool() ? 70 : 1100);
    const int64_t dim = 2 * in.ConsumeIntegralInRange<int64_t>(1, 36) - (in.ConsumeIntegralInRange<int>(0, 15) == 0);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, batch, heads_q, len_q, len_kv, dim);
    d.heads_kv = heads_kv;
    d.k = d.v = attn_layout{heads_kv * len_kv * dim, len_kv * dim, dim};  // init counted heads_q kv heads
    d.kv_type = t;
    d.causal = attn_causal(in.ConsumeIntegralInRange<int>(0, 2));
    // packed sequences: counts within len_q / len_kv, rows [total, heads, dim]
    std::vector<int32_t> q_start{0}, kv_start{0};
    const int packing = in.ConsumeIntegralInRange<int>(0, 5);  // 4: q_start, 5: q_start + kv_start
    for (int64_t b = 0; packing >= 4 && b < batch; ++b) {
        q_start.push_back(q_start.back() + in.ConsumeIntegralInRange<int32_t>(0, int32_t(len_q)));
        kv_start.push_back(kv_start.back() + in.ConsumeIntegralInRange<int32_t>(0, int32_t(len_kv)));
    }
    if (packing >= 4) {
        d.q_start = q_start.data();
        d.q = d.out = attn_layout{0, dim, heads_q * dim};
    }
    if (packing == 5) {
        d.kv_start = kv_start.data();
        d.k = d.v = attn_layout{0, dim, heads_kv * dim};
    }
    std::vector<int32_t> kv_len;
    if (in.ConsumeBool()) {
        for (int64_t b = 0; b < batch; ++b) {
            const int32_t keys = packing == 5 ? kv_start[size_t(b + 1)] - kv_start[size_t(b)] : int32_t(len_kv);
            kv_len.push_back(in.ConsumeIntegralInRange<int32_t>(0, keys));
        }
        d.kv_len = kv_len.data();
    }
    scale_layout(in, t, heads_kv, len_kv, dim, &d.k_scale_strides, &d.k_group);
    scale_layout(in, t, heads_kv, len_kv, dim, &d.v_scale_strides, &d.v_group);
    // enough for every layout, packed rows included (a head's scales may overlap the next's)
    const size_t entries = size_t(batch * heads_kv * len_kv * dim);
    std::vector<float> k_scale(entries), v_scale(entries), k_zero(entries), v_zero(entries);
    const bool specials = in.ConsumeIntegralInRange<int>(0, 7) == 0;
    for (size_t i = 0; i < entries; ++i) {
        k_scale[i] = 0.05f * (1.0f + src.next()), v_scale[i] = 0.05f * (1.0f - src.next());
        k_zero[i] = 4.0f * src.next(), v_zero[i] = 4.0f * src.next();
    }
    if (specials) k_scale[size_t(in.ConsumeIntegralInRange<int64_t>(0, int64_t(entries) - 1))] = NAN;
    const bool fp8_unscaled = !integer(t) && in.ConsumeBool();
    d.k_scale = fp8_unscaled ? nullptr : k_scale.data();
    d.v_scale = fp8_unscaled ? nullptr : v_scale.data();
    if (integer(t) && in.ConsumeBool()) d.k_zero = k_zero.data(), d.v_zero = v_zero.data();
    const bool bf16_io = in.ConsumeBool();
    if (bf16_io) d.q_type = d.out_type = ATTN_DTYPE_BF16;
    const size_t bytes = four_bit(t) ? (entries + 1) / 2 : entries;
    std::vector<uint8_t> k(bytes), v(bytes);
    for (size_t i = 0; i < bytes; ++i) {
        k[i] = uint8_t(int(src.next() * 128.0f) & 0xff), v[i] = uint8_t(int(src.next() * 128.0f + 17.0f) & 0xff);
        if (!specials && t == ATTN_DTYPE_FP8_E4M3) k[i] &= 0xbf, v[i] &= 0xbf;  // finite codes
        if (!specials && t == ATTN_DTYPE_FP8_E5M2) k[i] &= 0xbb, v[i] &= 0xbb;
    }
    std::vector<float> q(size_t(batch * heads_q * len_q * dim));
    for (auto &e : q) e = src.next();
    std::vector<uint16_t> q16(q.size());
    if (bf16_io)
        FUZZ_CHECK(attn_convert(ctx[0], int64_t(q.size()), q.data(), ATTN_DTYPE_F32, q16.data(),
                                ATTN_DTYPE_BF16) == ATTN_OK, "sdpa quantized: q to bf16");
    const void *q_in = bf16_io ? static_cast<const void *>(q16.data()) : q.data();
    const size_t n_out = size_t(batch * heads_q * len_q * dim);
    std::vector<float> out[3], lse[3];
    attn_status status[3];
    for (int c = 0; c < 3; ++c) {
        out[c].assign(n_out, 7.0f);
        lse[c].assign(size_t(batch * heads_q * len_q), 7.0f);
        d.lse = lse[c].data();
        status[c] = attn_sdpa(ctx[c], &d, q_in, k.data(), v.data(), out[c].data());
        if (status[c] != ATTN_OK) {
            FUZZ_CHECK(attn_last_error()[0] != '\0', "sdpa quantized: a rejected call left no message");
            FUZZ_CHECK(out[c] == std::vector<float>(n_out, 7.0f), "sdpa quantized: a rejected call wrote");
        }
    }
    FUZZ_CHECK(status[0] == status[1] && status[1] == status[2], "sdpa quantized: paths disagree on the status");
    FUZZ_CHECK(status[0] == ATTN_OK || dim % 2 == 1, "sdpa quantized: a valid call failed");
    if (status[0] != ATTN_OK) return;
    FUZZ_CHECK(std::memcmp(out[1].data(), out[2].data(), n_out * 4) == 0 &&
                   std::memcmp(lse[1].data(), lse[2].data(), lse[1].size() * 4) == 0,
               "sdpa quantized: 1 and 2 threads differ bitwise");
    if (specials) return;
    for (int c = 0; bf16_io && c < 2; ++c) {  // the bf16 outputs (the buffers' first halves) widened
        std::vector<float> wide(n_out);
        FUZZ_CHECK(attn_convert(ctx[0], int64_t(n_out), out[c].data(), ATTN_DTYPE_BF16, wide.data(),
                                ATTN_DTYPE_F32) == ATTN_OK, "sdpa quantized: out from bf16");
        out[c] = wide;
    }
    const double tol = bf16_io ? 0x1p-5 : 1e-4;  // bf16: P rounded, each output rounded once
    for (size_t i = 0; i < n_out; ++i) {
        const float a = out[0][i], b = out[1][i];
        FUZZ_CHECK(std::isnan(a) == std::isnan(b), "sdpa quantized: NaN placement differs");
        if (!std::isnan(a))
            FUZZ_CHECK(std::fabs(a - b) <= tol * (1.0 + std::fabs(a)), "sdpa quantized: SIMD and reference disagree");
    }
}

}  // namespace fuzz
