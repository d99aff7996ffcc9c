// attn-memcheck: the peak memory of one attn_sdpa_f32 call (no weights), against the bound
//   peak RSS <= RSS before the inputs + inputs + outputs + 64 MB
// Usage: attn-memcheck [--backward] [B H L D [threads]]   (default 1 8 16384 64 1; q, k, v, out
// are [B, H, L, D] fp32). --backward: the same for attn_sdpa_backward_f32 after a forward, its
// inputs q, k, v, out, dout, lse and outputs dq, dk, dv. Prints the figures in MB (10^6 bytes);
// exit status 0 within the bound, 1 over it or when the call fails, 2 bad arguments.
#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "attn/attn.h"

namespace {

// The process's peak resident set so far, in bytes (Linux reports kilobytes).
double peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_maxrss) * 1024.0;
}

}  // namespace

int main(int argc, char **argv) {
    int64_t dims[4] = {1, 8, 16384, 64};
    int threads = 1;
    const bool backward = argc > 1 && std::strcmp(argv[1], "--backward") == 0;
    if (backward) {
        --argc;
        ++argv;
    }
    if (argc != 1 && argc != 5 && argc != 6) {
        std::fprintf(stderr, "usage: attn-memcheck [--backward] [B H L D [threads]]\n");
        return 2;
    }
    for (int i = 1; i < argc && i < 5; ++i) dims[i - 1] = std::atoll(argv[i]);
    if (argc == 6) threads = std::atoi(argv[5]);
    for (int64_t x : dims)
        if (x <= 0) {
            std::fprintf(stderr, "attn-memcheck: dimensions must be positive\n");
            return 2;
        }

    attn_config cfg;
    attn_config_init(&cfg);
    cfg.num_threads = threads;
    attn_context *ctx = nullptr;
    if (attn_context_create(&cfg, &ctx) != ATTN_OK) {
        std::fprintf(stderr, "attn-memcheck: %s\n", attn_last_error());
        return 1;
    }
    const double before = peak_rss_bytes();

    const size_t n = size_t(dims[0] * dims[1] * dims[2] * dims[3]);
    // Every page written now, so the inputs and the output count fully before the call.
    std::vector<float> q(n), k(n), v(n), out(n);
    const size_t nb = backward ? n : 0, rows = backward ? size_t(dims[0] * dims[1] * dims[2]) : 0;
    std::vector<float> dout(nb), dq(nb), dk(nb), dv(nb), lse(rows);
    for (size_t i = 0; i < n; ++i) {
        q[i] = float(i % 17) * 0.05f - 0.4f;
        k[i] = float(i % 13) * 0.07f - 0.4f;
        v[i] = float(i % 11) * 0.1f - 0.5f;
    }
    for (size_t i = 0; i < nb; ++i) dout[i] = float(i % 7) * 0.1f - 0.3f, dq[i] = dk[i] = dv[i] = 0.0f;
    const double data = (backward ? 8.0 : 4.0) * double(n) * sizeof(float) + double(rows) * sizeof(float);

    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, dims[0], dims[1], dims[2], dims[2], dims[3]);
    d.lse = backward ? lse.data() : nullptr;
    attn_status s = attn_sdpa_f32(ctx, &d, q.data(), k.data(), v.data(), out.data());
    d.lse = nullptr;
    if (backward && s == ATTN_OK)
        s = attn_sdpa_backward_f32(ctx, &d, q.data(), k.data(), v.data(), out.data(), dout.data(),
                                   lse.data(), dq.data(), dk.data(), dv.data());
    attn_context_destroy(ctx);
    if (s != ATTN_OK) {
        std::fprintf(stderr, "attn-memcheck: %s\n", attn_last_error());
        return 1;
    }

    const double peak = peak_rss_bytes(), bound = before + data + 64e6;
    std::printf("%s B=%lld H=%lld L=%lld D=%lld threads=%d\n",
                backward ? "attn_sdpa_backward_f32" : "attn_sdpa_f32", (long long)dims[0],
                (long long)dims[1], (long long)dims[2], (long long)dims[3], threads);
    std::printf("rss before inputs   %8.1f MB\n", before / 1e6);
    std::printf("inputs + outputs    %8.1f MB\n", data / 1e6);
    std::printf("peak rss            %8.1f MB\n", peak / 1e6);
    std::printf("above data          %8.1f MB (bound 64.0 MB)\n", (peak - before - data) / 1e6);
    return peak <= bound ? 0 : 1;
}
