// attn-demo: the three-token example of "Attention and Self-Attention" (sections D-F),
// computed with the public C API only, then the figure's two experiments (rotate token 3's
// query; raise the dimension with and without the sqrt(d_k) division).
//
// Every matrix here is row-major and dense: a [rows, cols] matrix stores element (i, j) at
// data[i * cols + j]. Tokens are numbered 1..3 in the printed text, 0..2 in the code.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/attn.h"

namespace demo {

// What the command line asked for (see usage() in options.cpp).
struct options {
    std::vector<int64_t> dims{2, 8, 32, 128, 512};  // experiment 2: embedding dimensions
    bool no_scale = false;                          // scale = 1 instead of 1/sqrt(d_k)
    double step_deg = 30.0;                         // experiment 1: rotation step
    attn_impl impl = ATTN_IMPL_AUTO;
    attn_isa isa = ATTN_ISA_AUTO;
    int threads = 0;  // 0 = all hardware threads
};

// A bad command line: main() prints the message and exits 2.
struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A failed attn_* call: the message holds the function, the status and attn_last_error().
struct attn_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

options parse_options(int argc, char **argv);  // throws usage_error
bool help_requested(int argc, char **argv);    // "--help" or "-h" anywhere
std::string usage();

// Throws attn_failure when s != ATTN_OK, quoting attn_last_error().
void check(attn_status s, const char *call);

struct matrix {
    int64_t rows = 0, cols = 0;
    std::vector<float> data;
    matrix() = default;
    matrix(int64_t r, int64_t c) : rows(r), cols(c), data(static_cast<size_t>(r * c), 0.0f) {}
    matrix(int64_t r, int64_t c, std::vector<float> values);
    float &at(int64_t i, int64_t j) { return data[static_cast<size_t>(i * cols + j)]; }
    float at(int64_t i, int64_t j) const { return data[static_cast<size_t>(i * cols + j)]; }
};

// The document's example: three tokens, d_k = 2, Q = K = [[1,0],[0,1],[1,1]] (already
// projected), V = [[1,0],[0,2],[3,1]].
matrix example_qk();
matrix example_v();

// S = alpha * Q K^T through attn_gemm_f32 (trans_b): Q [n, d], K [n, d] -> S [n, n].
matrix scores(attn_context *ctx, const matrix &q, const matrix &k, float alpha);

// One head of attn_sdpa_f32 with its optional outputs: A (weights) [n, n], lse [n], out [n, dv].
struct attention_result {
    matrix weights, out;
    std::vector<float> lse;
};
attention_result attention(attn_context *ctx, const matrix &q, const matrix &k, const matrix &v,
                           float scale, attn_causal causal,
                           int64_t window_left = -1);

// Printing with the seed's rounding (4 decimals); -0.0000 is printed as 0.0000.
std::string fixed4(double x);
void print_matrix(const char *name, const matrix &m);
void print_row(const matrix &m, int64_t i);  // "0.2483 0.2483 0.5035", no newline
// Shade characters for weights in [0, 1]: ' ' = 0 ... '@' = 1.
char shade(float w);
const char *yes_no(bool b);  // "True" / "False", as the document prints them
void print_heat_map(const char *name, const matrix &a);

// |x - printed| <= 5e-5 for every element: the library's value rounds to the printed one.
bool matches_printed(const matrix &m, const matrix &printed);

// The parts of the program; each returns false when one of its checks fails.
bool walkthrough(attn_context *ctx, const options &opt);
bool rotation_experiment(attn_context *ctx, const options &opt);
bool dimension_experiment(attn_context *ctx, const options &opt);

}  // namespace demo
