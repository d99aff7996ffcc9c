// The quantization driver (attn_quantize): blocks of rows in parallel, each row quantized by
// the ISA's kernel (src/kernels/quantize.hpp) or by the reference (src/ref/quantize.cpp).
// Every row is quantized alone, so neither the block size nor the threads change a bit of
// the result; a block holds about 64 Ki elements (enough to pay for a task).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "ref/ref.hpp"

namespace attn::ops {

quantize_fault quantize_find_fault(int64_t rows, int64_t dim, const void *src,
                                   attn_dtype src_type, int64_t src_stride, int64_t group,
                                   bool asymmetric) {
    const int64_t g_len = group == 0 ? dim : group;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t at = r * src_stride;
        for (int64_t c = 0; c < dim; ++c)
            if (!std::isfinite(ref::load_element(src, src_type, at + c))) return {r, c, false};
        if (!asymmetric) continue;  // only max |x| is used, which is finite
        for (int64_t c0 = 0; c0 < dim; c0 += g_len) {
            float lo = ref::load_element(src, src_type, at + c0), hi = lo;
            for (int64_t c = c0 + 1; c < c0 + g_len; ++c) {
                const float x = ref::load_element(src, src_type, at + c);
                lo = std::min(lo, x);
                hi = std::max(hi, x);
            }
            if (!std::isfinite(hi - lo)) return {r, c0, true};
        }
    }
    return {};
}

void quantize(const exec &ex, int64_t rows, int64_t dim, const void *src, attn_dtype src_type,
              int64_t src_stride, void *dst, attn_dtype dst_type, int64_t dst_stride,
              float *scale, float *zero, int64_t scale_stride, int64_t group) {
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (kt == nullptr) {
        ref::quantize(rows, dim, src, src_type, src_stride, dst, dst_type, dst_stride, scale,
                      zero, scale_stride, group);
        return;
    }
    const int64_t block_rows = std::max<int64_t>(1, (int64_t{1} << 16) / dim);
    const int64_t blocks = (rows + block_rows - 1) / block_rows;
    const int64_t src_bytes = int64_t(attn_dtype_size(src_type));
    const int64_t dst_bits = int64_t(attn_dtype_bits(dst_type));
    parallel_tasks(ex, blocks, [&](int64_t t) {
        const int64_t w = kt->vector_floats;
        std::vector<float> scratch(size_t(kernels::quantize_scratch_floats(dim, w)));
        std::vector<int32_t> codes(size_t(kernels::quantize_scratch_codes(dim, w)));
        const int64_t r0 = t * block_rows, n = std::min(block_rows, rows - r0);
        kt->quantize_rows(n, dim, static_cast<const char *>(src) + r0 * src_stride * src_bytes,
                          src_type, src_stride,
                          static_cast<char *>(dst) + r0 * dst_stride * dst_bits / 8, dst_type,
                          dst_stride, scale + r0 * scale_stride,
                          zero ? zero + r0 * scale_stride : nullptr, scale_stride, group,
                          scratch.data(), codes.data());
    });
}

}  // namespace attn::ops
