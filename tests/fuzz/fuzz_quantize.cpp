// attn_quantize in the API fuzzer: any shape, group, types, strides and zero-point choice,
// values with NaN, infinities and wide ranges now and then; rows written into buffers with
// guard bytes around them and gaps between rows. The contract checked:
//  - every path (the reference, one SIMD ISA with 1 and 2 threads) gives the same status;
//  - a rejected call sets a message and writes nothing (dst, scale and zero unchanged);
//  - an accepted call gives the same bits on every path and writes only the rows and groups
//    it quantizes (guards and gaps between rows untouched);
//  - a NaN or infinity in the rows quantized, or a U8 / U4 call without zero points, is
//    rejected.
#include <algorithm>
#include <cstring>
#include <vector>

#include "fuzz_decode.hpp"

namespace fuzz {

namespace {

constexpr uint8_t untouched = 0xA5;
constexpr int64_t guard = 64;  // bytes before and after every buffer

// The byte count of `elements` elements of type t (4-bit: rounded up).
int64_t bytes_of(int t, int64_t elements) {
    if (t == ATTN_DTYPE_F32) return elements * 4;
    if (t == ATTN_DTYPE_BF16 || t == ATTN_DTYPE_F16) return elements * 2;
    if (t == ATTN_DTYPE_I4 || t == ATTN_DTYPE_U4) return (elements + 1) / 2;
    return elements;
}

struct quantize_args {
    int64_t rows, dim, group, src_stride, dst_stride, scale_stride;
    int src_type, dst_type;
    bool with_zero;
};

quantize_args decode(FuzzedDataProvider &in) {
    quantize_args a;
    a.rows = in.ConsumeIntegralInRange<int64_t>(-1, in.ConsumeBool() ? 5 : 40);
    a.dim = in.ConsumeIntegralInRange<int64_t>(-1, in.ConsumeBool() ? 24 : 300);
    const int64_t dim = std::max<int64_t>(a.dim, 1);
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: a.group = 0; break;
    case 1: a.group = in.ConsumeIntegralInRange<int64_t>(-2, dim); break;  // maybe invalid
    default: {  // a divisor of dim
        std::vector<int64_t> divisors;
        for (int64_t g = 1; g <= dim; ++g)
            if (dim % g == 0) divisors.push_back(g);
        a.group = divisors[in.ConsumeIntegralInRange<size_t>(0, divisors.size() - 1)];
    }
    }
    const int s = in.ConsumeIntegralInRange<int>(0, 12);
    a.src_type = s < 12 ? s % 3 : 3 + in.ConsumeIntegralInRange<int>(0, 6);  // 3.. : invalid
    const int d = in.ConsumeIntegralInRange<int>(0, 13);
    a.dst_type = d < 12 ? 3 + d % 6 : (d == 12 ? ATTN_DTYPE_F32 : 9);
    a.with_zero = in.ConsumeBool();
    const int64_t groups = a.group > 0 ? dim / a.group : 1;
    a.src_stride = dim + in.ConsumeIntegralInRange<int64_t>(in.ConsumeIntegralInRange<int>(0, 9) == 0 ? -2 : 0, 5);
    a.dst_stride = dim + in.ConsumeIntegralInRange<int64_t>(in.ConsumeIntegralInRange<int>(0, 9) == 0 ? -2 : 0, 6);
    a.scale_stride = groups + in.ConsumeIntegralInRange<int64_t>(in.ConsumeIntegralInRange<int>(0, 9) == 0 ? -1 : 0, 3);
    return a;
}

}  // namespace

void fuzz_quantize(FuzzedDataProvider &in, value_source &src, attn_context *const ctx[3]) {
    const quantize_args a = decode(in);
    const int64_t rows = std::max<int64_t>(a.rows, 0), dim = std::max<int64_t>(a.dim, 0);
    const int64_t groups = a.group > 0 && dim % a.group == 0 ? dim / a.group : 1;
    const int64_t src_rows = std::max<int64_t>(a.src_stride, dim);
    const int src_t = a.src_type <= ATTN_DTYPE_F16 ? a.src_type : ATTN_DTYPE_F32;  // as sized
    std::vector<uint8_t> source(size_t(bytes_of(src_t, rows * src_rows) + 2 * guard), untouched);
    bool has_special = false;
    {
        std::vector<float> x(size_t(rows * src_rows));
        const float wide = in.ConsumeBool() ? 1e30f : 1.0f;
        for (auto &v : x) v = src.next() * wide;
        for (int k = in.ConsumeIntegralInRange<int>(0, 2); k > 0 && !x.empty(); --k) {
            const size_t at = in.ConsumeIntegralInRange<size_t>(0, x.size() - 1);
            const float kinds[] = {NAN, INFINITY, -INFINITY, 3e38f, -3e38f, 1e-42f};
            x[at] = kinds[in.ConsumeIntegralInRange<int>(0, 5)];
        }
        // after the planting: a later value may have overwritten an earlier special
        for (size_t at = 0; at < x.size(); ++at)
            has_special |= int64_t(at % size_t(src_rows)) < dim && !std::isfinite(x[at]);
        if (!x.empty() && attn_convert(nullptr, int64_t(x.size()), x.data(), ATTN_DTYPE_F32,
                                       source.data() + guard, attn_dtype(src_t)) != ATTN_OK)
            fail("quantize: setting up the source failed:", attn_last_error());
    }
    // a whole number of floats, so that the scales after dst are aligned as a caller's are
    const int64_t dst_bytes =
        (bytes_of(a.dst_type, rows * std::max<int64_t>(a.dst_stride, dim) + 1) + 3) / 4 * 4;
    const int64_t scale_floats = rows * std::max<int64_t>(a.scale_stride, groups) + 1;
    std::vector<uint8_t> initial(size_t(dst_bytes + 2 * (scale_floats * 4) + 6 * guard), untouched);
    std::vector<uint8_t> results[3];
    attn_status status[3];
    for (int k = 0; k < 3; ++k) {
        std::vector<uint8_t> out = initial;
        uint8_t *dst = out.data() + guard;
        float *scale = reinterpret_cast<float *>(dst + dst_bytes + 2 * guard);
        float *zero = reinterpret_cast<float *>(reinterpret_cast<uint8_t *>(scale) + scale_floats * 4 + 2 * guard);
        status[k] = attn_quantize(ctx[k], a.rows, a.dim, source.data() + guard, attn_dtype(a.src_type),
                                  a.src_stride, dst, attn_dtype(a.dst_type), a.dst_stride, scale,
                                  a.with_zero ? zero : nullptr, a.scale_stride, a.group);
        if (status[k] != ATTN_OK) {
            FUZZ_CHECK(attn_last_error()[0] != '\0', "quantize: a rejected call left no message");
            FUZZ_CHECK(out == initial, "quantize: a rejected call wrote");
        }
        results[k] = out;
    }
    FUZZ_CHECK(status[0] == status[1] && status[1] == status[2], "quantize: paths disagree on the status");
    if (status[0] != ATTN_OK) return;
    FUZZ_CHECK(!has_special || rows == 0 || dim == 0, "quantize: a NaN or infinity was accepted");
    FUZZ_CHECK(!((a.dst_type == ATTN_DTYPE_U8 || a.dst_type == ATTN_DTYPE_U4) && !a.with_zero) ||
                   rows == 0 || dim == 0,
               "quantize: U8 / U4 without zero points was accepted");
    FUZZ_CHECK(results[0] == results[1] && results[1] == results[2],
               "quantize: the reference and SIMD (1 and 2 threads) give different bits");
    // only the rows' bytes, scales and zeros changed
    const std::vector<uint8_t> &r = results[0];
    const int64_t bits = a.dst_type == ATTN_DTYPE_I4 || a.dst_type == ATTN_DTYPE_U4 ? 4 : 8;
    for (int64_t b = 0; b < dst_bytes + 2 * guard; ++b) {
        const int64_t e = b - guard;  // byte e of dst
        // its first element (an accepted call with rows > 1 and dim > 0 has stride >= dim)
        const int64_t first = e * 8 / bits;
        const int64_t row = rows > 1 && dim > 0 ? first / a.dst_stride : 0;
        const bool written = e >= 0 && e < dst_bytes && row < rows && first - row * a.dst_stride < dim;
        if (!written) FUZZ_CHECK(r[size_t(b)] == untouched, "quantize: wrote outside the rows of dst");
    }
    const uint8_t *scale_bytes = r.data() + guard + dst_bytes + 2 * guard;
    for (int arr = 0; arr < 2; ++arr) {
        const uint8_t *p = scale_bytes + arr * (scale_floats * 4 + 2 * guard);
        for (int64_t f = 0; f < scale_floats; ++f) {
            const int64_t row = rows > 1 && dim > 0 ? f / a.scale_stride : 0;
            const bool written = (arr == 0 || a.with_zero) && dim > 0 && row < rows &&
                                 f - row * a.scale_stride < groups;
            if (!written)
                for (int i = 0; i < 4; ++i)
                    FUZZ_CHECK(p[f * 4 + i] == untouched, "quantize: wrote outside the scales");
        }
    }
}

}  // namespace fuzz
