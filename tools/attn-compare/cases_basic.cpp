// Sweeps for the building blocks: matrix product, softmax, and merging partial attention.
#include <cmath>
#include <cstdio>
#include <limits>

#include "compare.hpp"

namespace attn_compare {

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------
// C[m,n] = alpha op(A) op(B) + beta C, with leading dimensions padded by `pad`.
struct gemm_problem final : problem {
    attn_trans ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    std::vector<float> a, b, c0;

    gemm_problem(attn_trans ta_, attn_trans tb_, int64_t m_, int64_t n_, int64_t k_, float alpha_,
                 float beta_, int64_t pad, uint32_t seed)
        : ta(ta_), tb(tb_), m(m_), n(n_), k(k_), alpha(alpha_), beta(beta_) {
        lda = (ta == ATTN_NO_TRANS ? k : m) + pad;
        ldb = (tb == ATTN_NO_TRANS ? n : k) + pad;
        ldc = n + pad;
        a = random_values(size_t((ta == ATTN_NO_TRANS ? m : k) * lda), seed);
        b = random_values(size_t((tb == ATTN_NO_TRANS ? k : n) * ldb), seed + 1);
        // With beta == 0 the API promises C is not read: seed it with NaN to prove it.
        c0 = beta == 0.0f ? std::vector<float>(size_t(m * ldc), std::nanf(""))
                          : random_values(size_t(m * ldc), seed + 2);
    }

    attn_status run(attn_context *ctx, std::vector<float> &outputs) const override {
        std::vector<float> c = c0;
        attn_status st = attn_gemm_f32(ctx, ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb,
                                       beta, c.data(), ldc);
        outputs.clear();
        for (int64_t i = 0; i < m; ++i)
            outputs.insert(outputs.end(), c.begin() + i * ldc, c.begin() + i * ldc + n);
        return st;
    }

    std::vector<double> exact() const override {
        std::vector<double> c = to_double(c0);
        gemm_exact(ta, tb, m, n, k, alpha, to_double(a).data(), lda, to_double(b).data(), ldb,
                   beta, c.data(), ldc);
        std::vector<double> out;
        for (int64_t i = 0; i < m; ++i)
            out.insert(out.end(), c.begin() + i * ldc, c.begin() + i * ldc + n);
        return out;
    }
};

void add_gemm(std::vector<case_spec> &out, attn_trans ta, attn_trans tb, int64_t m, int64_t n,
              int64_t k, float alpha, float beta, int64_t pad) {
    const uint32_t seed = uint32_t(out.size()) * 7919u + 11u;
    std::string shape = format("m%lld n%lld k%lld %c%c", (long long)m, (long long)n, (long long)k,
                               ta == ATTN_TRANS ? 'T' : 'N', tb == ATTN_TRANS ? 'T' : 'N');
    if (alpha != 1.0f || beta != 0.0f) shape += format(" alpha=%g beta=%g", alpha, beta);
    if (pad) shape += format(" ld+%lld", (long long)pad);
    out.push_back({"gemm", shape, [=] {
                       return std::make_unique<gemm_problem>(ta, tb, m, n, k, alpha, beta, pad,
                                                             seed);
                   }});
}

// ---------------------------------------------------------------------------------------
// y = softmax(scale x) row by row, in one of several input flavours.
enum class softmax_input { uniform, in_place, with_neg_inf, huge };

struct softmax_problem final : problem {
    int64_t rows, cols, ldx;
    float scale;
    softmax_input kind;
    std::vector<float> x;

    softmax_problem(int64_t rows_, int64_t cols_, float scale_, int64_t pad, softmax_input kind_,
                    uint32_t seed)
        : rows(rows_), cols(cols_), ldx(cols_ + pad), scale(scale_), kind(kind_) {
        const float range = kind == softmax_input::huge ? 1e30f : 8.0f;
        x = random_values(size_t(rows * ldx), seed, -range, range);
        if (kind == softmax_input::with_neg_inf) {
            // every third entry masked, and the last row entirely masked
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < cols; ++j)
                    if ((i + j) % 3 == 0 || i == rows - 1) x[size_t(i * ldx + j)] = neg_inf;
        }
    }

    attn_status run(attn_context *ctx, std::vector<float> &outputs) const override {
        std::vector<float> y;
        attn_status st;
        if (kind == softmax_input::in_place) {
            y = x;
            st = attn_softmax_f32(ctx, rows, cols, scale, y.data(), ldx, y.data(), ldx);
        } else {
            y.assign(size_t(rows * ldx), 0.0f);
            st = attn_softmax_f32(ctx, rows, cols, scale, x.data(), ldx, y.data(), ldx);
        }
        outputs.clear();
        for (int64_t i = 0; i < rows; ++i)
            outputs.insert(outputs.end(), y.begin() + i * ldx, y.begin() + i * ldx + cols);
        return st;
    }

    std::vector<double> exact() const override {
        std::vector<double> y(size_t(rows * cols));
        softmax_exact(rows, cols, scale, to_double(x).data(), ldx, y.data());
        return y;
    }
};

void add_softmax(std::vector<case_spec> &out, int64_t rows, int64_t cols, float scale,
                 int64_t pad, softmax_input kind) {
    const uint32_t seed = uint32_t(out.size()) * 7919u + 13u;
    static const char *const names[] = {"", " in-place", " -inf", " |x|<1e30"};
    std::string shape = format("%lldx%lld scale=%g%s", (long long)rows, (long long)cols, scale,
                               names[int(kind)]);
    if (pad) shape += format(" ld+%lld", (long long)pad);
    out.push_back({"softmax", shape, [=] {
                       return std::make_unique<softmax_problem>(rows, cols, scale, pad, kind,
                                                                seed);
                   }});
}

// ---------------------------------------------------------------------------------------
// Merge of `parts` partial results. Row 0 has every part fully masked (lse -inf), row 1
// has its first part masked; the rest are ordinary.
struct merge_problem final : problem {
    int64_t parts, rows, dim_v;
    bool want_lse;
    std::vector<std::vector<float>> outs, lses;

    merge_problem(int64_t parts_, int64_t rows_, int64_t dim_v_, bool want_lse_, uint32_t seed)
        : parts(parts_), rows(rows_), dim_v(dim_v_), want_lse(want_lse_) {
        for (int64_t p = 0; p < parts; ++p) {
            outs.push_back(random_values(size_t(rows * dim_v), seed + uint32_t(2 * p)));
            lses.push_back(random_values(size_t(rows), seed + uint32_t(2 * p + 1), -6.0f, 6.0f));
            if (rows > 0) {
                lses[p][0] = neg_inf;
                std::fill(outs[p].begin(), outs[p].begin() + dim_v, 0.0f);
            }
        }
        if (rows > 1) {
            lses[0][1] = neg_inf;
            std::fill(outs[0].begin() + dim_v, outs[0].begin() + 2 * dim_v, 0.0f);
        }
    }

    attn_status run(attn_context *ctx, std::vector<float> &outputs) const override {
        std::vector<const float *> out_ptrs, lse_ptrs;
        for (int64_t p = 0; p < parts; ++p) {
            out_ptrs.push_back(outs[p].data());
            lse_ptrs.push_back(lses[p].data());
        }
        std::vector<float> out(size_t(rows * dim_v)), lse(static_cast<size_t>(rows));
        attn_status st = attn_merge_f32(ctx, parts, rows, dim_v, out_ptrs.data(), lse_ptrs.data(),
                                        out.data(), want_lse ? lse.data() : nullptr);
        outputs = out;
        if (want_lse) outputs.insert(outputs.end(), lse.begin(), lse.end());
        return st;
    }

    std::vector<double> exact() const override {
        std::vector<std::vector<double>> douts, dlses;
        for (int64_t p = 0; p < parts; ++p) {
            douts.push_back(to_double(outs[p]));
            dlses.push_back(to_double(lses[p]));
        }
        std::vector<double> out(size_t(rows * dim_v)), lse(static_cast<size_t>(rows));
        merge_exact(parts, rows, dim_v, douts, dlses, out.data(), lse.data());
        if (want_lse) out.insert(out.end(), lse.begin(), lse.end());
        return out;
    }
};

void add_merge(std::vector<case_spec> &out, int64_t parts, int64_t rows, int64_t dim_v,
               bool want_lse) {
    const uint32_t seed = uint32_t(out.size()) * 7919u + 17u;
    std::string shape = format("parts%lld rows%lld D%lld%s", (long long)parts, (long long)rows,
                               (long long)dim_v, want_lse ? "" : " lse=null");
    out.push_back({"merge", shape, [=] {
                       return std::make_unique<merge_problem>(parts, rows, dim_v, want_lse, seed);
                   }});
}

}  // namespace

void add_gemm_cases(sweep_size s, std::vector<case_spec> &out) {
    const attn_trans N = ATTN_NO_TRANS, T = ATTN_TRANS;
    for (attn_trans ta : {N, T})
        for (attn_trans tb : {N, T}) add_gemm(out, ta, tb, 37, 29, 23, 1.0f, 0.0f, 0);
    add_gemm(out, N, N, 1, 1, 1, 1.0f, 0.0f, 0);
    add_gemm(out, N, T, 64, 64, 64, 0.5f, 1.5f, 3);
    if (s == sweep_size::quick) return;
    for (attn_trans ta : {N, T})
        for (attn_trans tb : {N, T}) add_gemm(out, ta, tb, 127, 255, 65, 1.0f, 0.0f, 0);
    add_gemm(out, N, N, 1, 1025, 256, 1.0f, 0.0f, 0);
    add_gemm(out, N, T, 1025, 1, 256, 1.0f, 0.0f, 0);
    add_gemm(out, T, N, 257, 129, 1025, -2.0f, 0.25f, 5);
    add_gemm(out, N, N, 512, 512, 512, 1.0f, 0.0f, 0);
    add_gemm(out, N, T, 1025, 1025, 64, 1.0f, 1.0f, 0);
    add_gemm(out, N, N, 1023, 1025, 257, 1.0f, 0.0f, 0);
    add_gemm(out, T, T, 333, 1000, 777, 0.75f, -1.0f, 1);
}

void add_softmax_cases(sweep_size s, std::vector<case_spec> &out) {
    add_softmax(out, 3, 17, 1.0f, 0, softmax_input::uniform);
    add_softmax(out, 9, 65, 0.125f, 2, softmax_input::in_place);
    add_softmax(out, 7, 33, 1.0f, 0, softmax_input::with_neg_inf);
    add_softmax(out, 5, 40, 1.0f, 0, softmax_input::huge);
    if (s == sweep_size::quick) return;
    add_softmax(out, 1, 1, 1.0f, 0, softmax_input::uniform);
    add_softmax(out, 64, 1025, 0.125f, 0, softmax_input::uniform);
    add_softmax(out, 257, 1024, 1.0f, 7, softmax_input::in_place);
    add_softmax(out, 1025, 1025, 0.0625f, 0, softmax_input::uniform);
    add_softmax(out, 100, 513, 1.0f, 0, softmax_input::with_neg_inf);
    add_softmax(out, 33, 1025, 1.0f, 0, softmax_input::huge);
}

void add_merge_cases(sweep_size s, std::vector<case_spec> &out) {
    add_merge(out, 2, 17, 64, true);
    add_merge(out, 3, 9, 33, false);
    if (s == sweep_size::quick) return;
    add_merge(out, 1, 65, 128, true);
    add_merge(out, 8, 1025, 64, true);
    add_merge(out, 4, 257, 256, false);
}

}  // namespace attn_compare
