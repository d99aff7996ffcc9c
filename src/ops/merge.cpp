// attn_merge_f32 on the SIMD path: rows are independent, so any split of them over the
// threads gives the same bits; the kernel sums the parts in index order.
#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "ref/ref.hpp"

namespace attn::ops {

void merge(const exec &ex, int64_t parts, int64_t rows, int64_t dim_v, const float *const *outs,
           const float *const *lses, float *out, float *lse) {
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (!kt) {
        ref::merge(parts, rows, dim_v, outs, lses, out, lse);
        return;
    }
    // About 64 KB of parts per chunk of rows: enough work to be worth a task.
    const int64_t per_row = parts * (dim_v + 1);
    const int64_t grain = per_row >= 16384 ? 1 : 16384 / per_row;
    parallel_for(ex, rows, grain, [&](int64_t begin, int64_t end) {
        kt->attention_merge_rows(parts, begin, end - begin, dim_v, outs, dim_v, lses,
                                 out + begin * dim_v, dim_v, lse ? lse + begin : nullptr);
    });
}

}  // namespace attn::ops
