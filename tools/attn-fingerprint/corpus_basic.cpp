// The corpus of attn_gemm_f32, attn_gemm, attn_softmax_f32, attn_convert and attn_merge_f32.
#include <cmath>
#include <limits>

#include "fingerprint.hpp"

namespace attn_fingerprint {
namespace {

const attn_dtype all_types[] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
const char *const type_names[] = {"f32", "bf16", "f16"};

struct gemm_shape {
    attn_trans ta, tb;
    int64_t m, n, k;
    float alpha, beta;
};

const gemm_shape gemm_shapes[] = {
    {ATTN_NO_TRANS, ATTN_NO_TRANS, 37, 45, 29, 1.0f, 0.0f},
    {ATTN_NO_TRANS, ATTN_TRANS, 70, 33, 131, 0.5f, 1.0f},
    {ATTN_TRANS, ATTN_NO_TRANS, 17, 100, 64, -1.0f, 0.25f},
    {ATTN_TRANS, ATTN_TRANS, 96, 65, 40, 2.0f, 0.0f},
    {ATTN_NO_TRANS, ATTN_NO_TRANS, 5, 7, 0, 1.0f, 0.5f},
};

std::string shape_name(const gemm_shape &s) {
    return std::string(s.ta == ATTN_TRANS ? "T" : "N") + (s.tb == ATTN_TRANS ? "T" : "N") +
           std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

void one_gemm(attn_context *ctx, record &rec, const gemm_shape &s, int ai, int bi, int ci,
              bool typed) {
    rng r(1000 + uint64_t(s.m) * 7 + uint64_t(ai * 9 + bi * 3 + ci));
    const int64_t lda = (s.ta == ATTN_TRANS ? s.m : s.k) + 3;
    const int64_t ldb = (s.tb == ATTN_TRANS ? s.k : s.n) + 1;
    const int64_t ldc = s.n + 2;
    const int64_t a_rows = s.ta == ATTN_TRANS ? s.k : s.m, b_rows = s.tb == ATTN_TRANS ? s.n : s.k;
    auto a = draw(r, all_types[ai], a_rows * lda + 1);
    auto b = draw(r, all_types[bi], b_rows * ldb + 1);
    auto c = draw(r, all_types[ci], s.m * ldc);
    attn_status st;
    if (typed)
        st = attn_gemm(ctx, s.ta, s.tb, s.m, s.n, s.k, s.alpha, a.data(), all_types[ai], lda,
                       b.data(), all_types[bi], ldb, s.beta, c.data(), all_types[ci], ldc);
    else
        st = attn_gemm_f32(ctx, s.ta, s.tb, s.m, s.n, s.k, s.alpha,
                           reinterpret_cast<const float *>(a.data()), lda,
                           reinterpret_cast<const float *>(b.data()), ldb, s.beta,
                           reinterpret_cast<float *>(c.data()), ldc);
    rec.status(st);
    rec.add(c);
}

void corpus_softmax(attn_context *ctx, record &rec) {
    const float scales[] = {1.0f, 0.125f, -0.5f};
    for (float scale : scales)
        for (int in_place = 0; in_place < 2; ++in_place) {
            rec.begin("attn_softmax_f32", "scale" + std::to_string(scale) +
                                              (in_place ? "_in_place" : ""));
            rng r(2000 + uint64_t(in_place));
            const int64_t rows = 9, cols = 133, ld = 140;
            auto x = draw_f32(r, rows * ld, -8.0f, 8.0f);
            x[3] = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < cols; ++j) x[size_t(4 * ld + j)] = x[3];  // a masked row
            std::vector<float> y(size_t(rows * ld), 7.0f);
            float *dst = in_place ? x.data() : y.data();
            rec.status(attn_softmax_f32(ctx, rows, cols, scale, x.data(), ld, dst, ld));
            rec.add(in_place ? x : y);
            rec.end();
        }
}

// Every pair of types over patterns that include NaNs, infinities, subnormals and zeros.
void corpus_convert(attn_context *ctx, record &rec) {
    for (int si = 0; si < 3; ++si)
        for (int di = 0; di < 3; ++di) {
            rec.begin("attn_convert", std::string(type_names[si]) + "_to_" + type_names[di]);
            rng r(3000 + uint64_t(si * 3 + di));
            const int64_t n = 1531;
            const size_t ss = attn_dtype_size(all_types[si]);
            std::vector<unsigned char> src(size_t(n) * ss);
            for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(r.bits() >> 56);
            std::vector<unsigned char> dst(size_t(n) * attn_dtype_size(all_types[di]), 0x5a);
            rec.status(attn_convert(ctx, n, src.data(), all_types[si], dst.data(), all_types[di]));
            rec.add(dst);
            rec.end();
        }
}

void corpus_merge(attn_context *ctx, record &rec) {
    for (int with_lse = 0; with_lse < 2; ++with_lse) {
        rec.begin("attn_merge_f32", with_lse ? "with_lse" : "no_lse");
        rng r(4000);
        const int64_t parts = 3, rows = 19, dim = 40;
        std::vector<std::vector<float>> outs, lses;
        std::vector<const float *> po, pl;
        for (int64_t p = 0; p < parts; ++p) {
            outs.push_back(draw_f32(r, rows * dim));
            lses.push_back(draw_f32(r, rows, -4.0f, 4.0f));
            lses.back()[size_t(p)] = -std::numeric_limits<float>::infinity();
            if (p < 2) lses.back()[5] = -std::numeric_limits<float>::infinity();
        }
        for (int64_t p = 0; p < parts; ++p) {
            po.push_back(outs[size_t(p)].data());
            pl.push_back(lses[size_t(p)].data());
        }
        std::vector<float> out(size_t(rows * dim), 3.0f), lse(size_t(rows), 3.0f);
        rec.status(attn_merge_f32(ctx, parts, rows, dim, po.data(), pl.data(), out.data(),
                                  with_lse ? lse.data() : nullptr));
        rec.add(out);
        rec.add(lse);
        rec.end();
    }
}

}  // namespace

void corpus_gemm(attn_context *ctx, record &rec) {
    for (const auto &s : gemm_shapes) {
        rec.begin("attn_gemm_f32", shape_name(s));
        one_gemm(ctx, rec, s, 0, 0, 0, false);
        rec.end();
    }
    for (const auto &s : gemm_shapes)
        for (int ai = 0; ai < 3; ++ai)
            for (int bi = 0; bi < 3; ++bi)
                for (int ci = 0; ci < 3; ++ci) {
                    rec.begin("attn_gemm", shape_name(s) + "_" + type_names[ai] + "_" +
                                               type_names[bi] + "_" + type_names[ci]);
                    one_gemm(ctx, rec, s, ai, bi, ci, true);
                    rec.end();
                }
}

void corpus_softmax_convert_merge(attn_context *ctx, record &rec) {
    corpus_softmax(ctx, rec);
    corpus_convert(ctx, rec);
    corpus_merge(ctx, rec);
}

}  // namespace attn_fingerprint
