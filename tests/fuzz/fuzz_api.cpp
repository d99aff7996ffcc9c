// libFuzzer target over the public C API. Each input picks an op, decodes its arguments
// (see fuzz_decode.hpp) and runs it on the reference and on one SIMD ISA (1 and 2 threads)
// under AddressSanitizer and UndefinedBehaviorSanitizer; fuzz_support.hpp lists the checks.
// This file: the entry point, the contexts, and the matrix ops (gemm, softmax, merge).
#include <cstdlib>
#include <string>

#include "fuzz_decode.hpp"

extern "C" attn_status fuzz_gemm_int_trans(attn_context *ctx, int trans_a, int trans_b, int64_t m,
                                           int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                                           const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

namespace fuzz {

static attn_context *make(attn_impl impl, attn_isa isa, int threads) {
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = impl;
    cfg.max_isa = isa;
    cfg.num_threads = threads;
    attn_context *c = nullptr;
    return attn_context_create(&cfg, &c) == ATTN_OK ? c : nullptr;
}

static void print_stats() {
    const run_stats &s = stats();
    std::fprintf(stderr, "fuzz_api: %llu calls, %llu accepted (%llu compared), %llu rejected\n",
                 (unsigned long long)s.calls, (unsigned long long)s.accepted,
                 (unsigned long long)s.compared, (unsigned long long)s.rejected);
}

const path_contexts &contexts() {
    // Never destroyed, and reachable from a static pointer until the very end: LeakSanitizer
    // then does not count the contexts as leaks.
    static const path_contexts *const all = [] {
        auto *pcp = new path_contexts;
        path_contexts &pc = *pcp;
        pc.reference = make(ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, 2);
        for (attn_isa isa : {ATTN_ISA_SSE4, ATTN_ISA_AVX2, ATTN_ISA_AVX512, ATTN_ISA_AVX512_BF16,
                             ATTN_ISA_AMX}) {
            attn_context *one = make(ATTN_IMPL_SIMD, isa, 1), *two = make(ATTN_IMPL_SIMD, isa, 2);
            if (one && two) {
                pc.simd.emplace_back(one, two);
                pc.best = isa;
            } else {
                attn_context_destroy(one);
                attn_context_destroy(two);
            }
        }
        if (!pc.reference || pc.simd.empty()) fail("cannot create the contexts:", attn_last_error());
        if (std::getenv("ATTN_FUZZ_STATS")) std::atexit(print_stats);
        return pcp;
    }();
    return *all;
}

// C[m,n] = alpha op(A) op(B) + beta C with arbitrary transposes, sizes, leading dimensions.
bool decode_gemm(FuzzedDataProvider &in, pool &p, value_source &src, call &c) {
    int ta = enum_in(in, 2), tb = enum_in(in, 2);
    int64_t m = size_in(in, 24, 130), n = size_in(in, 24, 130), k = size_in(in, 24, 130);
    static const float alphas[] = {1.0f, -1.0f, 0.5f, 0.0f, 2.0f, 0.0625f, 1e30f, NAN};
    static const float betas[] = {0.0f, 0.0f, 1.0f, -1.0f, 0.5f, 2.0f, NAN};
    float alpha = alphas[in.ConsumeIntegralInRange<int>(0, 7)];
    float beta = betas[in.ConsumeIntegralInRange<int>(0, 6)];

    int64_t a_rows = ta == ATTN_TRANS ? k : m, a_cols = ta == ATTN_TRANS ? m : k;
    int64_t b_rows = tb == ATTN_TRANS ? n : k, b_cols = tb == ATTN_TRANS ? k : n;
    int64_t lda = ld_in(in, a_cols), ldb = ld_in(in, b_cols), ldc = ld_in(in, n);
    view a = matrix(a_rows, a_cols, lda), b = matrix(b_rows, b_cols, ldb), cm = matrix(m, n, ldc);
    a.offset = offset_in(in), b.offset = offset_in(in), cm.offset = offset_in(in);
    if (!p.place(a, src) || !p.place(b, src)) return false;
    int alias = in.ConsumeIntegralInRange<int>(0, 15);
    if (alias == 0 ? !p.alias(cm, a, src) : !p.place(cm, src)) return false;
    if (alias != 0 && beta == 0.0f && in.ConsumeBool())  // C is not read when beta == 0
        for (auto &x : p.bufs[static_cast<size_t>(cm.buf)]) x = NAN;
    unsigned special = inject_specials(in, p, {a.buf, b.buf});
    int nulls = in.ConsumeIntegralInRange<int>(0, 31);
    if (nulls == 1) a.buf = -1;
    if (nulls == 2) b.buf = -1;
    if (nulls == 3) cm.buf = -1;

    // A and B are read only when C is not empty and k > 0.
    bool need_c = m > 0 && n > 0, need_a = need_c && k > 0, need_b = need_a;
    c.must_reject = (ta != ATTN_NO_TRANS && ta != ATTN_TRANS) || (tb != ATTN_NO_TRANS && tb != ATTN_TRANS) ||
                    m < 0 || n < 0 || k < 0 ||
                    (need_a && (a.buf < 0 || lda < a_cols || extent(a) < 0)) ||
                    (need_b && (b.buf < 0 || ldb < b_cols || extent(b) < 0)) ||
                    (need_c && (cm.buf < 0 || ldc < n || extent(cm) < 0 || aliased_within(cm))) ||
                    (need_c && ((need_a && overlap(cm, a)) || (need_b && overlap(cm, b))));
    c.outputs = {cm};
    c.describe = [=] {
        return "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " m,n,k=" + std::to_string(m) + "," +
               std::to_string(n) + "," + std::to_string(k) + " alpha=" + std::to_string(alpha) +
               " beta=" + std::to_string(beta) + " A " + str(a) + " B " + str(b) + " C " + str(cm);
    };
    c.compare = special == 0 && std::isfinite(alpha) && std::isfinite(beta);
    c.run = [&p, ta, tb, m, n, k, alpha, beta, a, b, cm, lda, ldb, ldc](attn_context *ctx) {
        return fuzz_gemm_int_trans(ctx, ta, tb, m, n, k, alpha, p.at(a), lda, p.at(b), ldb, beta, p.at(cm), ldc);
    };
    if (c.compare && beta == 0.0f) {
        // With finite inputs and beta == 0, no NaN planted in C may reach the result.
        c.check = [cm](const snapshot &ref, const snapshot &simd) {
            for (int64_t at : addresses(cm)) {
                FUZZ_CHECK(std::isfinite(ref[cm.buf][at]), "reference read C with beta == 0");
                FUZZ_CHECK(std::isfinite(simd[cm.buf][at]), "SIMD read C with beta == 0");
            }
        };
    }
    return true;
}

// y = softmax(scale * x) row by row; in place, shifted by one (overlapping) or separate.
bool decode_softmax(FuzzedDataProvider &in, pool &p, value_source &src, call &c) {
    int64_t rows = size_in(in, 12, 70), cols = size_in(in, 40, 300);
    int64_t ldx = ld_in(in, cols), ldy = ld_in(in, cols);
    float scale = scale_in(in, 1.0f);
    view x = matrix(rows, cols, ldx);
    x.offset = offset_in(in);
    if (!p.place(x, src)) return false;
    int mode = in.ConsumeIntegralInRange<int>(0, 11);
    view y = matrix(rows, cols, mode == 0 ? ldx : ldy);
    bool in_place = mode == 0;
    if (in_place) {
        if (!p.alias(y, x, src)) return false;
    } else if (mode == 1) {  // y starts one element after x
        view shifted = x;
        shifted.offset += 1;
        if (!p.alias(y, shifted, src)) return false;
    } else {
        y.offset = offset_in(in);
        if (!p.place(y, src)) return false;
    }
    unsigned special = inject_specials(in, p, {x.buf});
    if (in.ConsumeIntegralInRange<int>(0, 31) == 0) (in.ConsumeBool() ? x.buf : y.buf) = -1;

    bool need = rows > 0 && cols > 0;
    c.must_reject = rows < 0 || cols < 0 ||
                    (need && (x.buf < 0 || y.buf < 0 || ldx < cols || extent(x) < 0 || y.s[2] < cols ||
                              extent(y) < 0 || aliased_within(y) || (!in_place && overlap(x, y))));
    c.outputs = {y};
    c.describe = [=] {
        return "softmax rows,cols=" + std::to_string(rows) + "," + std::to_string(cols) + " scale=" +
               std::to_string(scale) + " x " + str(x) + " y " + str(y);
    };
    c.compare = false;  // row by row below: special values change what each row must be
    c.run = [&p, rows, cols, scale, x, y](attn_context *ctx) {
        return attn_softmax_f32(ctx, rows, cols, scale, p.at(x), x.s[2], p.at(y), y.s[2]);
    };
    if (!need || c.must_reject || x.buf < 0) return true;
    (void)special;
    std::vector<float> xs(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) xs[r * cols + j] = p.bufs[x.buf][x.offset + r * ldx + j];
    c.check = [xs, rows, cols, scale, y](const snapshot &ref, const snapshot &simd) {
        for (int64_t r = 0; r < rows; ++r) {
            bool nan = false, defined = std::isfinite(scale), all_masked = true, moderate = true;
            for (int64_t j = 0; j < cols; ++j) {
                float v = xs[r * cols + j];
                double z = double(scale) * v;
                nan |= std::isnan(v);
                if (std::isnan(z) || z == INFINITY || (std::isfinite(z) && std::fabs(z) > 3.4028234e38))
                    defined = false;
                if (z != -INFINITY) all_masked = false;
                if (std::isfinite(z) && std::fabs(z) > 64.0) moderate = false;
            }
            const float *yr = &ref[y.buf][y.offset + r * y.s[2]], *ys = &simd[y.buf][y.offset + r * y.s[2]];
            if (nan) {  // a NaN in a row makes that row NaN
                for (int64_t j = 0; j < cols; ++j)
                    FUZZ_CHECK(std::isnan(yr[j]) && std::isnan(ys[j]), "softmax: row with NaN is not all NaN");
                continue;
            }
            if (!defined) continue;
            double sum_r = 0.0, sum_s = 0.0;
            for (int64_t j = 0; j < cols; ++j) {
                if (!(yr[j] >= 0.0f && yr[j] <= 1.0f && ys[j] >= 0.0f && ys[j] <= 1.0f)) {
                    char at[160];
                    std::snprintf(at, sizeof at, "row %lld col %lld: x %g, reference %g, SIMD %g", (long long)r,
                                  (long long)j, double(xs[r * cols + j]), double(yr[j]), double(ys[j]));
                    for (int64_t jj = 0; jj < cols; ++jj) std::fprintf(stderr, "%g ", double(xs[r * cols + jj]));
                    fail("softmax: weight outside [0, 1]", at);
                }
                sum_r += yr[j];
                sum_s += ys[j];
                if (moderate)
                    FUZZ_CHECK(std::fabs(ys[j] - yr[j]) <= 1e-4 * (1.0 + yr[j]), "softmax: SIMD differs from reference");
            }
            double want = all_masked ? 0.0 : 1.0, tol = 1e-4 + 1e-6 * double(cols);
            FUZZ_CHECK(std::fabs(sum_r - want) <= tol, "softmax: reference row does not sum to 1 (0 if all -inf)");
            FUZZ_CHECK(std::fabs(sum_s - want) <= tol, "softmax: SIMD row does not sum to 1 (0 if all -inf)");
        }
    };
    return true;
}

// out = sum_p exp(lses[p] - lse) outs[p] over parts computed on disjoint keys.
bool decode_merge(FuzzedDataProvider &in, pool &p, value_source &src, call &c) {
    int64_t parts = in.ConsumeIntegralInRange<int64_t>(-1, 5);
    int64_t rows = size_in(in, 12, 70), dim_v = size_in(in, 16, 90);
    std::vector<view> outs, lses;
    for (int64_t i = 0; i < std::max<int64_t>(parts, 0); ++i) {
        outs.push_back(dense(1, 1, rows, dim_v));
        lses.push_back(dense(1, 1, 1, rows));
        outs.back().offset = offset_in(in);
        if (!p.place(outs.back(), src) || !p.place(lses.back(), src)) return false;
        for (auto &l : p.bufs[lses.back().buf]) l *= 8.0f;  // log-sum-exps spread over [-8, 8]
    }
    view out = dense(1, 1, rows, dim_v), lse = dense(1, 1, 1, rows);
    bool want_lse = in.ConsumeBool();
    int alias = in.ConsumeIntegralInRange<int>(0, 15);
    if (alias == 0 && !outs.empty()) {
        if (!p.alias(out, outs[0], src)) return false;
    } else if (!p.place(out, src)) {
        return false;
    }
    if (want_lse && !p.place(lse, src)) return false;
    if (!want_lse) lse.buf = -1;
    // -inf log-sum-exps are defined (a part that saw no key); other specials are not.
    std::vector<int> lse_bufs, out_bufs;
    for (auto &l : lses) lse_bufs.push_back(l.buf);
    for (auto &o : outs) out_bufs.push_back(o.buf);
    for (int i = in.ConsumeIntegralInRange<int>(0, 4); i > 0 && !lses.empty(); --i) {
        auto &l = p.bufs[lse_bufs[in.ConsumeIntegralInRange<size_t>(0, lse_bufs.size() - 1)]];
        l[in.ConsumeIntegralInRange<size_t>(0, l.size() - 1)] = -INFINITY;
    }
    unsigned special = inject_specials(in, p, out_bufs) | inject_specials(in, p, lse_bufs);
    int nulls = in.ConsumeIntegralInRange<int>(0, 31);
    bool null_outs = nulls == 1, null_lses = nulls == 2;
    if (nulls == 3 && !outs.empty()) outs[0].buf = -1;
    if (nulls == 4 && !lses.empty()) lses[0].buf = -1;
    if (nulls == 5) out.buf = -1;

    bool need = parts > 0 && rows > 0 && dim_v > 0, any_null = false, any_overlap = false;
    for (int64_t i = 0; i < std::max<int64_t>(parts, 0); ++i) {
        any_null |= outs[i].buf < 0 || lses[i].buf < 0;
        any_overlap |= overlap(out, outs[i]) || overlap(out, lses[i]) || overlap(lse, outs[i]) || overlap(lse, lses[i]);
    }
    c.must_reject = parts < 0 || rows < 0 || dim_v < 0 ||
                    (need && (null_outs || null_lses || any_null || out.buf < 0 || any_overlap));
    c.outputs = {out, lse};
    c.describe = [=] {
        std::string s = "merge parts=" + std::to_string(parts) + " rows=" + std::to_string(rows) +
                        " dim_v=" + std::to_string(dim_v) + " null_outs=" + std::to_string(null_outs) +
                        " null_lses=" + std::to_string(null_lses) + " out " + str(out) + " lse " + str(lse);
        for (size_t i = 0; i < outs.size(); ++i) s += "\n    outs[" + std::to_string(i) + "] " + str(outs[i]) + " lses " + str(lses[i]);
        return s;
    };
    c.compare = (special & ~16u) == 0;
    c.run = [&p, parts, rows, dim_v, outs, lses, out, lse, null_outs, null_lses](attn_context *ctx) {
        std::vector<const float *> o, l;
        for (auto &t : outs) o.push_back(p.at(t));
        for (auto &t : lses) l.push_back(p.at(t));
        return attn_merge_f32(ctx, parts, rows, dim_v, null_outs ? nullptr : o.data(),
                              null_lses ? nullptr : l.data(), p.at(out), p.at(lse));
    };
    if (!need || c.must_reject || !c.compare) return true;
    // A row whose every part saw no key gives zeros and lse -inf.
    std::vector<char> empty_row(static_cast<size_t>(rows), 1);
    for (auto &l : lses)
        for (int64_t r = 0; r < rows; ++r)
            if (p.bufs[l.buf][l.offset + r] != -INFINITY) empty_row[r] = 0;
    c.check = [empty_row, rows, dim_v, out, lse](const snapshot &ref, const snapshot &simd) {
        for (const snapshot *s : {&ref, &simd})
            for (int64_t r = 0; r < rows; ++r) {
                if (!empty_row[r]) continue;
                for (int64_t d = 0; d < dim_v; ++d)
                    FUZZ_CHECK((*s)[out.buf][out.offset + r * dim_v + d] == 0.0f, "merge: empty row is not zero");
                if (lse.buf >= 0) FUZZ_CHECK((*s)[lse.buf][r] == -INFINITY, "merge: empty row lse is not -inf");
            }
    };
    return true;
}

// attn_context_create with any configuration: invalid values are rejected, an ISA above the
// CPU's is unsupported, anything else gives a context that reports sane values.
static void fuzz_config(FuzzedDataProvider &in) {
    attn_config cfg;
    attn_config_init(&cfg);
    int impl = in.ConsumeIntegralInRange<int>(-1, 3), isa = in.ConsumeIntegralInRange<int>(-1, 8);
    set_enum(cfg.impl, impl);
    set_enum(cfg.max_isa, isa);
    cfg.num_threads = in.ConsumeIntegralInRange<int>(-2, 4);
    attn_context *ctx = nullptr;
    attn_status st = attn_context_create(&cfg, &ctx);
    bool invalid = impl < 0 || impl > 2 || isa < 0 || isa > ATTN_ISA_AMX_EMULATED || cfg.num_threads < 0;
    if (invalid) FUZZ_CHECK(st == ATTN_INVALID_ARGUMENT, "context: invalid config not rejected");
    else if (isa == ATTN_ISA_AMX_EMULATED && impl != ATTN_IMPL_REFERENCE)  // amx_emulated: with avx512_bf16
        FUZZ_CHECK((st == ATTN_OK) == (contexts().best >= ATTN_ISA_AVX512_BF16),
                   "context: amx_emulated not available exactly where avx512_bf16 is");
    else if (isa > contexts().best && impl != ATTN_IMPL_REFERENCE)
        FUZZ_CHECK(st == ATTN_UNSUPPORTED, "context: ISA above the CPU's not reported unsupported");
    if (st != ATTN_OK) return;
    std::string name = attn_context_isa(ctx);
    FUZZ_CHECK(name == "amx" || name == "amx_emulated" || name == "avx512_bf16" || name == "avx512" || name == "avx2" || name == "sse4" ||
                   name == "scalar",
               "context: unknown ISA name");
    int threads = attn_context_num_threads(ctx);
    FUZZ_CHECK(threads >= 1 && (cfg.num_threads == 0 || threads <= cfg.num_threads), "context: thread count");
    attn_context_destroy(ctx);
}

}  // namespace fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace fuzz;
    FuzzedDataProvider in(data, size);
    const path_contexts &ctx = contexts();
    const auto &simd = ctx.simd[in.ConsumeIntegralInRange<size_t>(0, ctx.simd.size() - 1)];
    value_source src{in.ConsumeIntegral<uint64_t>()};
    pool p;
    call c;
    bool ready = false;
    attn_context *const typed_contexts[3] = {ctx.reference, simd.first, simd.second};
    switch (in.ConsumeIntegralInRange<int>(0, 12)) {
    case 0: ready = decode_gemm(in, p, src, c); break;
    case 1: ready = decode_softmax(in, p, src, c); break;
    case 2: ready = decode_sdpa(in, p, src, c, false); break;
    case 3: ready = decode_sdpa(in, p, src, c, true); break;
    case 4: ready = decode_mha(in, p, src, c, false); break;
    case 5: ready = decode_mha(in, p, src, c, true); break;
    case 6: ready = decode_merge(in, p, src, c); break;
    case 7: fuzz_config(in); break;
    case 8: fuzz_convert(in, src, typed_contexts); break;
    case 10: fuzz_quantize(in, src, typed_contexts); break;
    case 11: ready = decode_sdpa_ragged(in, p, src, c, false); break;
    case 12: ready = decode_sdpa_ragged(in, p, src, c, true); break;
    default:
        if (in.ConsumeIntegralInRange<int>(0, 2) == 0) fuzz_sdpa_quantized(in, src, typed_contexts);
        else fuzz_sdpa_typed(in, src, typed_contexts);
        break;
    }
    if (ready) execute(p, c, ctx.reference, simd.first, simd.second);
    return 0;
}
