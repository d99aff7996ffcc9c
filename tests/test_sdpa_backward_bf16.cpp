// The fused backward with its products in bf16: on bf16 pairs (VDPBF16PS, the avx512_bf16
// level) and on AMX tiles (amx: the real tiles; amx_emulated: the same kernel on the tile
// model, on any AVX512-BF16 machine); a level this CPU lacks is skipped by name. It runs when
// q, k, v, out are all bf16, or under ATTN_FPMATH_BF16. Its tolerance rule, for every
// gradient: against float64 gradients on the same stored inputs, the normwise error is at most
// twice that of a plain 16-bit backward applying exactly the kernels' roundings (inputs in
// bf16 — f32 ones rounded under fpmath bf16 —, the forward's P rounded before P V, its output
// as stored, P z rounded to bf16 before dV, dS before dQ and dK, products summed in f32, each
// gradient rounded once), plus one unit roundoff of the gradient's type. Options: causal
// (top-left, bottom-right with fewer and more queries than keys), GQA, dropout, window, kv_len,
// softcap, mask, ALiBi, sinks with dsinks, lse given or recomputed, odd dims and lengths. Bits:
// 1, 2 and 3 threads give the same, and the real tiles the model's.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ref/convert.hpp"
#include "ref/dropout.hpp"
#include "test_features_plain.hpp"
#include "test_precision_plain.hpp"
#include "test_util.hpp"

namespace {

using attn_features_plain::plain_backward;
using attn_features_plain::roundings;

float round_bf16(float x) { return attn::convert::bf16_to_f32(attn::convert::f32_to_bf16(x)); }

std::vector<float> normal(size_t n, uint32_t seed, float sigma) {
    return attn_test::normal_tensor(n, seed, sigma);
}

// Tensors as stored (bf16 bits, or f32) and the values the tiles multiply (bf16 either way).
struct stored {
    std::vector<uint8_t> bytes;
    std::vector<float> values;
};
stored store(const std::vector<float> &x, bool bf16) {
    stored s;
    s.bytes.resize(x.size() * (bf16 ? 2 : 4));
    for (size_t i = 0; i < x.size(); ++i) {
        s.values.push_back(round_bf16(x[i]));
        if (bf16) {
            const uint16_t h = attn::convert::f32_to_bf16(x[i]);
            std::memcpy(&s.bytes[i * 2], &h, 2);
        } else {
            std::memcpy(&s.bytes[i * 4], &x[i], 4);
        }
    }
    return s;
}
std::vector<float> widen(const std::vector<uint8_t> &bytes, bool bf16) {
    std::vector<float> out(bytes.size() / (bf16 ? 2 : 4));
    for (size_t i = 0; i < out.size(); ++i) {
        if (bf16) {
            uint16_t h;
            std::memcpy(&h, &bytes[i * 2], 2);
            out[i] = attn::convert::bf16_to_f32(h);
        } else {
            std::memcpy(&out[i], &bytes[i * 4], 4);
        }
    }
    return out;
}

template <class T>
struct grads {
    std::vector<T> dq, dk, dv;
};

// The backward in T with dropout (causal top-left or none, GQA; dense BHSD): row by row,
// S = scale q k^T, P = softmax, z the dropout factors, O = (P z) V (P rounded by p_r before
// it, O by out_r after), delta = dO . O, dP = z (dO . v), dS = P (dP - delta);
// dV += p_r(P z) dO, dQ += scale p_r(dS) k, dK += scale p_r(dS) q.
template <class T>
grads<T> dropout_backward(const attn_sdpa_desc &d, const std::vector<T> &q,
                          const std::vector<T> &k, const std::vector<T> &v,
                          const std::vector<T> &dout, T (*p_r)(T), T (*out_r)(T)) {
    const int64_t Hq = d.heads_q, Hkv = d.heads_kv, Lq = d.len_q, Lk = d.len_kv, D = d.dim_qk;
    grads<T> g{std::vector<T>(q.size()), std::vector<T>(k.size()), std::vector<T>(v.size())};
    std::vector<T> p(static_cast<size_t>(Lk)), z(static_cast<size_t>(Lk));
    const T scale = T(d.scale);
    for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < Lq; ++i) {
            const int64_t hk = h / (Hq / Hkv), row = h * Lq + i;
            const int64_t keys = d.causal == ATTN_CAUSAL_TOP_LEFT ? std::min(i + 1, Lk) : Lk;
            auto kv = [&](int64_t j) { return (hk * Lk + j) * D; };
            T top = -INFINITY, sum = 0;
            for (int64_t j = 0; j < keys; ++j) {
                T s = 0;
                for (int64_t c = 0; c < D; ++c) s += q[row * D + c] * k[kv(j) + c];
                top = std::max(top, p[j] = scale * s);
            }
            for (int64_t j = 0; j < keys; ++j) sum += (p[j] = std::exp(p[j] - top));
            const uint32_t key = attn::dropout::row_key(d.dropout_seed, 0, h, i);
            for (int64_t j = 0; j < keys; ++j) {
                p[j] /= sum;
                z[j] = attn::dropout::dropped(key, j, attn::dropout::threshold(d.dropout_p))
                           ? T(0)
                           : T(1.0 / (1.0 - d.dropout_p));
            }
            T delta = 0;
            for (int64_t c = 0; c < D; ++c) {
                T oc = 0;
                for (int64_t j = 0; j < keys; ++j) oc += p_r(p[j] * z[j]) * v[kv(j) + c];
                delta += dout[row * D + c] * out_r(oc);
            }
            for (int64_t j = 0; j < keys; ++j) {
                T dot = 0;
                for (int64_t c = 0; c < D; ++c) dot += dout[row * D + c] * v[kv(j) + c];
                const T pz = p_r(p[j] * z[j]), ds = p_r(p[j] * (z[j] * dot - delta));
                for (int64_t c = 0; c < D; ++c) {
                    g.dv[kv(j) + c] += pz * dout[row * D + c];
                    g.dq[row * D + c] += scale * ds * k[kv(j) + c];
                    g.dk[kv(j) + c] += scale * ds * q[row * D + c];
                }
            }
        }
    return g;
}

double keep(double x) { return x; }
float keep_f(float x) { return x; }

attn_test::context_ptr bf16_context(attn_isa isa, int threads, bool fpmath_bf16) {
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = ATTN_IMPL_SIMD;
    cfg.max_isa = isa;
    cfg.num_threads = threads;
    cfg.fpmath = fpmath_bf16 ? ATTN_FPMATH_BF16 : ATTN_FPMATH_STRICT;
    attn_context *c = nullptr;
    if (attn_context_create(&cfg, &c) != ATTN_OK) return attn_test::context_ptr();
    return attn_test::context_ptr(c);
}

struct level {
    attn_isa isa;
    const char *name;
};
void PrintTo(const level &l, std::ostream *os) { *os << l.name; }

class SdpaBackwardBf16 : public testing::TestWithParam<level> {
  protected:
    void SetUp() override {
        if (!bf16_context(GetParam().isa, 1, false))
            GTEST_SKIP() << GetParam().name << ": this CPU (or its OS) lacks the level";
    }
};

// A problem: its shape, options, and whether the tensors are bf16 (else f32 under fpmath bf16).
struct problem {
    const char *name;
    bool bf16, lse, features;
    int64_t B, Hq, Hkv, Lq, Lk, D;
    attn_causal causal;
    float dropout;
};

// The options of a features problem: bottom-right causal, a window, kv_len, softcap, a mask,
// ALiBi and sinks (with dsinks).
struct options {
    std::vector<float> slopes, sinks, mask, dsinks;
    std::vector<int32_t> kv_len;
    options(attn_sdpa_desc &d, const problem &p) {
        d.causal = p.causal;
        d.dropout_p = p.dropout;
        d.dropout_seed = 77;
        if (!p.features) return;
        slopes = attn_test::alibi_geometric(p.Hq);
        sinks = normal(size_t(p.Hq), 9, 2.0f);
        mask = attn_test::random_tensor(size_t(p.B * p.Hq * p.Lq * p.Lk), 8, -1, 1);
        kv_len = {int32_t(p.Lk), int32_t(p.Lk * 3 / 4)};
        kv_len.resize(size_t(p.B));
        dsinks.assign(size_t(p.Hq), NAN);
        d.window_left = p.Lk / 3;
        d.softcap = 20.0f;
        d.alibi_slopes = slopes.data();
        d.sinks = sinks.data();
        d.kv_len = kv_len.data();
        d.mask = mask.data();
        d.mask_strides = attn_layout{p.Hq * p.Lq * p.Lk, p.Lq * p.Lk, p.Lk};
    }
};

struct run {
    std::vector<uint8_t> dq, dk, dv;
    std::vector<float> dsinks;
};

// The forward then the backward of problem p on a level, at the given threads.
run compute(const problem &p, attn_isa isa, int threads, attn_sdpa_desc &d, options &o,
            const stored &q, const stored &k, const stored &v, const stored &g) {
    run r;
    auto ctx = bf16_context(isa, threads, !p.bf16);
    const size_t bytes = p.bf16 ? 2 : 4;
    std::vector<uint8_t> out(g.bytes.size());
    std::vector<float> lse(size_t(p.B * p.Hq * p.Lq));
    d.lse = p.lse ? lse.data() : nullptr;
    EXPECT_EQ(attn_sdpa(ctx.get(), &d, q.bytes.data(), k.bytes.data(), v.bytes.data(), out.data()),
              ATTN_OK)
        << attn_last_error();
    attn_sdpa_desc b = d;
    b.lse = nullptr;
    r.dsinks = o.dsinks;
    if (!o.dsinks.empty()) b.dsinks = r.dsinks.data();
    r.dq.assign(q.values.size() * bytes, 0xff);
    r.dk.assign(k.values.size() * bytes, 0xff);
    r.dv.assign(v.values.size() * bytes, 0xff);
    EXPECT_EQ(attn_sdpa_backward(ctx.get(), &b, q.bytes.data(), k.bytes.data(), v.bytes.data(),
                                 out.data(), g.bytes.data(), p.lse ? lse.data() : nullptr,
                                 r.dq.data(), r.dk.data(), r.dv.data()),
              ATTN_OK)
        << attn_last_error();
    return r;
}

void check_rule(const problem &p, attn_isa isa) {
    SCOPED_TRACE(std::string(p.name) + (p.bf16 ? ", bf16 tensors" : ", f32 tensors, fpmath bf16") +
                 (p.lse ? ", lse given" : ", lse recomputed"));
    attn_sdpa_desc d = attn_test::make_desc(p.B, p.Hq, p.Hkv, p.Lq, p.Lk, p.D, p.D);
    d.q_type = d.kv_type = d.out_type = p.bf16 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
    options o(d, p);
    const stored q = store(normal(size_t(p.B * p.Hq * p.Lq * p.D), 1, 1.5f), p.bf16),
                 k = store(normal(size_t(p.B * p.Hkv * p.Lk * p.D), 2, 1.5f), p.bf16),
                 v = store(normal(size_t(p.B * p.Hkv * p.Lk * p.D), 3, 1.0f), p.bf16),
                 g = store(normal(size_t(p.B * p.Hq * p.Lq * p.D), 4, 1.0f), p.bf16);
    const run r = compute(p, isa, 2, d, o, q, k, v, g);

    auto cast = [](const std::vector<float> &x) { return std::vector<double>(x.begin(), x.end()); };
    grads<double> exact;
    grads<float> plain;
    std::vector<double> exact_dsinks;
    std::vector<float> plain_dsinks;
    if (p.dropout > 0.0f) {  // dropout: top-left causal or none, one batch
        exact = dropout_backward<double>(d, cast(q.values), cast(k.values), cast(v.values),
                                         cast(g.values), keep, keep);
        plain = dropout_backward<float>(d, q.values, k.values, v.values, g.values, round_bf16,
                                        p.bf16 ? round_bf16 : keep_f);
    } else {
        const std::vector<float> &s = o.sinks;
        const auto e = plain_backward<double>(d, cast(q.values), cast(k.values), cast(v.values),
                                              cast(g.values), cast(s));
        roundings<float> rf;
        rf.p_for_out = rf.p_for_dv = rf.ds_for_dq = rf.ds_for_dk = round_bf16;
        if (p.bf16) rf.out_stored = round_bf16;
        const auto f = plain_backward<float>(d, q.values, k.values, v.values, g.values, s, rf);
        exact = {e.dq, e.dk, e.dv};
        plain = {f.dq, f.dk, f.dv};
        exact_dsinks = e.dsinks;
        plain_dsinks = f.dsinks;
    }
    const double u = p.bf16 ? 0x1p-8 : 0x1p-24;
    auto rule = [&](const char *what, std::vector<float> yard, const std::vector<float> &got,
                    const std::vector<double> &want, double unit) {
        if (unit > 0x1p-24)
            for (float &e : yard) e = round_bf16(e);  // each gradient rounded once
        const double e_got = attn_precision::normwise_error(got, want),
                     e_plain = attn_precision::normwise_error(yard, want);
        EXPECT_LE(e_got, 2.0 * e_plain + unit)
            << what << ": library " << e_got << ", plain 16-bit " << e_plain;
        EXPECT_LT(e_got, 0.05) << what << " is far from the oracle";
    };
    rule("dq", plain.dq, widen(r.dq, p.bf16), exact.dq, u);
    rule("dk", plain.dk, widen(r.dk, p.bf16), exact.dk, u);
    rule("dv", plain.dv, widen(r.dv, p.bf16), exact.dv, u);
    if (!o.dsinks.empty()) rule("dsinks", plain_dsinks, r.dsinks, exact_dsinks, 0x1p-24);
}

// Small shapes: amx_emulated runs the tile model, ~100x slower than the tiles.
TEST_P(SdpaBackwardBf16, ToleranceRule) {
    const problem problems[] = {
        {"dropout, causal top-left, GQA", true, true, false, 1, 4, 2, 150, 150, 64,
         ATTN_CAUSAL_TOP_LEFT, 0.2f},
        {"dropout, GQA, odd dim", true, false, false, 1, 4, 2, 77, 131, 45, ATTN_CAUSAL_NONE,
         0.1f},
        {"dropout, causal, odd dim", false, true, false, 1, 2, 1, 99, 99, 33,
         ATTN_CAUSAL_TOP_LEFT, 0.2f},
        {"features, fewer queries than keys", true, false, true, 2, 8, 4, 90, 140, 40,
         ATTN_CAUSAL_BOTTOM_RIGHT, 0.0f},
        {"features, more queries than keys", true, true, true, 2, 2, 1, 150, 70, 72,
         ATTN_CAUSAL_BOTTOM_RIGHT, 0.0f},
        {"features, top-left", false, false, true, 2, 8, 2, 60, 200, 31,
         ATTN_CAUSAL_TOP_LEFT, 0.0f},
    };
    for (const problem &p : problems) check_rule(p, GetParam().isa);
}

// Every option at once (GQA, bottom-right causal, kv_len, window, softcap, ALiBi, sinks with
// dsinks, mask) or dropout with causal and GQA, in bf16 and f32 under fpmath bf16: the
// gradients of `isa` at 1, 2 and 3 threads, and those of `other` (null: none) at 1 thread,
// are the same bits.
void check_bits(attn_isa isa, attn_isa other) {
    const problem problems[] = {
        {"features", true, false, true, 2, 4, 2, 100, 260, 40, ATTN_CAUSAL_BOTTOM_RIGHT, 0.0f},
        {"features", false, false, true, 2, 4, 2, 100, 260, 40, ATTN_CAUSAL_BOTTOM_RIGHT, 0.0f},
        {"dropout", true, true, false, 1, 4, 2, 100, 200, 64, ATTN_CAUSAL_TOP_LEFT, 0.1f},
    };
    for (const problem &p : problems) {
        SCOPED_TRACE(std::string(p.name) + (p.bf16 ? ", bf16 tensors" : ", f32 tensors"));
        attn_sdpa_desc d = attn_test::make_desc(p.B, p.Hq, p.Hkv, p.Lq, p.Lk, p.D, p.D);
        d.q_type = d.kv_type = d.out_type = p.bf16 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        options o(d, p);
        const stored q = store(normal(size_t(p.B * p.Hq * p.Lq * p.D), 1, 1.2f), p.bf16),
                     k = store(normal(size_t(p.B * p.Hkv * p.Lk * p.D), 2, 1.2f), p.bf16),
                     v = store(normal(size_t(p.B * p.Hkv * p.Lk * p.D), 3, 1.2f), p.bf16),
                     g = store(normal(size_t(p.B * p.Hq * p.Lq * p.D), 4, 1.2f), p.bf16);
        std::vector<run> runs;
        if (other != isa) runs.push_back(compute(p, other, 1, d, o, q, k, v, g));
        for (int threads : {1, 2, 3}) runs.push_back(compute(p, isa, threads, d, o, q, k, v, g));
        const std::vector<float> dq = widen(runs[0].dq, p.bf16);
        for (size_t x = 0; x < dq.size(); x += 97) ASSERT_TRUE(std::isfinite(dq[x])) << x;
        for (size_t n = 1; n < runs.size(); ++n) {
            EXPECT_EQ(runs[0].dq, runs[n].dq) << "run " << n;
            EXPECT_EQ(runs[0].dk, runs[n].dk) << "run " << n;
            EXPECT_EQ(runs[0].dv, runs[n].dv) << "run " << n;
            EXPECT_TRUE(attn_test::bitwise_equal(runs[0].dsinks, runs[n].dsinks)) << "run " << n;
        }
    }
}

TEST_P(SdpaBackwardBf16, ThreadsAgreeBitwise) { check_bits(GetParam().isa, GetParam().isa); }

// The real tiles against the model: the same kernel source on both, so the same bits.
TEST(SdpaBackwardAmxTiles, TilesEqualModelBitwise) {
    if (!bf16_context(ATTN_ISA_AMX, 1, false))
        GTEST_SKIP() << "amx: this CPU (or its OS) lacks the level";
    if (!bf16_context(ATTN_ISA_AMX_EMULATED, 1, false))
        GTEST_SKIP() << "amx_emulated: this CPU lacks AVX512-BF16";
    check_bits(ATTN_ISA_AMX, ATTN_ISA_AMX_EMULATED);
}

INSTANTIATE_TEST_SUITE_P(Levels, SdpaBackwardBf16,
                         testing::Values(level{ATTN_ISA_AVX512_BF16, "avx512_bf16"},
                                         level{ATTN_ISA_AMX, "amx"},
                                         level{ATTN_ISA_AMX_EMULATED, "amx_emulated"}),
                         [](const testing::TestParamInfo<level> &i) {
                             return std::string(i.param.name);
                         });

}  // namespace
