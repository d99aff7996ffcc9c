// attn-plan: the plan of one attn_sdpa call (ops::plan_sdpa, the function the driver runs)
// printed: each sequence's tiles, key chunks and kernel, the tasks with their predicted costs,
// and the predicted parallel efficiency for 8 .. 128 threads (a list-scheduling bound:
// total work / (threads x makespan), phase by phase). The plan for P threads is the plan the
// library makes on a machine with P threads; these figures show how a call would spread over
// many cores from a machine that has few.
//
//   attn-plan --shape B,Hq,Hkv,Lq,Lk,D [--causal]     a dense call
//   attn-plan --serving N,P,CHUNK,MIN,MAX,Hq,Hkv,D     a serving step: N sequences, P of them
//                                                       prefill chunks of CHUNK queries, the
//                                                       rest decoding one token, contexts
//                                                       spread evenly over [MIN, MAX] keys
//   options: --tasks (list every task), --isa sse4|avx2|avx512|avx512_bf16|amx, --bf16,
//            --expect P,E (exit 1 when the efficiency on P threads is below E)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "kernels/kernels.hpp"
#include "ops/sdpa_plan.hpp"

namespace {

bool parse_list(const char *s, std::vector<long long> &out, size_t n) {
    out.clear();
    const char *p = s;
    while (*p) {
        char *end = nullptr;
        const long long x = std::strtoll(p, &end, 10);
        if (end == p) return false;
        out.push_back(x);
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return false;
    }
    return out.size() == n;
}

int usage() {
    std::fprintf(stderr,
                 "usage: attn-plan --shape B,Hq,Hkv,Lq,Lk,D [--causal] | "
                 "--serving N,P,CHUNK,MIN,MAX,Hq,Hkv,D  [--tasks] [--isa NAME] [--bf16] "
                 "[--expect P,E]\n");
    return 2;
}

attn_isa isa_named(const char *name) {
    const std::pair<const char *, attn_isa> names[] = {
        {"sse4", ATTN_ISA_SSE4}, {"avx2", ATTN_ISA_AVX2}, {"avx512", ATTN_ISA_AVX512},
        {"avx512_bf16", ATTN_ISA_AVX512_BF16}, {"amx", ATTN_ISA_AMX}};
    for (auto [n, isa] : names)
        if (std::strcmp(n, name) == 0) return isa;
    return ATTN_ISA_AUTO;
}

// The call to plan, and the arrays its desc points into.
struct call_shape {
    attn_sdpa_desc d{};
    std::vector<int32_t> q_start, kv_len;
    std::string what;
};

call_shape dense_call(const std::vector<long long> &v, bool causal) {
    call_shape c;
    attn_sdpa_desc_init(&c.d, v[0], v[1], v[3], v[4], v[5]);
    c.d.heads_kv = v[2];
    c.d.causal = causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    c.what = "dense call B" + std::to_string(v[0]) + " H" + std::to_string(v[1]) + "/KV" +
             std::to_string(v[2]) + " Lq" + std::to_string(v[3]) + " Lk" + std::to_string(v[4]) +
             " D" + std::to_string(v[5]) + (causal ? " causal" : "");
    return c;
}

// N sequences; every (N / P)-th one a prefill chunk; contexts evenly over [MIN, MAX].
call_shape serving_call(const std::vector<long long> &v) {
    call_shape c;
    const long long n = v[0], prefills = v[1], chunk = v[2], lo = v[3], hi = v[4];
    c.q_start = {0};
    for (long long b = 0; b < n; ++b) {
        const bool prefill = prefills > 0 && b % std::max(1LL, n / prefills) == 0 &&
                             b / std::max(1LL, n / prefills) < prefills;
        c.q_start.push_back(c.q_start.back() + int32_t(prefill ? chunk : 1));
        c.kv_len.push_back(int32_t(lo + (n > 1 ? (hi - lo) * b / (n - 1) : 0)));
    }
    attn_sdpa_desc_init(&c.d, n, v[5], chunk, hi, v[7]);
    c.d.heads_kv = v[6];
    c.d.q_start = c.q_start.data();
    c.d.kv_len = c.kv_len.data();
    c.d.causal = ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN;
    c.what = "serving step of " + std::to_string(n) + " sequences (" + std::to_string(prefills) +
             " prefill chunks of " + std::to_string(chunk) + ", contexts " + std::to_string(lo) +
             ".." + std::to_string(hi) + "), H" + std::to_string(v[5]) + "/KV" +
             std::to_string(v[6]) + " D" + std::to_string(v[7]);
    return c;
}

void print_plan(const attn::ops::sdpa_plan &plan, bool all_tasks) {
    std::printf("%-5s %-6s %-7s %-6s %-7s %-7s %-11s %s\n", "seq", "rows", "keys", "tiles",
                "chunks", "chunk", "kernel", "tasks");
    for (size_t si = 0; si < plan.sequences.size(); ++si) {
        const attn::ops::sequence_plan &s = plan.sequences[si];
        const long long tasks = std::count_if(plan.tasks.begin(), plan.tasks.end(),
                                              [&](const auto &t) { return t.seq == int64_t(si); });
        std::printf("%-5lld %-6lld %-7lld %-6lld %-7lld %-7lld %-11s %lld\n", (long long)s.b,
                    (long long)s.queries, (long long)s.keys, (long long)(s.head_tiles * s.q_tiles),
                    (long long)s.chunks, (long long)s.chunk_keys,
                    s.impl->name, tasks);
    }
    std::printf("phases: %zu pack tasks, %zu tile tasks, %zu merge tasks\n",
                plan.pack_tasks.size(), plan.tasks.size(), plan.merges.size());
    if (!all_tasks) return;
    std::printf("%-6s %-5s %-4s %-12s %-6s %s\n", "task", "seq", "hk", "pairs", "chunk", "cost");
    for (size_t i = 0; i < plan.tasks.size(); ++i) {
        const attn::ops::sdpa_task &t = plan.tasks[i];
        std::printf("%-6zu %-5lld %-4lld [%lld,%lld) %-6lld %.4g\n", i, (long long)t.seq,
                    (long long)t.hk, (long long)t.pair_begin, (long long)t.pair_end,
                    (long long)t.chunk, t.cost);
    }
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<long long> v;
    bool causal = false, all_tasks = false, bf16 = false, have = false, serving = false;
    int expect_threads = 0;
    double expect_efficiency = 0.0;
    attn_isa isa = attn::kernels::best_supported_isa();
    for (int a = 1; a < argc; ++a) {
        const std::string arg = argv[a];
        if (arg == "--shape" && a + 1 < argc) {
            if (!parse_list(argv[++a], v, 6)) return usage();
            have = true;
        } else if (arg == "--serving" && a + 1 < argc) {
            if (!parse_list(argv[++a], v, 8)) return usage();
            have = serving = true;
        } else if (arg == "--expect" && a + 1 < argc) {
            if (std::sscanf(argv[++a], "%d,%lf", &expect_threads, &expect_efficiency) != 2 ||
                expect_threads < 1)
                return usage();
        } else if (arg == "--causal") {
            causal = true;
        } else if (arg == "--tasks") {
            all_tasks = true;
        } else if (arg == "--bf16") {
            bf16 = true;
        } else if (arg == "--isa" && a + 1 < argc) {
            isa = isa_named(argv[++a]);
            if (isa == ATTN_ISA_AUTO) return usage();
        } else {
            return usage();
        }
    }
    if (!have) return usage();
    for (long long x : v)
        if (x < (serving ? 0 : 1)) return usage();
    const attn::kernels::kernel_table *kt = attn::kernels::kernel_table_for(isa);
    if (!kt) return usage();
    const call_shape c = serving ? serving_call(v) : dense_call(v, causal);
    const attn::ops::plan_kernels k{&kt->attention_impls, kt->vector_floats, bf16};
    std::printf("%s\n", c.what.c_str());
    print_plan(attn::ops::plan_sdpa(c.d, k, 64), all_tasks);
    std::printf("threads  efficiency (list-scheduling bound: work / (threads x makespan))\n");
    for (const int p : {8, 16, 32, 64, 128})
        std::printf("%-8d %.3f\n", p, attn::ops::plan_efficiency(attn::ops::plan_sdpa(c.d, k, p), p));
    if (expect_threads > 0) {
        const double e = attn::ops::plan_efficiency(attn::ops::plan_sdpa(c.d, k, expect_threads),
                                                    expect_threads);
        if (e < expect_efficiency) {
            std::printf("efficiency %.3f on %d threads, expected >= %.3f\n", e, expect_threads,
                        expect_efficiency);
            return 1;
        }
    }
    return 0;
}
