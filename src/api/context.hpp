// attn_context: what a compute call runs with. Created by attn_context_create from an
// attn_config; NULL in a compute call means the process-wide default context.
#pragma once

#include <memory>

#include <tbb/task_arena.h>

#include "attn/attn.h"
#include "ops/ops.hpp"
#include "ops/workspace.hpp"

struct attn_context {
    attn_impl impl = ATTN_IMPL_AUTO;  // as requested (never resolved further)
    bool reference = true;            // the scalar reference path runs every op
    attn_isa isa = ATTN_ISA_SCALAR;   // resolved: never ATTN_ISA_AUTO
    int num_threads = 1;              // >= 1: the arena's concurrency, <= the hardware
    attn_fpmath fpmath = ATTN_FPMATH_STRICT;
    std::unique_ptr<tbb::task_arena> arena;
    // what its calls keep for the next ones (ops/workspace.hpp): a pool shared by the calls
    // running on it, each taking a workspace of its own for its duration
    mutable attn::ops::workspace_pool workspaces;
};

namespace attn::api {

// Validates `cfg` (NULL = defaults) and builds a context. On failure returns the status,
// leaves *out untouched and sets the last error, naming `function`. May throw
// std::bad_alloc or a TBB exception (callers run inside guarded()).
attn_status make_context(const char *function, const attn_config *cfg,
                         std::unique_ptr<attn_context> &out);

// ctx itself, or the process-wide default context when ctx is NULL (created on first use,
// thread-safe, never destroyed: TBB may already be shut down during static destruction).
// Throws what make_context throws; the default configuration cannot fail validation.
const attn_context &context_or_default(const attn_context *ctx);

// What the drivers in src/ops need from a context.
attn::ops::exec exec_for(const attn_context &ctx);

// "amx", "avx512_bf16", "avx512", "avx2", "sse4", "scalar"; "unknown" outside the enum.
const char *isa_name(attn_isa isa);

}  // namespace attn::api
