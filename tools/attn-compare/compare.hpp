// attn-compare: runs every op on the reference and on the SIMD kernels of each ISA this CPU
// supports, through the public C API only, and measures
//   simd error      max |simd - ref| / (1 + |ref|)
//   reference error max |ref - exact| / (1 + |exact|), exact = the same maths in double
// A SIMD result passes when its error is within twice the reference's own error (plus a
// floor of 1e-6) and when one thread and all threads give bitwise identical results.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.h"

namespace attn_compare {

// One problem instance: fixed inputs, the library call under test, and the oracle.
// run() and exact() return the outputs flattened in the same element order.
class problem {
public:
    virtual ~problem() = default;
    virtual attn_status run(attn_context *ctx, std::vector<float> &outputs) const = 0;
    virtual std::vector<double> exact() const = 0;
    // 16-bit problems (attn.h's tolerance rule, attn_sdpa) return true and give the error against
    // exact() of the plain 16-bit computation, computed by the problem itself (inputs as
    // stored, f32 sums, P rounded to bf16 where allowed, the output rounded once), and the
    // floor of a few units in the last place of the output type; a result of any path, the
    // reference included, then passes when its error against exact() is within twice the
    // plain one plus the floor.
    virtual bool sixteen_bit() const { return false; }
    virtual double plain_error() const { return 0.0; }
    virtual double ulp_floor() const { return 0.0; }
};

// A sweep entry; inputs are built only when the case runs, so a sweep holds one at a time.
struct case_spec {
    std::string op;     // "gemm", "softmax", "sdpa", "sdpa_backward", "mha_forward", ...
    std::string shape;  // human-readable shape and options, e.g. "B2 H8/2 L257x257 D64 causal=tl"
    std::function<std::unique_ptr<problem>()> make;
};

enum class sweep_size { quick, full };

// Sweeps per op family (cases_basic.cpp, cases_sdpa.cpp, cases_mha.cpp).
void add_gemm_cases(sweep_size s, std::vector<case_spec> &out);
void add_softmax_cases(sweep_size s, std::vector<case_spec> &out);
void add_merge_cases(sweep_size s, std::vector<case_spec> &out);
void add_sdpa_cases(sweep_size s, std::vector<case_spec> &out);
void add_sdpa_backward_cases(sweep_size s, std::vector<case_spec> &out);
void add_mha_cases(sweep_size s, std::vector<case_spec> &out);
void add_sdpa_typed_cases(sweep_size s, std::vector<case_spec> &out);

// ---------------------------------------------------------------------------------------
// Helpers shared by the case files.

// Deterministic uniform values in [lo, hi).
std::vector<float> random_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
std::vector<double> to_double(const std::vector<float> &v);

// printf into a std::string (shape labels).
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Elements of a [batch, heads, seq, dim] tensor stored with layout l, in dense BHSD order.
std::vector<float> gather_bhsd(const float *base, attn_layout l, int64_t batch, int64_t heads,
                               int64_t seq, int64_t dim);

// Number of floats a buffer needs to hold every element a layout addresses.
int64_t layout_extent(attn_layout l, int64_t batch, int64_t heads, int64_t seq, int64_t dim);

// max |got - want| / (1 + |want|); infinity when NaN or infinity patterns differ.
double max_rel_error(const float *got, const float *want, size_t n);
double max_rel_error(const float *got, const double *want, size_t n);

// ---------------------------------------------------------------------------------------
// The oracle in double precision (exact.cpp). Same meaning as the C API; inputs and outputs
// are double, row-major. Masks, kv_len and dropout come from the descriptor.

// C[m,n] = alpha op(A) op(B) + beta C (C is not read when beta == 0).
void gemm_exact(attn_trans ta, attn_trans tb, int64_t m, int64_t n, int64_t k, double alpha,
                const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                double *c, int64_t ldc);

// y[i,:] = softmax(scale x[i,:]); -inf entries weigh 0, an all -inf row gives zeros.
void softmax_exact(int64_t rows, int64_t cols, double scale, const double *x, int64_t ldx,
                   double *y);

// SDPA forward. q, k, v are read through d's layouts; out [B,Hq,Lq,Dv], weights
// [B,Hq,Lq,Lkv] and lse [B,Hq,Lq] are written dense (weights and lse may be null).
// round_p: the weights A keep are rounded to bf16 before A V (the plain 16-bit computation
// where attn.h allows it), the rest stays double.
void sdpa_exact(const attn_sdpa_desc &d, const double *q, const double *k, const double *v,
                double *out, double *weights, double *lse, bool round_p = false);

// SDPA backward. q, k, v and dout (layout d.out) through d's layouts; dq [B,Hq,Lq,Dqk],
// dk [B,Hkv,Lkv,Dqk] and dv [B,Hkv,Lkv,Dv] written dense; dk, dv sum over the query heads
// of a group.
void sdpa_backward_exact(const attn_sdpa_desc &d, const double *q, const double *k,
                         const double *v, const double *dout, double *dq, double *dk,
                         double *dv);

// Merge of partial attention results: out [rows, dim_v], lse [rows].
void merge_exact(int64_t parts, int64_t rows, int64_t dim_v,
                 const std::vector<std::vector<double>> &outs,
                 const std::vector<std::vector<double>> &lses, double *out, double *lse);

}  // namespace attn_compare
