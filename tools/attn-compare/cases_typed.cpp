// Sweeps for attention with 16-bit tensors (attn_sdpa): each combination of q, k/v and out
// types over a few shapes (prefill tiles, split-key decoding, GQA, causal, masks, BSHD),
// judged by attn.h's tolerance rule (attn_sdpa) against double on the stored values.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compare.hpp"

namespace attn_compare {

namespace {

const char *type_name(attn_dtype t) {
    return t == ATTN_DTYPE_F32 ? "f32" : t == ATTN_DTYPE_BF16 ? "bf16" : "f16";
}

// x rounded to type t (round to nearest even) and back, as the library stores it.
float stored_value(float x, attn_dtype t) {
    if (t == ATTN_DTYPE_F32) return x;
    uint16_t h;
    float y;
    attn_convert(nullptr, 1, &x, ATTN_DTYPE_F32, &h, t);
    attn_convert(nullptr, 1, &h, t, &y, ATTN_DTYPE_F32);
    return y;
}

// The bytes of values stored as type t.
std::vector<uint8_t> stored_bytes(const std::vector<float> &x, attn_dtype t) {
    std::vector<uint8_t> out(x.size() * attn_dtype_size(t));
    attn_convert(nullptr, int64_t(x.size()), x.data(), ATTN_DTYPE_F32, out.data(), t);
    return out;
}

struct typed_options {
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim;
    attn_causal causal;
    bool mask, bshd;
    attn_dtype q_type = ATTN_DTYPE_F32, kv_type = ATTN_DTYPE_F32, out_type = ATTN_DTYPE_F32;
};

class sdpa_typed_problem : public problem {
public:
    explicit sdpa_typed_problem(const typed_options &o) : o_(o) {
        attn_sdpa_desc_init(&d_, o.batch, o.heads_q, o.len_q, o.len_kv, o.dim);
        d_.heads_kv = o.heads_kv;
        d_.causal = o.causal;
        d_.q_type = o.q_type;
        d_.kv_type = o.kv_type;
        d_.out_type = o.out_type;
        if (o.bshd) {
            d_.q = d_.out = {o.len_q * o.heads_q * o.dim, o.dim, o.heads_q * o.dim};
            d_.k = d_.v = {o.len_kv * o.heads_kv * o.dim, o.dim, o.heads_kv * o.dim};
        } else {
            d_.k = d_.v = {o.heads_kv * o.len_kv * o.dim, o.len_kv * o.dim, o.dim};
        }
        const size_t nq = size_t(o.batch * o.heads_q * o.len_q * o.dim);
        const size_t nkv = size_t(o.batch * o.heads_kv * o.len_kv * o.dim);
        q_ = random_values(nq, 71, -2.0f, 2.0f);
        k_ = random_values(nkv, 72, -2.0f, 2.0f);
        v_ = random_values(nkv, 73);
        for (auto &x : q_) x = stored_value(x, o.q_type);
        for (auto &x : k_) x = stored_value(x, o.kv_type);
        for (auto &x : v_) x = stored_value(x, o.kv_type);
        q16_ = stored_bytes(q_, o.q_type);
        k16_ = stored_bytes(k_, o.kv_type);
        v16_ = stored_bytes(v_, o.kv_type);
        if (o.mask) {
            mask_ = random_values(size_t(o.batch * o.heads_q * o.len_q * o.len_kv), 74, -3.0f, 1.0f);
            d_.mask = mask_.data();
            d_.mask_strides = {o.heads_q * o.len_q * o.len_kv, o.len_q * o.len_kv, o.len_kv};
        }
    }

    attn_status run(attn_context *ctx, std::vector<float> &outputs) const override {
        const size_t n = size_t(o_.batch * o_.heads_q * o_.len_q * o_.dim);
        std::vector<uint8_t> out(n * attn_dtype_size(o_.out_type));
        const attn_status st = attn_sdpa(ctx, &d_, q16_.data(), k16_.data(), v16_.data(), out.data());
        if (st != ATTN_OK) return st;
        std::vector<float> wide(n);
        attn_convert(nullptr, int64_t(n), out.data(), o_.out_type, wide.data(), ATTN_DTYPE_F32);
        outputs = gather_bhsd(wide.data(), d_.out, o_.batch, o_.heads_q, o_.len_q, o_.dim);
        return ATTN_OK;
    }

    std::vector<double> exact() const override { return oracle(false); }

    bool sixteen_bit() const override { return true; }

    // The plain 16-bit computation of the rule, written here (never a path of the library):
    // products of the stored values summed in f32, softmax in f32, P rounded to bf16 when V
    // is bf16, P V summed in f32, the output rounded once to out_type; its error against
    // exact() is the yardstick for the reference and the SIMD paths alike.
    double plain_error() const override {
        const std::vector<double> want = exact();
        const std::vector<float> plain = plain_outputs();
        return max_rel_error(plain.data(), want.data(), want.size());
    }

    double ulp_floor() const override {
        return 2.0 * (o_.out_type == ATTN_DTYPE_F32 ? 0x1p-23 : o_.out_type == ATTN_DTYPE_BF16 ? 0x1p-7 : 0x1p-10);
    }

private:
    std::vector<float> plain_outputs() const {
        const int64_t D = o_.dim, Lk = o_.len_kv, group = o_.heads_q / o_.heads_kv;
        auto at = [](attn_layout l, int64_t b, int64_t h, int64_t s) {
            return b * l.batch + h * l.head + s * l.seq;
        };
        std::vector<float> out, s(static_cast<size_t>(Lk)), acc(static_cast<size_t>(D));
        for (int64_t b = 0; b < o_.batch; ++b)
            for (int64_t h = 0; h < o_.heads_q; ++h)
                for (int64_t i = 0; i < o_.len_q; ++i) {
                    const float *qi = q_.data() + at(d_.q, b, h, i);
                    float m = -INFINITY;
                    for (int64_t j = 0; j < Lk; ++j) {
                        const int64_t last = o_.causal == ATTN_CAUSAL_TOP_LEFT ? i
                                             : o_.causal == ATTN_CAUSAL_BOTTOM_RIGHT ? i + Lk - o_.len_q
                                                                                   : Lk - 1;
                        const float *kj = k_.data() + at(d_.k, b, h / group, j);
                        float dot = 0.0f;
                        for (int64_t x = 0; x < D; ++x) dot += qi[x] * kj[x];
                        s[size_t(j)] = d_.scale * dot;
                        if (o_.mask) s[size_t(j)] += mask_[size_t(((b * o_.heads_q + h) * o_.len_q + i) * Lk + j)];
                        if (j > last) s[size_t(j)] = -INFINITY;
                        m = std::fmax(m, s[size_t(j)]);
                    }
                    std::fill(acc.begin(), acc.end(), 0.0f);
                    if (m != -INFINITY) {
                        float sum = 0.0f;
                        for (int64_t j = 0; j < Lk; ++j) sum += std::exp(s[size_t(j)] - m);
                        for (int64_t j = 0; j < Lk; ++j) {
                            float w = std::exp(s[size_t(j)] - m) / sum;
                            if (o_.kv_type == ATTN_DTYPE_BF16) w = stored_value(w, ATTN_DTYPE_BF16);
                            const float *vj = v_.data() + at(d_.v, b, h / group, j);
                            for (int64_t x = 0; x < D; ++x) acc[size_t(x)] += w * vj[x];
                        }
                    }
                    for (int64_t x = 0; x < D; ++x) out.push_back(stored_value(acc[size_t(x)], o_.out_type));
                }
        return out;
    }

    std::vector<double> oracle(bool round_p) const {
        std::vector<double> out(size_t(o_.batch * o_.heads_q * o_.len_q * o_.dim));
        const auto q = to_double(q_), k = to_double(k_), v = to_double(v_);
        sdpa_exact(d_, q.data(), k.data(), v.data(), out.data(), nullptr, nullptr, round_p);
        return out;
    }

    typed_options o_;
    attn_sdpa_desc d_;
    std::vector<float> q_, k_, v_, mask_;  // the stored values, widened
    std::vector<uint8_t> q16_, k16_, v16_;
};

}  // namespace

void add_sdpa_typed_cases(sweep_size s, std::vector<case_spec> &out) {
    std::vector<typed_options> shapes = {
        {1, 4, 2, 97, 97, 64, ATTN_CAUSAL_TOP_LEFT, false, false},
        {1, 8, 2, 1, 1500, 128, ATTN_CAUSAL_NONE, false, false},
    };
    if (s == sweep_size::full) {
        shapes.push_back({2, 2, 2, 130, 300, 40, ATTN_CAUSAL_BOTTOM_RIGHT, true, true});
        shapes.push_back({1, 4, 4, 3, 2049, 96, ATTN_CAUSAL_BOTTOM_RIGHT, false, true});
    }
    const attn_dtype types[] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    for (typed_options o : shapes)
        for (attn_dtype qt : types)
            for (attn_dtype kvt : types)
                for (attn_dtype ot : types) {
                    if (qt == ATTN_DTYPE_F32 && kvt == ATTN_DTYPE_F32 && ot == ATTN_DTYPE_F32) continue;
                    if (s == sweep_size::quick && !(qt == kvt || qt == ATTN_DTYPE_F32)) continue;
                    o.q_type = qt;
                    o.kv_type = kvt;
                    o.out_type = ot;
                    std::string label = format("B%lld H%lld/%lld L%lldx%lld D%lld", (long long)o.batch,
                                               (long long)o.heads_q, (long long)o.heads_kv,
                                               (long long)o.len_q, (long long)o.len_kv, (long long)o.dim);
                    if (o.causal == ATTN_CAUSAL_TOP_LEFT) label += " causal=tl";
                    if (o.causal == ATTN_CAUSAL_BOTTOM_RIGHT) label += " causal=br";
                    if (o.mask) label += " mask";
                    if (o.bshd) label += " bshd";
                    label += format(" q %s kv %s out %s", type_name(qt), type_name(kvt), type_name(ot));
                    out.push_back({"sdpa_typed", label, [o] { return std::make_unique<sdpa_typed_problem>(o); }});
                }
}

}  // namespace attn_compare
