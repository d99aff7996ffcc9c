// Sections D and F of the source document, computed by the library and compared with the
// matrices the document prints (to its 4 decimals).
#include <cmath>
#include <cstdio>

#include "demo.hpp"

namespace demo {

matrix example_qk() { return matrix(3, 2, {1, 0, 0, 1, 1, 1}); }
matrix example_v() { return matrix(3, 2, {1, 0, 0, 2, 3, 1}); }

namespace {

// The matrices as the document prints them.
matrix printed_scores() { return matrix(3, 3, {1, 0, 1, 0, 1, 1, 1, 1, 2}); }
matrix printed_scaled() {
    return matrix(3, 3, {0.7071f, 0, 0.7071f, 0, 0.7071f, 0.7071f, 0.7071f, 0.7071f, 1.4142f});
}
matrix printed_a() {
    return matrix(3, 3, {0.4011f, 0.1978f, 0.4011f, 0.1978f, 0.4011f, 0.4011f, 0.2483f,
                         0.2483f, 0.5035f});
}
matrix printed_out() { return matrix(3, 2, {1.6044f, 0.7967f, 1.4011f, 1.2033f, 1.7587f, 1.0f}); }
matrix printed_a_causal() {
    return matrix(3, 3, {1.0f, 0, 0, 0.3302f, 0.6698f, 0, 0.2483f, 0.2483f, 0.5035f});
}

double round4(double x) { return std::round(x * 1e4) / 1e4; }

// Step 3 for row 1, from the library's own lse: e^{s_1j} = A_1j * e^{lse_1}, and
// sum_j e^{s_1j} = e^{lse_1}.
void print_row1_softmax(const matrix &scaled, const attention_result &r) {
    const double sum = std::exp(static_cast<double>(r.lse[0]));
    std::printf("  row 1, from the library's lse_1 = %s (so the sum is e^lse_1):\n",
                fixed4(r.lse[0]).c_str());
    std::printf("    ");
    for (int64_t j = 0; j < 3; ++j)
        std::printf("e^%s = %s%s", fixed4(scaled.at(0, j)).c_str(),
                    fixed4(r.weights.at(0, j) * sum).c_str(), j < 2 ? ",  " : "");
    std::printf(";  sum %s\n", fixed4(sum).c_str());
    std::printf("    [");
    for (int64_t j = 0; j < 3; ++j)
        std::printf("%s/%s%s", fixed4(r.weights.at(0, j) * sum).c_str(), fixed4(sum).c_str(),
                    j < 2 ? ", " : "");
    std::printf("] = [");
    print_row(r.weights, 0);
    std::printf("]\n");
}

// Step 4 for row 1, first component: sum_j A_1j V_j1.
void print_row1_blend(const matrix &a, const matrix &v, const matrix &out) {
    std::printf("  row 1, first component: ");
    for (int64_t j = 0; j < 3; ++j)
        std::printf("%s%s(%s)", j ? " + " : "", fixed4(a.at(0, j)).c_str(),
                    fixed4(v.at(j, 0)).c_str());
    std::printf("\n                         = ");
    for (int64_t j = 0; j < 3; ++j)
        std::printf("%s%s", j ? " + " : "", fixed4(a.at(0, j) * v.at(j, 0)).c_str());
    std::printf(" = %s\n", fixed4(out.at(0, 0)).c_str());
}

void print_row_sums(const matrix &a) {
    std::printf("  row sums:");
    for (int64_t i = 0; i < a.rows; ++i) {
        double s = 0;
        for (int64_t j = 0; j < a.cols; ++j) s += a.at(i, j);
        std::printf(" %s", fixed4(s).c_str());
    }
    std::printf("\n");
}

}  // namespace

bool walkthrough(attn_context *ctx, const options &opt) {
    const matrix q = example_qk(), k = example_qk(), v = example_v();
    const float scale = opt.no_scale ? 1.0f : 1.0f / std::sqrt(2.0f);
    bool ok = true;

    std::printf("== D. Working it through: three tokens, d_k = 2 ==\n\n");
    print_matrix("Q = K", q);
    print_matrix("V", v);

    std::printf("\nStep 1 - scores, entry (i,j) = q_i . k_j (attn_gemm_f32, K transposed):\n");
    const matrix s = scores(ctx, q, k, 1.0f);
    print_matrix("Q K^T", s);
    std::printf("  check: row 3, column 3 = q3.k3 = (1)(1) + (1)(1) = %s, the largest score\n",
                fixed4(s.at(2, 2)).c_str());
    const bool scores_ok = matches_printed(s, printed_scores());
    std::printf("  equals the printed Q K^T: %s\n", yes_no(scores_ok));
    ok = ok && scores_ok;

    if (opt.no_scale)
        std::printf("\nStep 2 - scale: skipped (--no-scale), alpha = 1:\n");
    else
        std::printf("\nStep 2 - scale: divide by sqrt(d_k) = sqrt(2) = %s (alpha = %s):\n",
                    fixed4(std::sqrt(2.0)).c_str(), fixed4(scale).c_str());
    const matrix scaled = scores(ctx, q, k, scale);
    print_matrix(opt.no_scale ? "Q K^T" : "Q K^T / sqrt(2)", scaled);
    if (!opt.no_scale) {
        const bool scaled_ok = matches_printed(scaled, printed_scaled());
        std::printf("  equals the printed scaled scores: %s\n", yes_no(scaled_ok));
        ok = ok && scaled_ok;
    }

    std::printf("\nStep 3 - softmax each row (attn_sdpa_f32, scale %s; A is its `weights`):\n",
                fixed4(scale).c_str());
    const attention_result r = attention(ctx, q, k, v, scale, ATTN_CAUSAL_NONE);
    print_row1_softmax(scaled, r);
    print_matrix("A", r.weights);
    print_row_sums(r.weights);
    print_heat_map("A", r.weights);

    std::printf("\nStep 4 - weighted values, A V (attn_sdpa_f32's output):\n");
    print_row1_blend(r.weights, v, r.out);
    print_matrix("Attention(Q,K,V)", r.out);

    const bool a_ok = matches_printed(r.weights, printed_a());
    const bool out_ok = matches_printed(r.out, printed_out());
    std::printf("\nmatches: %s %s\n", yes_no(a_ok), yes_no(out_ok));
    if (opt.no_scale && !(a_ok && out_ok))
        std::printf("  (--no-scale: the document's A and output are for the scaled scores)\n");
    ok = ok && a_ok && out_ok;

    std::printf("\n== F. Causal masking: key j > query i gets -inf (ATTN_CAUSAL_TOP_LEFT) ==\n\n");
    const attention_result c = attention(ctx, q, k, v, scale, ATTN_CAUSAL_TOP_LEFT);
    print_matrix("A_causal", c.weights);
    print_heat_map("A_causal", c.weights);
    // Row 2 renormalised over keys 1 and 2, by hand from the rounded unmasked weights.
    const double a21 = round4(r.weights.at(1, 0)), a22 = round4(r.weights.at(1, 1));
    std::printf("  row 2 by hand from the rounded A: %s + %s = %s, giving %s and %s;\n",
                fixed4(a21).c_str(), fixed4(a22).c_str(), fixed4(a21 + a22).c_str(),
                fixed4(a21 / (a21 + a22)).c_str(), fixed4(a22 / (a21 + a22)).c_str());
    std::printf("  the library at full precision: %s and %s\n",
                fixed4(c.weights.at(1, 0)).c_str(), fixed4(c.weights.at(1, 1)).c_str());
    bool row3_same = true;
    for (int64_t j = 0; j < 3; ++j)
        row3_same = row3_same && fixed4(c.weights.at(2, j)) == fixed4(r.weights.at(2, j));
    std::printf("  row 3 never saw beyond position 3, so it is unchanged: %s\n",
                yes_no(row3_same));
    const bool causal_ok = matches_printed(c.weights, printed_a_causal());
    std::printf("  equals the printed A_causal: %s\n", yes_no(causal_ok));

    std::printf("\n== Sliding windows: causal with window_left = 1 (desc->window_left) ==\n\n");
    std::printf("  each query sees itself and the one key before it: row 3 sees keys 2 and 3\n");
    const attention_result w = attention(ctx, q, k, v, scale, ATTN_CAUSAL_TOP_LEFT, 1);
    print_matrix("A_window", w.weights);
    print_heat_map("A_window", w.weights);
    // Row 3 is the causal row 3 without key 1, renormalised over keys 2 and 3.
    const double a32 = c.weights.at(2, 1), a33 = c.weights.at(2, 2);
    std::printf("  row 3 from A_causal: %s / (%s + %s) = %s and %s / (%s + %s) = %s\n",
                fixed4(a32).c_str(), fixed4(a32).c_str(), fixed4(a33).c_str(),
                fixed4(a32 / (a32 + a33)).c_str(), fixed4(a33).c_str(), fixed4(a32).c_str(),
                fixed4(a33).c_str(), fixed4(a33 / (a32 + a33)).c_str());
    const bool window_ok = w.weights.at(2, 0) == 0.0f &&
                           fixed4(w.weights.at(2, 1)) == fixed4(a32 / (a32 + a33)) &&
                           fixed4(w.weights.at(2, 2)) == fixed4(a33 / (a32 + a33));
    bool rows12_same = true;  // rows 1 and 2 reach back at most one key anyway
    for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j)
            rows12_same = rows12_same && w.weights.at(i, j) == c.weights.at(i, j);
    std::printf("  rows 1 and 2 equal A_causal's (they reach back one key at most): %s\n",
                yes_no(rows12_same));
    std::printf("  row 3 renormalised over keys 2 and 3, key 1 never read: %s\n",
                yes_no(window_ok));
    return ok && row3_same && causal_ok && window_ok && rows12_same;
}

}  // namespace demo
