// The corpus of attn_sdpa_f32, attn_sdpa (every type) and attn_sdpa_backward_f32.
#include <cmath>

#include "problem.hpp"

namespace attn_fingerprint {
namespace {

const attn_dtype all_types[] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
const char *const type_names[] = {"f32", "bf16", "f16"};

template <class T>
const T *as(const std::vector<unsigned char> &v) { return reinterpret_cast<const T *>(v.data()); }

}  // namespace

std::vector<sdpa_case> sdpa_cases() {
    std::vector<sdpa_case> all;
    all.push_back(shape("plain", 1, 2, 2, 67, 67, 64, 64));
    auto c = shape("mask_causal_top_left", 2, 2, 2, 70, 90, 40, 40);
    c.mask = true, c.causal = ATTN_CAUSAL_TOP_LEFT, all.push_back(c);
    c = shape("causal_bottom_right", 1, 2, 2, 40, 100, 32, 32);
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, all.push_back(c);
    c = shape("kv_len_bottom_right_kv_len", 2, 3, 3, 50, 80, 48, 48);
    c.kv_len = true, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN, c.lse = true, all.push_back(c);
    c = shape("gqa_dim_v_weights_lse", 2, 4, 2, 70, 65, 40, 24);
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.weights = c.lse = true, all.push_back(c);
    c = shape("dropout_mask_weights", 2, 2, 2, 45, 77, 32, 32);
    c.dropout = c.mask = c.weights = c.lse = true, all.push_back(c);
    c = shape("window", 1, 2, 2, 130, 130, 64, 64);
    c.window_left = 17, c.window_right = 5, all.push_back(c);
    c = shape("window_causal", 1, 2, 1, 130, 150, 64, 64);
    c.window_left = 9, c.causal = ATTN_CAUSAL_TOP_LEFT, c.lse = true, all.push_back(c);
    c = shape("softcap_alibi_scale", 1, 4, 2, 70, 90, 64, 64);
    c.softcap = 5.0f, c.alibi = true, c.scale = 0.3f, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    c.weights = true, all.push_back(c);
    c = shape("sinks_kv_len", 2, 2, 2, 33, 70, 40, 40);
    c.sinks = c.kv_len = c.weights = c.lse = true, all.push_back(c);
    c = shape("paged", 2, 4, 2, 20, 100, 64, 64);
    c.page_size = 16, c.kv_len = true, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN, all.push_back(c);
    all.push_back(shape("decode_split", 1, 8, 2, 1, 1100, 64, 64));
    c = shape("decode_features_paged", 2, 4, 1, 1, 1500, 64, 64);
    c.sinks = c.kv_len = c.alibi = c.lse = true, c.softcap = 8.0f, c.window_left = 600;
    c.page_size = 64, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN, all.push_back(c);
    c = shape("decode_dropout_weights", 1, 2, 2, 1, 1100, 64, 64);
    c.dropout = c.weights = true, all.push_back(c);
    c = shape("bshd_causal", 2, 2, 2, 70, 70, 64, 64);
    c.bshd = true, c.causal = ATTN_CAUSAL_TOP_LEFT, all.push_back(c);
    c = shape("few_rows", 2, 2, 2, 3, 300, 64, 64);
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.lse = true, all.push_back(c);
    c = shape("negative_scale_mask", 1, 1, 1, 20, 40, 16, 16);
    c.scale = -0.7f, c.mask = true, c.lse = true, all.push_back(c);
    return all;
}

void corpus_sdpa_f32(attn_context *ctx, record &rec) {
    for (const auto &c : sdpa_cases()) {
        rec.begin("attn_sdpa_f32", c.name);
        problem p(c, ATTN_DTYPE_F32, ATTN_DTYPE_F32, ATTN_DTYPE_F32);
        rec.status(attn_sdpa_f32(ctx, &p.d, as<float>(p.q), as<float>(p.k), as<float>(p.v),
                                 reinterpret_cast<float *>(p.out.data())));
        p.record_outputs(rec);
        rec.end();
    }
}

// Every combination of types on a prefill and a decoding shape; the score features on each
// 16-bit cache.
void corpus_sdpa_typed(attn_context *ctx, record &rec) {
    std::vector<sdpa_case> shapes;
    auto c = shape("prefill_causal", 1, 2, 1, 70, 70, 64, 64);
    c.causal = ATTN_CAUSAL_TOP_LEFT, c.lse = true, shapes.push_back(c);
    shapes.push_back(shape("decode", 1, 8, 2, 1, 1100, 64, 64));
    for (const auto &s : shapes)
        for (int qi = 0; qi < 3; ++qi)
            for (int ki = 0; ki < 3; ++ki)
                for (int oi = 0; oi < 3; ++oi) {
                    rec.begin("attn_sdpa", s.name + "_" + type_names[qi] + "_" + type_names[ki] +
                                               "_" + type_names[oi]);
                    problem p(s, all_types[qi], all_types[ki], all_types[oi]);
                    rec.status(attn_sdpa(ctx, &p.d, p.q.data(), p.k.data(), p.v.data(), p.out.data()));
                    p.record_outputs(rec);
                    rec.end();
                }
    for (const auto &f : sdpa_cases())
        for (int ki = 1; ki < 3; ++ki)
            for (int qi = 0; qi < 2; ++qi) {
                rec.begin("attn_sdpa", f.name + "_q" + type_names[qi] + "_kv" + type_names[ki]);
                problem p(f, all_types[qi], all_types[ki], all_types[qi]);
                rec.status(attn_sdpa(ctx, &p.d, p.q.data(), p.k.data(), p.v.data(), p.out.data()));
                p.record_outputs(rec);
                rec.end();
            }
}

// Each case's forward on the same context gives out and lse; the backward then runs with that
// lse and without it (recomputed). Paged K/V is refused (the status of one case is recorded).
void corpus_sdpa_backward(attn_context *ctx, record &rec) {
    for (auto c : sdpa_cases()) {
        if (c.len_kv > 500) c.len_kv = 300;  // decoding shapes: the backward at a smaller length
        if (c.name != "paged") c.page_size = 0;  // pages: one refused case is enough
        rec.begin("attn_sdpa_backward_f32", c.name);
        problem p(c, ATTN_DTYPE_F32, ATTN_DTYPE_F32, ATTN_DTYPE_F32);
        std::vector<float> lse(size_t(c.batch * c.heads_q * c.len_q), 0.0f);
        p.d.lse = lse.data();
        p.d.weights = nullptr;
        rec.status(attn_sdpa_f32(ctx, &p.d, as<float>(p.q), as<float>(p.k), as<float>(p.v),
                                 reinterpret_cast<float *>(p.out.data())));
        rng r(77);
        const auto dout = draw_f32(r, p.out_elems);
        for (int with_lse = 1; with_lse >= 0; --with_lse) {
            std::vector<float> dq(size_t(p.q_elems), 9.0f), dk(size_t(p.k_elems), 9.0f),
                dv(size_t(p.v_elems), 9.0f);
            for (auto &x : p.dsinks) x = 9.0f;
            rec.status(attn_sdpa_backward_f32(ctx, &p.d, as<float>(p.q), as<float>(p.k),
                                              as<float>(p.v), as<float>(p.out), dout.data(),
                                              with_lse ? lse.data() : nullptr, dq.data(),
                                              dk.data(), dv.data()));
            rec.add(dq);
            rec.add(dk);
            rec.add(dv);
            rec.add(p.dsinks);
        }
        rec.end();
    }
}

}  // namespace attn_fingerprint
