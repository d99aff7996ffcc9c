// attn_quantize, the oracle: each group's range found element by element, then each element
// quantized by attn.h's rules (core/quantized_elements.hpp).
#include <algorithm>
#include <cmath>

#include "core/quantized_elements.hpp"
#include "ref/ref.hpp"

namespace attn::ref {
namespace {

// The stored code of x (already divided by the scale, and shifted by the zero point for an
// asymmetric group), for the integer types and FP8.
int quantized_code(float v, attn_dtype t, bool asymmetric) {
    if (t == ATTN_DTYPE_FP8_E4M3) return quant::f32_to_fp8_e4m3(v);
    if (t == ATTN_DTYPE_FP8_E5M2) return quant::f32_to_fp8_e5m2(v);
    const quant::int_range r = quant::integer_range(t);
    const float lo = asymmetric ? float(r.qmin) : -float(r.qmax), hi = float(r.qmax);
    return int(std::nearbyint(std::min(std::max(v, lo), hi)));  // ties to even
}

void store_code(void *dst, attn_dtype t, int64_t e, int code) {
    if (t == ATTN_DTYPE_I4 || t == ATTN_DTYPE_U4)
        quant::nibble_set(static_cast<uint8_t *>(dst), e, code);
    else if (t == ATTN_DTYPE_I8)
        static_cast<int8_t *>(dst)[e] = int8_t(code);
    else
        static_cast<uint8_t *>(dst)[e] = uint8_t(code);
}

}  // namespace

void quantize(int64_t rows, int64_t dim, const void *src, attn_dtype src_type,
              int64_t src_stride, void *dst, attn_dtype dst_type, int64_t dst_stride,
              float *scale, float *zero, int64_t scale_stride, int64_t group) {
    const int64_t g_len = group == 0 ? dim : group;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g * g_len < dim; ++g) {
            const int64_t c0 = g * g_len;
            auto x = [&](int64_t c) {  // element c of the group
                return load_element(src, src_type, r * src_stride + c0 + c);
            };
            float lo = x(0), hi = x(0), max_abs = std::fabs(x(0));
            for (int64_t c = 1; c < g_len; ++c) {
                lo = std::min(lo, x(c));
                hi = std::max(hi, x(c));
                max_abs = std::max(max_abs, std::fabs(x(c)));
            }
            const quant::group_params p = zero ? quant::asymmetric_params(lo, hi, dst_type)
                                               : quant::symmetric_params(max_abs, dst_type);
            const bool asymmetric = zero != nullptr;
            for (int64_t c = 0; c < g_len; ++c) {
                int code = 0;  // a group of scale 0 stores zeros
                if (p.scale != 0.0f) {
                    // symmetric: no zero is added (x = -0 stays -0, an FP8 -0)
                    const float v = asymmetric ? x(c) / p.scale + p.zero : x(c) / p.scale;
                    code = quantized_code(v, dst_type, asymmetric);
                }
                store_code(dst, dst_type, r * dst_stride + c0 + c, code);
            }
            scale[r * scale_stride + g] = p.scale;
            if (zero) zero[r * scale_stride + g] = p.zero;
        }
    }
}

}  // namespace attn::ref
