// How the fuzzer turns bytes into API arguments: sizes (mostly small, sometimes 0, negative
// or overflowing), strides (dense, BSHD, padded, broadcast, overlapping, negative,
// overflowing), enum values including invalid ones, scales and dropout probabilities.
#pragma once

#include <cmath>
#include <cstdint>

#include "fuzz_support.hpp"

namespace fuzz {

inline int64_t sat_mul(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
inline int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

// A size: usually in [1, typical]; sometimes up to `large` (to cross block boundaries),
// sometimes 0 or negative, rarely one whose products overflow int64.
inline int64_t size_in(FuzzedDataProvider &in, int64_t typical, int64_t large) {
    switch (in.ConsumeIntegralInRange<int>(0, 19)) {
    case 0: return in.ConsumeIntegralInRange<int64_t>(-2, 0);
    case 1:
    case 2: return in.ConsumeIntegralInRange<int64_t>(typical + 1, large);
    case 3: return INT64_MAX / in.ConsumeIntegralInRange<int64_t>(1, 3);
    default: return in.ConsumeIntegralInRange<int64_t>(1, typical);
    }
}

// A leading dimension for rows of `cols` elements: usually cols plus a little padding,
// sometimes too small, zero or negative.
inline int64_t ld_in(FuzzedDataProvider &in, int64_t cols) {
    switch (in.ConsumeIntegralInRange<int>(0, 11)) {
    case 0: return cols - in.ConsumeIntegralInRange<int64_t>(1, 3);
    case 1: return -in.ConsumeIntegralInRange<int64_t>(0, 4);
    case 2:
    case 3: return sat_add(cols, in.ConsumeIntegralInRange<int64_t>(1, 17));
    default: return cols;
    }
}

inline void set_dense(view &t) {
    t.s[2] = t.n[3];
    t.s[1] = sat_mul(t.n[2], t.n[3]);
    t.s[0] = sat_mul(t.n[1], t.s[1]);
}

// A matrix {1, 1, rows, cols} with leading dimension ld.
inline view matrix(int64_t rows, int64_t cols, int64_t ld) {
    view t;
    t.n[2] = rows;
    t.n[3] = cols;
    t.s[2] = ld;
    t.s[1] = t.s[0] = sat_mul(rows, ld);
    return t;
}

inline view dense(int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    view t;
    t.n[0] = n0, t.n[1] = n1, t.n[2] = n2, t.n[3] = n3;
    set_dense(t);
    return t;
}

// Strides for a [batch, head, seq, dim] tensor chosen by the input.
inline void choose_strides(FuzzedDataProvider &in, view &t) {
    set_dense(t);
    const int64_t *n = t.n;
    switch (in.ConsumeIntegralInRange<int>(0, 13)) {
    case 5:  // stored [batch, seq, head, dim]
        t.s[1] = n[3];
        t.s[2] = sat_mul(n[1], n[3]);
        t.s[0] = sat_mul(n[2], t.s[2]);
        break;
    case 6: {  // rows and planes with spare capacity, as in a KV cache
        t.s[2] = sat_add(n[3], in.ConsumeIntegralInRange<int64_t>(1, 9));
        t.s[1] = sat_mul(sat_add(n[2], in.ConsumeIntegralInRange<int64_t>(0, 3)), t.s[2]);
        t.s[0] = sat_add(sat_mul(n[1], t.s[1]), in.ConsumeIntegralInRange<int64_t>(0, 5));
        break;
    }
    case 7:
    case 8: t.s[in.ConsumeIntegralInRange<int>(0, 2)] = 0; break;  // broadcast
    case 9:  // rows that overlap each other
        t.s[2] = in.ConsumeIntegralInRange<int64_t>(0, n[3] > 1 ? n[3] - 1 : 0);
        break;
    case 10:
        for (auto &s : t.s) s = in.ConsumeIntegralInRange<int64_t>(-2, 40);
        break;
    case 11: {
        int d = in.ConsumeIntegralInRange<int>(0, 2);
        t.s[d] = -t.s[d] - 1;
        break;
    }
    case 12: t.s[in.ConsumeIntegralInRange<int>(0, 2)] = INT64_MAX / in.ConsumeIntegralInRange<int64_t>(1, 3); break;
    default: break;  // dense [batch, head, seq, dim]
    }
}

// Offset 0, or one float (an unaligned start).
inline int64_t offset_in(FuzzedDataProvider &in) { return in.ConsumeIntegralInRange<int>(0, 3) == 0 ? 1 : 0; }

// Mostly a valid enum value in [0, count), sometimes one outside it.
inline int enum_in(FuzzedDataProvider &in, int count) {
    if (in.ConsumeIntegralInRange<int>(0, 15) == 0) return in.ConsumeBool() ? -1 : count + in.ConsumeIntegralInRange<int>(0, 2);
    return in.ConsumeIntegralInRange<int>(0, count - 1);
}

inline float scale_in(FuzzedDataProvider &in, float usual) {
    static const float choices[] = {1.0f, 0.5f, 2.0f, -1.0f, 0.125f, 4.0f, 0.0f, 1e30f, NAN, INFINITY, 1e-30f};
    int pick = in.ConsumeIntegralInRange<int>(0, 15);
    return pick < 11 ? choices[pick] : usual;
}

inline bool moderate_scale(float s) { return std::isfinite(s) && std::fabs(s) <= 4.0f; }

inline float dropout_in(FuzzedDataProvider &in) {
    static const float choices[] = {0.1f, 0.5f, 0.999999f, -0.25f, 1.0f, NAN, INFINITY, 0.0f};
    int pick = in.ConsumeIntegralInRange<int>(0, 15);
    return pick < 8 ? choices[pick] : 0.0f;
}
inline bool dropout_valid(float p) { return p >= 0.0f && p < 1.0f; }

// kv_len values for `batch` sequences of capacity len_kv: mostly in [0, len_kv], sometimes
// just outside. Empty when the batch is too large to fuzz.
inline std::vector<int32_t> kv_len_in(FuzzedDataProvider &in, int64_t batch, int64_t len_kv, bool *valid) {
    std::vector<int32_t> out;
    *valid = true;
    if (batch < 1 || batch > 64 || len_kv > INT32_MAX - 2) return out;
    for (int64_t b = 0; b < batch; ++b) {
        int64_t v = in.ConsumeIntegralInRange<int64_t>(-1, len_kv + 1);
        if (in.ConsumeIntegralInRange<int>(0, 3) != 0) v = std::min<int64_t>(std::max<int64_t>(v, 0), len_kv);
        if (v < 0 || v > len_kv) *valid = false;
        out.push_back(static_cast<int32_t>(v));
    }
    return out;
}

// The contexts every input runs on: the reference, and per SIMD ISA the CPU has, one
// context with 1 thread and one with 2.
struct path_contexts {
    attn_context *reference = nullptr;
    std::vector<std::pair<attn_context *, attn_context *>> simd;
    attn_isa best = ATTN_ISA_SCALAR;
};
const path_contexts &contexts();

// Each decodes one call from the input into `c` (placing its buffers in `p`); false = skip.
bool decode_gemm(FuzzedDataProvider &in, pool &p, value_source &src, call &c);
bool decode_softmax(FuzzedDataProvider &in, pool &p, value_source &src, call &c);
bool decode_merge(FuzzedDataProvider &in, pool &p, value_source &src, call &c);
bool decode_sdpa(FuzzedDataProvider &in, pool &p, value_source &src, call &c, bool backward);
// q_start / kv_start, a serving step over a paged cache, latent attention (fuzz_ragged.cpp).
bool decode_sdpa_ragged(FuzzedDataProvider &in, pool &p, value_source &src, call &c, bool backward);
bool decode_mha(FuzzedDataProvider &in, pool &p, value_source &src, call &c, bool backward);
// The 16-bit entry points (fuzz_typed.cpp), on the reference and one SIMD ISA with 1 and 2
// threads (ctx[0..2]); they check their own contract.
void fuzz_convert(FuzzedDataProvider &in, value_source &src, attn_context *const ctx[3]);
void fuzz_sdpa_typed(FuzzedDataProvider &in, value_source &src, attn_context *const ctx[3]);
void fuzz_quantize(FuzzedDataProvider &in, value_source &src, attn_context *const ctx[3]);
// attn_sdpa over quantized K/V caches (fuzz_quantized.cpp), on the same three contexts.
void fuzz_sdpa_quantized(FuzzedDataProvider &in, value_source &src, attn_context *const ctx[3]);

}  // namespace fuzz
