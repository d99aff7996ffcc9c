// The softmax driver: rows are independent, so they are split among the context's threads
// in fixed chunks; each row is computed the same way whichever thread takes it.
#include <algorithm>
#include <cstdint>

#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "ref/ref.hpp"

namespace attn::ops {

void softmax(const exec &ex, int64_t rows, int64_t cols, float scale, const float *x,
             int64_t ldx, float *y, int64_t ldy) {
    if (rows == 0 || cols == 0) return;
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (kt == nullptr) {
        ref::softmax(rows, cols, scale, x, ldx, y, ldy);
        return;
    }
    // About 64 KiB of input per task: enough to hide the cost of handing it to a thread.
    const int64_t rows_per_task = std::max<int64_t>(1, 16384 / cols);
    exec run = ex;
    if (rows <= rows_per_task) run.arena = nullptr;
    parallel_for(run, rows, rows_per_task, [&](int64_t r0, int64_t r1) {
        kt->softmax_rows(r1 - r0, cols, scale, x + r0 * ldx, ldx, y + r0 * ldy, ldy);
    });
}

}  // namespace attn::ops
