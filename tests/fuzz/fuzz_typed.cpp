// The 16-bit entry points of the API fuzzer: attn_convert and attn_sdpa with any element
// types. Their tensors live in byte buffers of their own (16-bit elements do not fit the
// float pool), each with guard bytes around it, and each call runs on the reference and on
// one SIMD ISA with 1 and 2 threads. The contract checked:
//  - a rejected call returns INVALID_ARGUMENT, sets a message and writes nothing;
//  - an accepted call writes only its outputs (guards and gaps between rows untouched);
//  - every path gives the same status, and 1 and 2 threads agree bitwise;
//  - attn_convert: every path gives the same bits (the conversions are exact functions);
//  - attn_sdpa with finite inputs: SIMD and reference agree within the output type's
//    precision, and NaN lands in the same places.
#include "fuzz_decode.hpp"

namespace fuzz {

namespace {

constexpr size_t guard_bytes = 64;
constexpr uint8_t guard_value = 0xA5;

// A byte buffer with guards on both sides; data() is past the front guard.
struct guarded_bytes {
    std::vector<uint8_t> bytes;
    explicit guarded_bytes(size_t n) : bytes(n + 2 * guard_bytes, guard_value) {}
    uint8_t *data() { return bytes.data() + guard_bytes; }
    bool guards_intact() const {
        for (size_t i = 0; i < guard_bytes; ++i)
            if (bytes[i] != guard_value || bytes[bytes.size() - 1 - i] != guard_value) return false;
        return true;
    }
};

int dtype_in(FuzzedDataProvider &in) {
    // mostly valid types; now and then one outside the enum
    const int t = in.ConsumeIntegralInRange<int>(0, 20);
    return t < 18 ? t % 3 : (t == 18 ? -1 : 3 + t);
}

size_t type_bytes(int t) { return t == ATTN_DTYPE_F32 ? 4 : 2; }
bool type_valid(int t) { return t >= ATTN_DTYPE_F32 && t <= ATTN_DTYPE_F16; }

// Fills n elements of type t with values of the source (specials now and then).
void fill(uint8_t *p, int t, size_t n, value_source &src, FuzzedDataProvider &in, bool specials) {
    std::vector<float> x(n);
    for (auto &v : x) v = src.next();
    if (specials && n > 0)
        for (int k = in.ConsumeIntegralInRange<int>(0, 3); k > 0; --k) {
            const size_t at = in.ConsumeIntegralInRange<size_t>(0, n - 1);
            const float kinds[] = {NAN, INFINITY, -INFINITY, 1e30f, 1e-40f, 70000.0f};
            x[at] = kinds[in.ConsumeIntegralInRange<int>(0, 5)];
        }
    if (n == 0) return;
    if (t == ATTN_DTYPE_F32) {
        std::memcpy(p, x.data(), n * 4);
    } else if (attn_convert(nullptr, int64_t(n), x.data(), ATTN_DTYPE_F32, p, attn_dtype(t)) != ATTN_OK) {
        fail("convert: setting up a 16-bit input failed:", attn_last_error());
    }
}

void expect_rejected(attn_status st, const char *what) {
    FUZZ_CHECK(st == ATTN_INVALID_ARGUMENT, what);
    FUZZ_CHECK(attn_last_error()[0] != '\0', "a rejected call left no message");
}

}  // namespace

// attn_convert: any n, any types, separate, in place or overlapping buffers.
void fuzz_convert(FuzzedDataProvider &in, value_source &src, attn_context *const ctx[3]) {
    const int64_t n = in.ConsumeIntegralInRange<int64_t>(-2, in.ConsumeBool() ? 40 : 70000);
    const int st = dtype_in(in), dt = dtype_in(in);
    const int mode = in.ConsumeIntegralInRange<int>(0, 5);  // 0: in place, 1: overlap, else apart
    const size_t count = size_t(std::max<int64_t>(n, 0));
    const size_t s_bytes = count * type_bytes(st), d_bytes = count * type_bytes(dt);
    const bool in_place = mode == 0, overlapping = mode == 1 && count > 1;
    const bool types_ok = type_valid(st) && type_valid(dt);
    const bool valid = n >= 0 && types_ok &&
                       !(count > 0 && ((in_place && type_bytes(st) != type_bytes(dt)) || overlapping));
    const size_t shift = overlapping ? type_bytes(st) : 0;  // dst starts one element in
    char what[96];
    std::snprintf(what, sizeof what, "n=%lld src_type=%d dst_type=%d mode=%d", (long long)n, st, dt, mode);
    const size_t total = std::max(s_bytes, d_bytes) + shift + 8;
    guarded_bytes initial(total);
    fill(initial.data(), type_valid(st) ? st : ATTN_DTYPE_BF16, count, src, in, true);  // 2 bytes, as sized
    std::vector<uint8_t> results[3];
    attn_status status[3];
    for (int k = 0; k < 3; ++k) {
        guarded_bytes b = initial, separate(total);
        uint8_t *s = b.data();
        uint8_t *d = in_place ? s : overlapping ? s + shift : separate.data();
        status[k] = attn_convert(ctx[k], n, s, attn_dtype(st), d, attn_dtype(dt));
        if (!b.guards_intact() || !separate.guards_intact()) fail("convert: wrote outside its buffers:", what);
        if (!valid) {
            expect_rejected(status[k], "convert: an invalid call was not rejected");
            FUZZ_CHECK(b.bytes == initial.bytes && separate.bytes == guarded_bytes(total).bytes,
                       "convert: a rejected call wrote");
            continue;
        }
        FUZZ_CHECK(status[k] == ATTN_OK, "convert: a valid call failed");
        results[k].assign(d, d + d_bytes);
        if (!in_place && !overlapping)  // bytes past the n converted elements are untouched
            for (size_t i = d_bytes; i < total; ++i)
                FUZZ_CHECK(separate.data()[i] == guard_value, "convert: wrote past n elements");
    }
    FUZZ_CHECK(status[0] == status[1] && status[1] == status[2], "convert: paths disagree on the status");
    if (status[0] == ATTN_OK)
        FUZZ_CHECK(results[0] == results[1] && results[1] == results[2],
                   "convert: the reference and SIMD (1 and 2 threads) give different bits");
}

// attn_sdpa with element types: small shapes, dense or BSHD, causal, kv_len, GQA, guards
// around every tensor and gaps between output rows; now and then latent attention (v is the
// first dim_v elements of k's rows: v = k, the same layout, dim_v <= dim_qk).
void fuzz_sdpa_typed(FuzzedDataProvider &in, value_source &src, attn_context *const ctx[3]) {
    const int64_t batch = in.ConsumeIntegralInRange<int64_t>(1, 2);
    const int64_t heads_kv = in.ConsumeIntegralInRange<int64_t>(1, 2);
    const int64_t heads_q = heads_kv * in.ConsumeIntegralInRange<int64_t>(1, 3);
    const int64_t len_q = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(1, 4)
                                           : in.ConsumeIntegralInRange<int64_t>(1, 110);
    const int64_t len_kv = in.ConsumeIntegralInRange<int64_t>(1, in.ConsumeBool() ? 70 : 1100);
    const int64_t dim = in.ConsumeIntegralInRange<int64_t>(1, 72);
    const int q_type = dtype_in(in), kv_type = dtype_in(in), out_type = dtype_in(in);
    const bool bshd = in.ConsumeBool(), specials = in.ConsumeIntegralInRange<int>(0, 7) == 0;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, batch, heads_q, len_q, len_kv, dim);
    d.heads_kv = heads_kv;
    d.causal = attn_causal(in.ConsumeIntegralInRange<int>(0, 2));
    const int64_t gap = in.ConsumeIntegralInRange<int64_t>(0, 3);  // padding after each out row
    if (bshd) {
        d.q = {len_q * heads_q * dim, dim, heads_q * dim};
        d.k = d.v = {len_kv * heads_kv * dim, dim, heads_kv * dim};
    } else {
        d.k = d.v = {heads_kv * len_kv * dim, len_kv * dim, dim};
    }
    std::vector<int32_t> kv_len;
    if (in.ConsumeBool()) {
        for (int64_t b = 0; b < batch; ++b) kv_len.push_back(in.ConsumeIntegralInRange<int32_t>(0, int32_t(len_kv)));
        d.kv_len = kv_len.data();
    }
    set_enum(d.q_type, q_type);
    set_enum(d.kv_type, kv_type);
    set_enum(d.out_type, out_type);
    const bool valid = type_valid(q_type) && type_valid(kv_type) && type_valid(out_type);
    const int qt = valid ? q_type : 0, kvt = valid ? kv_type : 0, ot = valid ? out_type : 0;
    const size_t nq = size_t(batch * heads_q * len_q * dim), nkv = size_t(batch * heads_kv * len_kv * dim);
    guarded_bytes q(nq * type_bytes(qt)), k(nkv * type_bytes(kvt)), v(nkv * type_bytes(kvt));
    fill(q.data(), qt, nq, src, in, specials);
    fill(k.data(), kvt, nkv, src, in, specials);
    fill(v.data(), kvt, nkv, src, in, specials);
    const bool latent = in.ConsumeIntegralInRange<int>(0, 3) == 0;
    const int64_t dim_v = latent ? in.ConsumeIntegralInRange<int64_t>(1, dim) : dim;
    const size_t n_out = size_t(batch * heads_q * len_q * (dim_v + gap));
    d.dim_v = dim_v;
    d.out = {heads_q * len_q * (dim_v + gap), len_q * (dim_v + gap), dim_v + gap};
    const uint8_t *v_rows = latent ? k.data() : v.data();
    const guarded_bytes out_initial(n_out * type_bytes(ot));
    std::vector<float> lse[3];
    std::vector<std::vector<float>> out_f32(3);
    attn_status status[3];
    std::vector<uint8_t> bits[3];
    for (int c = 0; c < 3; ++c) {
        guarded_bytes out = out_initial;
        lse[c].assign(size_t(batch * heads_q * len_q), 7.0f);
        d.lse = lse[c].data();
        status[c] = attn_sdpa(ctx[c], &d, q.data(), k.data(), v_rows, out.data());
        FUZZ_CHECK(out.guards_intact(), "sdpa typed: wrote outside out");
        if (!valid) {
            expect_rejected(status[c], "sdpa typed: a type outside the enum was not rejected");
            FUZZ_CHECK(out.bytes == out_initial.bytes, "sdpa typed: a rejected call wrote");
            continue;
        }
        FUZZ_CHECK(status[c] == ATTN_OK, "sdpa typed: a valid call failed");
        // the gaps between output rows are untouched
        const size_t eb = type_bytes(ot);
        for (size_t r = 0; r < size_t(batch * heads_q * len_q); ++r)
            for (size_t g = 0; g < size_t(gap) * eb; ++g)
                FUZZ_CHECK(out.data()[(r * size_t(dim_v + gap) + size_t(dim_v)) * eb + g] == guard_value,
                           "sdpa typed: wrote into the gap after an output row");
        bits[c].assign(out.data(), out.data() + n_out * eb);
        out_f32[c].resize(n_out);
        if (ot == ATTN_DTYPE_F32)
            std::memcpy(out_f32[c].data(), out.data(), n_out * 4);
        else
            attn_convert(nullptr, int64_t(n_out), out.data(), attn_dtype(ot), out_f32[c].data(), ATTN_DTYPE_F32);
    }
    FUZZ_CHECK(status[0] == status[1] && status[1] == status[2], "sdpa typed: paths disagree on the status");
    if (status[0] != ATTN_OK) return;
    FUZZ_CHECK(bits[1] == bits[2] && std::memcmp(lse[1].data(), lse[2].data(), lse[1].size() * 4) == 0,
               "sdpa typed: 1 and 2 threads differ bitwise");
    if (specials) return;  // infinities may round differently on the way; bits agree across threads
    // The two paths' difference, relative to 1 + |a|. The values are multiples of 1/16 in
    // [-1, 1] (exact in every type), so the dot products are exact in f32, |v| <= 1 and
    // |score| <= sqrt(dim) < 8.5.
    // - f32 arithmetic: each path sums len_kv weights and len_kv weighted V rows (with
    //   sum_j P_j |v_j| <= 1) in its own order, at most len_kv units of 2^-24 each by the
    //   textbook bound, and rounds the scaled score and its exp by a few: between the two
    //   paths 2 (len_kv + 8) 2^-24 (1.3e-4 at 1100 keys, 1e-6 at 20);
    // - a 16-bit out is rounded once: the two f32 values may round to neighbouring 16-bit
    //   numbers, one unit in the last place apart (2^-7 for bf16, 2^-10 for f16);
    // - P may be rounded to bf16 before P V where V is bf16 (2^-9 relative on each weight, in
    //   either path): at most 2 * 2^-9 * sum_j P_j |v_j| <= 2^-8 absolute.
    const double tol = 2.0 * double(len_kv + 8) * 0x1p-24 +
                       (ot == ATTN_DTYPE_BF16 ? 0x1p-7 : ot == ATTN_DTYPE_F16 ? 0x1p-10 : 0.0);
    const double p_rounding = kvt == ATTN_DTYPE_BF16 ? 0x1p-8 : 0.0;
    for (size_t r = 0; r < size_t(batch * heads_q * len_q); ++r)
        for (size_t x = 0; x < size_t(dim_v); ++x) {
            const size_t i = r * size_t(dim_v + gap) + x;
            const float a = out_f32[0][i], b = out_f32[1][i];
            FUZZ_CHECK(std::isnan(a) == std::isnan(b), "sdpa typed: NaN placement differs");
            if (!std::isnan(a))
                FUZZ_CHECK(std::fabs(a - b) <= tol * (1.0 + std::fabs(a)) + p_rounding,
                           "sdpa typed: SIMD and reference disagree");
        }
}

}  // namespace fuzz
