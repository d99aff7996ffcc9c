// attn-compare: compares the SIMD kernels of every instruction set this CPU supports with
// the scalar reference, op by op over a sweep of shapes, using the public C API only.
// Prints one row per (case, ISA) and a summary; exits 1 if any comparison fails.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compare.hpp"

namespace {

using namespace attn_compare;

const char usage_text[] =
    "usage: attn-compare [--quick] [--op NAME[,NAME...]] [--isa NAME[,NAME...]] [--csv FILE]\n"
    "\n"
    "Runs every op on the reference implementation and on the SIMD kernels of each ISA this\n"
    "CPU supports (sse4, avx2, avx512, avx512_bf16, amx), and prints for each case:\n"
    "  simd-ref    max |simd - ref| / (1 + |ref|)\n"
    "  ref-exact   the fp32 reference's own error against the same maths in double\n"
    "  simd-exact  the SIMD result's error against the double computation\n"
    "  threads     whether 1 thread and all threads give bitwise identical results\n"
    "A case passes when simd-exact <= 2 * ref-exact + 1e-6 (the f32 reference is the plain\n"
    "computation in the same precision: the SIMD path may err at most twice as much against\n"
    "double), the results are bitwise identical across thread counts, and the reference\n"
    "itself is within 1e-3 of the exact result.\n"
    "16-bit cases (sdpa_typed: q/kv/out types in the shape) follow attn.h's rule instead: their\n"
    "ref-exact column is the plain 16-bit computation's error (inputs as stored, f32 sums, P\n"
    "rounded to bf16 where allowed, output rounded once), and they pass when\n"
    "simd-exact <= 2 * that + 2 units in the last place of the output type.\n"
    "\n"
    "  --quick      a small sweep (a few seconds)\n"
    "  --op NAME    gemm, softmax, sdpa, sdpa_backward, sdpa_typed, mha_forward, mha_backward,\n"
    "               merge;\n"
    "               a family name (sdpa, mha) selects all its ops\n"
    "  --isa NAME   sse4, avx2, avx512, avx512_bf16, amx, amx_emulated (the amx kernels on\n"
    "               the tile model, on any CPU with avx512_bf16; only when named here)\n"
    "  --csv FILE   also write every row to FILE as CSV\n"
    "Exit status: 0 all passed, 1 a comparison failed, 2 bad command line.\n";

constexpr double error_floor = 1e-6;
constexpr double reference_limit = 1e-3;  // beyond this the reference itself is suspect

struct options {
    sweep_size size = sweep_size::full;
    std::vector<std::string> ops, isas;
    std::string csv;
};

std::vector<std::string> split_list(const std::string &s) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        size_t comma = s.find(',', start);
        if (comma == std::string::npos) comma = s.size();
        if (comma > start) out.push_back(s.substr(start, comma - start));
        start = comma + 1;
    }
    return out;
}

// "sdpa" selects sdpa and sdpa_backward; "mha" selects mha_forward and mha_backward.
bool op_selected(const options &opt, const std::string &op) {
    if (opt.ops.empty()) return true;
    for (const auto &name : opt.ops)
        if (op == name || op.rfind(name + "_", 0) == 0) return true;
    return false;
}

struct simd_target {
    std::string name;  // as the context reports it
    attn_context *all_threads = nullptr, *one_thread = nullptr;
};

attn_context *make_context(attn_impl impl, attn_isa isa, int threads, attn_status &st) {
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = impl;
    cfg.max_isa = isa;
    cfg.num_threads = threads;
    attn_context *ctx = nullptr;
    st = attn_context_create(&cfg, &ctx);
    return st == ATTN_OK ? ctx : nullptr;
}

struct row {
    std::string op, isa, shape, note;
    double simd_ref = 0, ref_exact = 0, simd_exact = 0;
    bool bitwise = false, pass = false;
};

void print_header() {
    std::printf("%-14s %-11s %10s %10s %10s %-8s %-7s %s\n", "op", "isa", "simd-ref", "ref-exact",
                "simd-exact", "threads", "verdict", "shape");
}

void print_row(const row &r) {
    std::printf("%-14s %-11s %10.2e %10.2e %10.2e %-8s %-7s %s%s%s\n", r.op.c_str(), r.isa.c_str(),
                r.simd_ref, r.ref_exact, r.simd_exact, r.bitwise ? "same" : "DIFFER",
                r.pass ? "pass" : "FAIL", r.shape.c_str(), r.note.empty() ? "" : "  ",
                r.note.c_str());
    std::fflush(stdout);
}

void write_csv_row(std::FILE *f, const row &r) {
    std::fprintf(f, "%s,%s,\"%s\",%.3e,%.3e,%.3e,%s,%s,\"%s\"\n", r.op.c_str(), r.isa.c_str(),
                 r.shape.c_str(), r.simd_ref, r.ref_exact, r.simd_exact,
                 r.bitwise ? "same" : "differ", r.pass ? "pass" : "fail", r.note.c_str());
}

std::string status_note(const char *who, attn_status st) {
    return std::string(who) + ": " + attn_status_string(st) + " (" + attn_last_error() + ")";
}

int parse_options(int argc, char **argv, options &opt) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&](std::string &out) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "attn-compare: %s needs a value\n", a.c_str());
                return false;
            }
            out = argv[++i];
            return true;
        };
        std::string v;
        if (a == "--help" || a == "-h") {
            std::fputs(usage_text, stdout);
            return 0;
        } else if (a == "--quick") {
            opt.size = sweep_size::quick;
        } else if (a == "--op") {
            if (!value(v)) return 2;
            opt.ops = split_list(v);
        } else if (a == "--isa") {
            if (!value(v)) return 2;
            opt.isas = split_list(v);
        } else if (a == "--csv") {
            if (!value(opt.csv)) return 2;
        } else {
            std::fprintf(stderr, "attn-compare: unknown argument '%s'\n%s", a.c_str(), usage_text);
            return 2;
        }
    }
    for (const auto &isa : opt.isas)
        if (isa != "sse4" && isa != "avx2" && isa != "avx512" && isa != "avx512_bf16" &&
            isa != "amx" && isa != "amx_emulated") {
            std::fprintf(stderr,
                         "attn-compare: unknown ISA '%s' (sse4, avx2, avx512, avx512_bf16, amx, "
                         "amx_emulated)\n",
                         isa.c_str());
            return 2;
        }
    return -1;  // carry on
}

}  // namespace

int main(int argc, char **argv) {
    options opt;
    if (int rc = parse_options(argc, argv, opt); rc >= 0) return rc;

    std::vector<case_spec> all, cases;
    add_gemm_cases(opt.size, all);
    add_softmax_cases(opt.size, all);
    add_sdpa_cases(opt.size, all);
    add_sdpa_backward_cases(opt.size, all);
    add_mha_cases(opt.size, all);
    add_sdpa_typed_cases(opt.size, all);
    add_merge_cases(opt.size, all);
    for (auto &c : all)
        if (op_selected(opt, c.op)) cases.push_back(std::move(c));
    if (cases.empty()) {
        std::fprintf(stderr, "attn-compare: no op matches --op\n");
        return 2;
    }

    attn_status st;
    attn_context *reference = make_context(ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, 0, st);
    if (!reference) {
        std::fprintf(stderr, "attn-compare: %s\n", status_note("reference context", st).c_str());
        return 1;
    }
    std::vector<simd_target> targets;
    const std::pair<attn_isa, const char *> isas[] = {
        {ATTN_ISA_SSE4, "sse4"},          {ATTN_ISA_AVX2, "avx2"}, {ATTN_ISA_AVX512, "avx512"},
        {ATTN_ISA_AVX512_BF16, "avx512_bf16"}, {ATTN_ISA_AMX, "amx"},
        {ATTN_ISA_AMX_EMULATED, "amx_emulated"}};
    for (auto [isa, name] : isas) {
        // amx_emulated (the tile model, slow) runs only when --isa names it
        if (isa == ATTN_ISA_AMX_EMULATED && opt.isas.empty()) continue;
        if (!opt.isas.empty() && std::find(opt.isas.begin(), opt.isas.end(), name) == opt.isas.end())
            continue;
        simd_target t;
        t.all_threads = make_context(ATTN_IMPL_SIMD, isa, 0, st);
        if (st == ATTN_UNSUPPORTED) {
            std::fprintf(stderr, "attn-compare: %s is not supported by this CPU, skipped\n", name);
            continue;
        }
        if (t.all_threads) t.one_thread = make_context(ATTN_IMPL_SIMD, isa, 1, st);
        if (!t.one_thread) {
            std::fprintf(stderr, "attn-compare: %s\n", status_note(name, st).c_str());
            return 1;
        }
        t.name = attn_context_isa(t.all_threads);
        targets.push_back(t);
    }
    if (targets.empty()) {
        std::fprintf(stderr, "attn-compare: no SIMD instruction set to compare\n");
        return 1;
    }

    std::unique_ptr<std::FILE, int (*)(std::FILE *)> csv(nullptr, std::fclose);
    if (!opt.csv.empty()) {
        csv.reset(std::fopen(opt.csv.c_str(), "w"));
        if (!csv) {
            std::fprintf(stderr, "attn-compare: cannot write %s\n", opt.csv.c_str());
            return 2;
        }
        std::fputs("op,isa,shape,simd_vs_ref,ref_vs_exact,simd_vs_exact,threads,verdict,note\n",
                   csv.get());
    }

    std::printf("attn %s: %zu cases x %zu ISAs, threads 1 vs %d\n", attn_version(), cases.size(),
                targets.size(), attn_context_num_threads(targets[0].all_threads));
    print_header();
    const bool progress = isatty(STDERR_FILENO);
    const size_t total = cases.size() * targets.size();
    size_t done = 0, failed = 0;
    row worst_simd, worst_ref;
    worst_simd.simd_ref = worst_ref.ref_exact = -1.0;
    const auto start = std::chrono::steady_clock::now();

    for (const auto &c : cases) {
        if (progress)
            std::fprintf(stderr, "\r\033[K[%4zu/%zu] %s reference %s", done + 1, total,
                         c.op.c_str(), c.shape.c_str());
        auto p = c.make();
        std::vector<float> ref_out, simd_out, simd1_out;
        const attn_status ref_st = p->run(reference, ref_out);
        const std::vector<double> exact = p->exact();
        const std::string ref_note = ref_st != ATTN_OK ? status_note("reference", ref_st) : "";
        double ref_exact = ref_st == ATTN_OK && exact.size() == ref_out.size()
                               ? max_rel_error(ref_out.data(), exact.data(), exact.size())
                               : INFINITY;
        // 16-bit cases: the yardstick is the plain 16-bit computation's error (the rule), for
        // the reference as for every SIMD path
        const double plain = p->sixteen_bit() ? p->plain_error() : 0.0;
        const bool ref_in_rule = !p->sixteen_bit() || ref_exact <= 2.0 * plain + p->ulp_floor();
        for (const auto &t : targets) {
            if (progress)
                std::fprintf(stderr, "\r\033[K[%4zu/%zu] %s %s %s", done + 1, total, c.op.c_str(),
                             t.name.c_str(), c.shape.c_str());
            row r{c.op, t.name, c.shape, ref_note};
            r.ref_exact = ref_exact;
            const attn_status s_all = p->run(t.all_threads, simd_out);
            const attn_status s_one = p->run(t.one_thread, simd1_out);
            if (r.note.empty() && s_all != ATTN_OK) r.note = status_note("simd", s_all);
            if (r.note.empty() && s_one != ATTN_OK) r.note = status_note("simd 1 thread", s_one);
            const bool sizes_ok = simd_out.size() == ref_out.size() && simd_out.size() == exact.size();
            r.simd_ref = sizes_ok ? max_rel_error(simd_out.data(), ref_out.data(), ref_out.size())
                                  : INFINITY;
            r.simd_exact = sizes_ok ? max_rel_error(simd_out.data(), exact.data(), exact.size())
                                    : INFINITY;
            r.bitwise = simd_out.size() == simd1_out.size() &&
                        std::memcmp(simd_out.data(), simd1_out.data(),
                                    simd_out.size() * sizeof(float)) == 0;
            if (r.note.empty() && !(p->sixteen_bit() ? ref_in_rule : r.ref_exact <= reference_limit))
                r.note = "reference disagrees with the exact computation";
            r.pass = r.note.empty() && r.bitwise &&
                     (p->sixteen_bit() ? r.simd_exact <= 2.0 * plain + p->ulp_floor()
                                       : r.simd_exact <= 2.0 * r.ref_exact + error_floor);
            if (progress) std::fputs("\r\033[K", stderr);
            print_row(r);
            if (csv) write_csv_row(csv.get(), r);
            if (!r.pass) ++failed;
            if (!(r.simd_ref <= worst_simd.simd_ref)) worst_simd = r;
            if (!(r.ref_exact <= worst_ref.ref_exact)) worst_ref = r;
            ++done;
        }
    }
    if (progress) std::fputs("\r\033[K", stderr);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    std::printf("worst simd-ref %.2e: %s %s %s\n", worst_simd.simd_ref, worst_simd.op.c_str(),
                worst_simd.isa.c_str(), worst_simd.shape.c_str());
    std::printf("worst ref-exact %.2e: %s %s\n", worst_ref.ref_exact, worst_ref.op.c_str(),
                worst_ref.shape.c_str());
    std::printf("attn-compare: %zu comparisons, %zu passed, %zu failed (%.1f s)\n", done,
                done - failed, failed, seconds);

    for (auto &t : targets) {
        attn_context_destroy(t.all_threads);
        attn_context_destroy(t.one_thread);
    }
    attn_context_destroy(reference);
    return failed ? 1 : 0;
}
