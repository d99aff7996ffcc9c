// attn-demo: the worked example of "Attention and Self-Attention", live, through the public
// C API. Exit status: 0 all checks pass, 1 a check or a library call failed, 2 bad options.
#include <cstdio>

#include "demo.hpp"

namespace {

const char *impl_name(attn_impl impl) {
    switch (impl) {
        case ATTN_IMPL_REFERENCE: return "reference";
        case ATTN_IMPL_SIMD: return "simd";
        default: return "auto";
    }
}

struct context_guard {
    attn_context *ctx = nullptr;
    ~context_guard() { attn_context_destroy(ctx); }
};

}  // namespace

int main(int argc, char **argv) {
    if (demo::help_requested(argc, argv)) {
        std::fputs(demo::usage().c_str(), stdout);
        return 0;
    }
    demo::options opt;
    try {
        opt = demo::parse_options(argc, argv);
    } catch (const demo::usage_error &e) {
        std::fprintf(stderr, "attn-demo: %s (try --help)\n", e.what());
        return 2;
    }

    try {
        attn_config cfg;
        attn_config_init(&cfg);
        cfg.impl = opt.impl;
        cfg.max_isa = opt.isa;
        cfg.num_threads = opt.threads;
        context_guard guard;
        demo::check(attn_context_create(&cfg, &guard.ctx), "attn_context_create");

        std::printf("attn %s - implementation: %s, ISA: %s, threads: %d\n\n", attn_version(),
                    impl_name(opt.impl), attn_context_isa(guard.ctx),
                    attn_context_num_threads(guard.ctx));

        bool ok = demo::walkthrough(guard.ctx, opt);
        ok = demo::rotation_experiment(guard.ctx, opt) && ok;
        ok = demo::dimension_experiment(guard.ctx, opt) && ok;
        std::printf("\n%s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
        return ok ? 0 : 1;
    } catch (const demo::attn_failure &e) {
        std::fflush(stdout);
        std::fprintf(stderr, "attn-demo: %s\n", e.what());
        return 1;
    }
}
