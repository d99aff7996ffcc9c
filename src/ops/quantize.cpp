// The quantization driver (attn_quantize): blocks of rows in parallel, each row quantized by
// the ISA's kernel (src/kernels/quantize.hpp) or by the reference (src/ref/quantize.cpp).
// Every row is quantized alone, so neither the block size nor the threads change a bit of
// the result; a block holds about 64 Ki elements (enough to pay for a task).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "ref/ref.hpp"

namespace attn::ops {

namespace {

// x[0 .. n) holds a NaN or an infinity (no early exit: the loop vectorises).
bool any_not_finite(const float *x, int64_t n) {
    uint32_t all_ones_exponent = 0;
    for (int64_t c = 0; c < n; ++c) {
        uint32_t u;
        std::memcpy(&u, x + c, sizeof u);
        all_ones_exponent |= uint32_t((u & 0x7f800000u) == 0x7f800000u);
    }
    return all_ones_exponent != 0;
}

}  // namespace

quantize_fault quantize_find_fault(const exec &ex, int64_t rows, int64_t dim, const void *src,
                                   attn_dtype src_type, int64_t src_stride, int64_t group,
                                   bool asymmetric) {
    const kernels::kernel_table *kt = simd_kernels(ex);
    const int64_t g_len = group == 0 ? dim : group;
    const int64_t src_bytes = int64_t(attn_dtype_size(src_type));
    std::vector<float> x(static_cast<size_t>(dim));
    for (int64_t r = 0; r < rows; ++r) {
        // the row as f32 (exact), by the ISA's conversion or the reference's: the same bits
        const void *row = static_cast<const char *>(src) + r * src_stride * src_bytes;
        if (kt) kt->convert_array(dim, row, src_type, x.data(), ATTN_DTYPE_F32);
        else ref::convert(dim, row, src_type, x.data(), ATTN_DTYPE_F32);
        if (any_not_finite(x.data(), dim))
            for (int64_t c = 0; c < dim; ++c)
                if (!std::isfinite(x[size_t(c)])) return {r, c, false};
        if (!asymmetric) continue;  // only max |x| is used, which is finite
        for (int64_t c0 = 0; c0 < dim; c0 += g_len) {
            const auto [lo, hi] = std::minmax_element(x.begin() + c0, x.begin() + c0 + g_len);
            if (!std::isfinite(*hi - *lo)) return {r, c0, true};
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
