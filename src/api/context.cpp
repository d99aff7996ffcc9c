// Contexts: resolve the requested implementation and ISA cap against this CPU, and own the
// TBB arena every compute call of the context runs in.
#include "api/context.hpp"

#include <algorithm>

#include <tbb/info.h>

#include "api/error.hpp"
#include "api/validate.hpp"
#include "kernels/kernels.hpp"

namespace attn::api {

const char *isa_name(attn_isa isa) {
    switch (isa) {
    case ATTN_ISA_AMX_EMULATED: return "amx_emulated";
    case ATTN_ISA_AMX: return "amx";
    case ATTN_ISA_AVX512_BF16: return "avx512_bf16";
    case ATTN_ISA_AVX512: return "avx512";
    case ATTN_ISA_AVX2: return "avx2";
    case ATTN_ISA_SSE4: return "sse4";
    case ATTN_ISA_SCALAR: return "scalar";
    case ATTN_ISA_AUTO: return "auto";
    }
    return "unknown";
}

attn_status make_context(const char *function, const attn_config *cfg,
                         std::unique_ptr<attn_context> &out) {
    attn_config c;
    attn_config_init(&c);
    if (cfg) c = *cfg;

    const int impl = enum_int(c.impl), max_isa = enum_int(c.max_isa);
    if (impl != ATTN_IMPL_AUTO && impl != ATTN_IMPL_REFERENCE && impl != ATTN_IMPL_SIMD) {
        set_last_error("%s: cfg->impl = %d, must be ATTN_IMPL_AUTO (0), ATTN_IMPL_REFERENCE (1) "
                       "or ATTN_IMPL_SIMD (2)",
                       function, impl);
        return ATTN_INVALID_ARGUMENT;
    }
    if (max_isa < ATTN_ISA_AUTO || max_isa > ATTN_ISA_AMX_EMULATED) {
        set_last_error("%s: cfg->max_isa = %d, must be in [ATTN_ISA_AUTO (0), "
                       "ATTN_ISA_AMX_EMULATED (7)]",
                       function, max_isa);
        return ATTN_INVALID_ARGUMENT;
    }
    const int fpmath = enum_int(c.fpmath);
    if (fpmath != ATTN_FPMATH_STRICT && fpmath != ATTN_FPMATH_BF16) {
        set_last_error("%s: cfg->fpmath = %d, must be ATTN_FPMATH_STRICT (0) or "
                       "ATTN_FPMATH_BF16 (1)",
                       function, fpmath);
        return ATTN_INVALID_ARGUMENT;
    }
    if (c.num_threads < 0) {
        set_last_error("%s: cfg->num_threads = %d, must be >= 0 (0 = all hardware threads)",
                       function, c.num_threads);
        return ATTN_INVALID_ARGUMENT;
    }

    auto ctx = std::make_unique<attn_context>();
    ctx->impl = c.impl;
    ctx->fpmath = c.fpmath;
    if (c.impl == ATTN_IMPL_REFERENCE) {
        // The reference is scalar code on every CPU: the ISA cap does not apply to it.
        ctx->reference = true;
        ctx->isa = ATTN_ISA_SCALAR;
    } else {
        const attn_isa best = attn::kernels::best_supported_isa();
        // amx_emulated (above amx in number) runs wherever avx512_bf16 does.
        if (c.max_isa != ATTN_ISA_AUTO && !attn::kernels::isa_supported(c.max_isa)) {
            set_last_error("%s: cfg->max_isa = %s, this CPU supports at most %s", function,
                           isa_name(c.max_isa), isa_name(best));
            return ATTN_UNSUPPORTED;
        }
        ctx->isa = c.max_isa == ATTN_ISA_AUTO ? best : c.max_isa;
        // A scalar cap means no vector kernels: the reference is the scalar path.
        ctx->reference = ctx->isa == ATTN_ISA_SCALAR;
    }

    // "At most n": TBB never runs more threads than the hardware offers (it ignores, with a
    // warning, requests beyond that), so the arena and the reported count are clamped to it.
    const int hardware = std::max(1, tbb::info::default_concurrency());
    ctx->num_threads = c.num_threads == 0 ? hardware : std::min(c.num_threads, hardware);
    // One slot is reserved for the calling thread, so an arena of 1 never uses a worker.
    ctx->arena = std::make_unique<tbb::task_arena>(ctx->num_threads);
    ctx->arena->initialize();

    out = std::move(ctx);
    return ATTN_OK;
}

const attn_context &context_or_default(const attn_context *ctx) {
    if (ctx) return *ctx;
    // Function-local static: initialised once, thread-safely; if creation throws, the next
    // call tries again. Deliberately leaked (see context.hpp).
    static const attn_context *const default_context = [] {
        std::unique_ptr<attn_context> c;
        if (make_context("attn default context", nullptr, c) != ATTN_OK)
            throw std::runtime_error("the default context could not be created");
        return c.release();
    }();
    return *default_context;
}

attn::ops::exec exec_for(const attn_context &ctx) {
    attn::ops::exec ex;
    ex.reference = ctx.reference;
    ex.isa = ctx.isa;
    ex.arena = ctx.arena.get();
    ex.num_threads = ctx.num_threads;
    ex.fpmath = ctx.fpmath;
    ex.workspaces = &ctx.workspaces;
    return ex;
}

}  // namespace attn::api

extern "C" {

void attn_config_init(attn_config *cfg) {
    if (!cfg) return;
    cfg->impl = ATTN_IMPL_AUTO;
    cfg->max_isa = ATTN_ISA_AUTO;
    cfg->num_threads = 0;
    cfg->fpmath = ATTN_FPMATH_STRICT;
}

attn_status attn_context_create(const attn_config *cfg, attn_context **ctx) {
    static const char *const fn = "attn_context_create";
    return attn::api::guarded(fn, [&] {
        if (!ctx) {
            attn::api::set_last_error("%s: ctx = NULL, must point to where the context goes", fn);
            return ATTN_INVALID_ARGUMENT;
        }
        std::unique_ptr<attn_context> made;
        const attn_status s = attn::api::make_context(fn, cfg, made);
        if (s == ATTN_OK) *ctx = made.release();
        return s;
    });
}

void attn_context_destroy(attn_context *ctx) { delete ctx; }

const char *attn_context_isa(const attn_context *ctx) {
    try {
        return attn::api::isa_name(attn::api::context_or_default(ctx).isa);
    } catch (...) {
        // Without a default context, nothing runs; report what the fallback would be.
        attn::api::set_last_error("attn_context_isa: the default context could not be created");
        return "scalar";
    }
}

int attn_context_num_threads(const attn_context *ctx) {
    try {
        return attn::api::context_or_default(ctx).num_threads;
    } catch (...) {
        attn::api::set_last_error(
            "attn_context_num_threads: the default context could not be created");
        return 1;
    }
}

}  // extern "C"
