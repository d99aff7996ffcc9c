// The conversion driver (attn_convert): fixed blocks of elements in parallel, each block
// converted by the ISA's kernel (src/kernels/convert.hpp), or element by element by the
// reference (src/core/convert.hpp). Every element is converted alone, so neither the block
// size nor the threads change a bit of the result; the block size only balances the work
// (64 Ki elements: 256 KiB of f32, enough to pay for a task, small enough to share).
#include <cstring>

#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "ref/ref.hpp"

namespace attn::ops {

namespace {
constexpr int64_t convert_block = int64_t{1} << 16;
}

void convert(const exec &ex, int64_t n, const void *src, attn_dtype src_type, void *dst,
             attn_dtype dst_type) {
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (kt == nullptr) {
        ref::convert(n, src, src_type, dst, dst_type);
        return;
    }
    if (src_type == dst_type && src == dst) return;  // in place, same type: nothing to do
    const int64_t sb = int64_t(attn_dtype_size(src_type)), db = int64_t(attn_dtype_size(dst_type));
    // In place (bf16 <-> f16) each block reads and writes only its own elements.
    const int64_t blocks = (n + convert_block - 1) / convert_block;
    parallel_tasks(ex, blocks, [&](int64_t t) {
        const int64_t i0 = t * convert_block;
        const int64_t len = n - i0 < convert_block ? n - i0 : convert_block;
        kt->convert_array(len, static_cast<const unsigned char *>(src) + i0 * sb, src_type,
                          static_cast<unsigned char *>(dst) + i0 * db, dst_type);
    });
}

}  // namespace attn::ops
