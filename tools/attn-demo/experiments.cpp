// The figure of section E, as two tables:
//  (1) rotate token 3's query through the plane of the keys: only row 3 of A moves;
//  (2) embed the example in d dimensions so that dot products grow like sqrt(d): with the
//      sqrt(d_k) division A does not change, without it row 3 collapses onto token 3.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "demo.hpp"

namespace demo {

namespace {

std::string shades(const matrix &a, int64_t i) {
    std::string s;
    for (int64_t j = 0; j < a.cols; ++j) s += std::string(3, shade(a.at(i, j))) + '|';
    return "|" + s;
}

// Largest |a - b| over rows [0, rows) of two matrices of the same shape.
double max_change(const matrix &a, const matrix &b, int64_t rows) {
    double m = 0;
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < a.cols; ++j)
            m = std::max(m, std::fabs(static_cast<double>(a.at(i, j)) - b.at(i, j)));
    return m;
}

// x [n, 2] -> [n, d]: each coordinate repeated d/2 times and scaled by (d/2)^(-1/4), so that
// x'_i . y'_j = (d/2) (d/2)^(-1/2) x_i . y_j = sqrt(d/2) x_i . y_j.
matrix embed(const matrix &x, int64_t d) {
    const int64_t half = d / 2;
    const float c = static_cast<float>(std::pow(static_cast<double>(half), -0.25));
    matrix e(x.rows, d);
    for (int64_t i = 0; i < x.rows; ++i)
        for (int64_t t = 0; t < d; ++t) e.at(i, t) = c * x.at(i, t < half ? 0 : 1);
    return e;
}

}  // namespace

bool rotation_experiment(attn_context *ctx, const options &opt) {
    const float scale = opt.no_scale ? 1.0f : 1.0f / std::sqrt(2.0f);
    const matrix k = example_qk(), v = example_v();
    const matrix k_before = k, v_before = v;
    matrix q = example_qk();
    const attention_result base = attention(ctx, q, k, v, scale, ATTN_CAUSAL_NONE);

    std::printf("\n== E. Experiment 1: rotate token 3's query q3 = (1, 1) in the keys' plane ==\n");
    std::printf("K and V stay fixed; scale %s. Row 3 of A per angle, and the largest change\n"
                "of rows 1 and 2 of A versus the unrotated A.\n\n",
                fixed4(scale).c_str());
    std::printf("  %5s   %-18s   %-22s   %-13s   %s\n", "angle", "q3 = (x, y)", "row 3 of A",
                " k1  k2  k3", "rows 1-2 change");

    const int64_t steps = static_cast<int64_t>(std::floor(360.0 / opt.step_deg + 1e-9));
    double worst = 0;
    for (int64_t s = 0; s <= steps; ++s) {
        const double deg = static_cast<double>(s) * opt.step_deg;
        const double rad = deg * std::acos(-1.0) / 180.0;
        const double c = std::cos(rad), sn = std::sin(rad);
        // q3(theta) = R(theta) (1, 1)
        q.at(2, 0) = static_cast<float>(c - sn);
        q.at(2, 1) = static_cast<float>(sn + c);
        const attention_result r = attention(ctx, q, k, v, scale, ATTN_CAUSAL_NONE);
        const double change = max_change(r.weights, base.weights, 2);
        worst = std::max(worst, change);
        char change_text[32];
        if (change == 0.0)
            std::snprintf(change_text, sizeof change_text, "0");
        else
            std::snprintf(change_text, sizeof change_text, "%.3g", change);
        char q3[48];
        std::snprintf(q3, sizeof q3, "(%7s, %7s)", fixed4(q.at(2, 0)).c_str(),
                      fixed4(q.at(2, 1)).c_str());
        std::printf("  %5.1f   %-18s   [", deg, q3);
        print_row(r.weights, 2);
        std::printf("]   %s   %s\n", shades(r.weights, 2).c_str(), change_text);
    }

    const bool kv_same = k.data == k_before.data && v.data == v_before.data;
    std::printf("\n  rows 1 and 2 of A changed by exactly 0 at every angle: %s\n",
                yes_no(worst == 0.0));
    std::printf("  K and V are the same after every call: %s\n", yes_no(kv_same));
    std::printf("  verdict: only row 3 responds - the query belongs to its own token; keys and\n"
                "  values do not move.\n");
    return worst == 0.0 && kv_same;
}

bool dimension_experiment(attn_context *ctx, const options &opt) {
    const matrix qk = example_qk(), v = example_v();
    const matrix printed_row3(1, 3, {0.2483f, 0.2483f, 0.5035f});

    std::printf("\n== E. Experiment 2: raise the dimension d of queries and keys ==\n");
    std::printf("Each coordinate is repeated d/2 times and scaled by (d/2)^(-1/4), so every\n"
                "q.k grows like sqrt(d) (q3.k3 = 2 sqrt(d/2)). Row 3 of A with scale\n"
                "1/sqrt(d) (the division) and with scale 1 (no division).\n\n");
    std::printf("  %5s  %7s  %8s   %-22s  %-13s   %-22s  %s\n", "d", "q3.k3", "/sqrt(d)",
                "with division", " k1  k2  k3", "without division", " k1  k2  k3");

    bool invariant = true;
    float first_w33 = 0, last_w33 = 0;
    for (size_t n = 0; n < opt.dims.size(); ++n) {
        const int64_t d = opt.dims[n];
        const matrix qe = embed(qk, d);
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        const matrix raw = scores(ctx, qe, qe, 1.0f);
        const matrix scaled = scores(ctx, qe, qe, scale);
        const attention_result with = attention(ctx, qe, qe, v, scale, ATTN_CAUSAL_NONE);
        const attention_result without = attention(ctx, qe, qe, v, 1.0f, ATTN_CAUSAL_NONE);

        matrix row3(1, 3);
        for (int64_t j = 0; j < 3; ++j) row3.at(0, j) = with.weights.at(2, j);
        const bool same = matches_printed(row3, printed_row3);
        invariant = invariant && same;
        if (n == 0) first_w33 = without.weights.at(2, 2);
        last_w33 = without.weights.at(2, 2);

        std::printf("  %5lld  %7.3f  %8s   [", static_cast<long long>(d), raw.at(2, 2),
                    fixed4(scaled.at(2, 2)).c_str());
        print_row(with.weights, 2);
        std::printf("]  %s   [", shades(with.weights, 2).c_str());
        print_row(without.weights, 2);
        std::printf("]  %s\n", shades(without.weights, 2).c_str());
    }

    const long long d_first = static_cast<long long>(opt.dims.front());
    const long long d_last = static_cast<long long>(opt.dims.back());
    const bool collapsed = fixed4(last_w33) == "1.0000";
    std::printf("\n  with the division, row 3 is [0.2483 0.2483 0.5035] at every d: %s\n",
                yes_no(invariant));
    std::printf("  without it, token 3's weight goes %s (d=%lld) -> %s (d=%lld):\n    %s\n",
                fixed4(first_w33).c_str(), d_first, fixed4(last_w33).c_str(), d_last,
                collapsed ? "the row collapsed onto token 3 (one-hot: the softmax saturated)"
                          : "not one-hot yet at this d (raise it with --dims)");
    std::printf("  verdict: %s\n",
                !invariant ? "the scaled row 3 moved with d - not what the document shows"
                : collapsed ? "dividing by sqrt(d_k) keeps A the same at every dimension;\n"
                              "  without it the softmax saturates"
                            : "dividing by sqrt(d_k) keeps A the same at every dimension");
    return invariant;
}

}  // namespace demo
