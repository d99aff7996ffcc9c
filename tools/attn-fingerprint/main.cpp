// attn-fingerprint: runs a fixed, seeded corpus of calls of every public function, with every
// option and element type, on every path this CPU has (the reference, and the SIMD kernels
// capped at each instruction set; each with strict and bf16 fpmath) at 1 and 2 threads, and
// prints one FNV-1a 64 hash of what the calls wrote (outputs and statuses) per (function,
// path). Two builds that print the same lines computed the same bits. Public C API only.
#include <cstdio>
#include <cstring>
#include <string>

#include "fingerprint.hpp"

namespace {

using namespace attn_fingerprint;

struct path {
    std::string name;
    attn_impl impl;
    attn_isa isa;
    attn_fpmath fpmath;
};

attn_context *make_context(const path &p, int threads, attn_status &st) {
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = p.impl;
    cfg.max_isa = p.isa;
    cfg.num_threads = threads;
    cfg.fpmath = p.fpmath;
    attn_context *ctx = nullptr;
    st = attn_context_create(&cfg, &ctx);
    return st == ATTN_OK ? ctx : nullptr;
}

record run_corpus(attn_context *ctx) {
    record rec;
    corpus_gemm(ctx, rec);
    corpus_softmax_convert_merge(ctx, rec);
    corpus_sdpa_f32(ctx, rec);
    corpus_sdpa_typed(ctx, rec);
    corpus_sdpa_backward(ctx, rec);
    corpus_sdpa_quantized(ctx, rec);
    corpus_mha(ctx, rec);
    return rec;
}

const char usage_text[] =
    "usage: attn-fingerprint [--cases]\n"
    "Prints 'function path hash' per function and path (paths: reference, sse4, avx2, avx512,\n"
    "avx512_bf16, amx, each also with fpmath bf16; a level this CPU lacks is reported skipped).\n"
    "The hash is of the 1-thread run; a 2-thread run that differs is reported on the line.\n"
    "  --cases   one line per case of each function instead (with the message of any call\n"
    "            refused: the corpus expects only the paged backward's)\n";

}  // namespace

int main(int argc, char **argv) {
    bool cases = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--cases")) {
            cases = true;
        } else {
            std::fputs(usage_text, std::strcmp(argv[i], "--help") ? stderr : stdout);
            return std::strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    std::vector<path> paths;
    const std::pair<attn_isa, const char *> isas[] = {
        {ATTN_ISA_SSE4, "sse4"}, {ATTN_ISA_AVX2, "avx2"}, {ATTN_ISA_AVX512, "avx512"},
        {ATTN_ISA_AVX512_BF16, "avx512_bf16"}, {ATTN_ISA_AMX, "amx"}};
    for (attn_fpmath fm : {ATTN_FPMATH_STRICT, ATTN_FPMATH_BF16}) {
        const std::string suffix = fm == ATTN_FPMATH_BF16 ? "/fpmath_bf16" : "";
        paths.push_back({"reference" + suffix, ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, fm});
        for (auto [isa, name] : isas) paths.push_back({name + suffix, ATTN_IMPL_SIMD, isa, fm});
    }
    int failures = 0;
    for (const auto &p : paths) {
        attn_status st;
        attn_context *one = make_context(p, 1, st);
        if (!one) {
            std::printf("%-24s %-24s skipped (%s: %s)\n", "*", p.name.c_str(),
                        attn_status_string(st), attn_last_error());
            if (st != ATTN_UNSUPPORTED) ++failures;
            continue;
        }
        attn_context *two = make_context(p, 2, st);
        const record r1 = run_corpus(one), r2 = run_corpus(two);
        attn_context_destroy(one);
        attn_context_destroy(two);
        if (cases) {
            for (size_t i = 0; i < r1.cases.size(); ++i) {
                const auto &c = r1.cases[i];
                std::printf("%-48s %-24s %016llx%s%s%s\n", c.name.c_str(), p.name.c_str(),
                            (unsigned long long)c.hash,
                            r2.cases[i].hash == c.hash ? "" : "  2 threads differ",
                            c.note.empty() ? "" : "  refused: ", c.note.c_str());
            }
            continue;
        }
        for (const auto &fn : r1.order) {
            const uint64_t h1 = r1.functions.at(fn).h, h2 = r2.functions.at(fn).h;
            std::printf("%-24s %-24s %016llx", fn.c_str(), p.name.c_str(), (unsigned long long)h1);
            if (h2 != h1) std::printf("  2 threads: %016llx", (unsigned long long)h2);
            std::printf("\n");
        }
        std::fflush(stdout);
    }
    return failures ? 1 : 0;
}
