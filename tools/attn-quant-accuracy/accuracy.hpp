// attn-quant-accuracy: how much a quantized K/V cache changes attention's output, per element
// type and scale granularity, through the public C API only (attn_quantize, attn_sdpa).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/attn.h"

namespace attn_quant_accuracy {

// q [batch, heads_q, len_q, dim], k and v [batch, heads_kv, len_kv, dim], all dense BHSD.
struct shape {
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim;
};

// Which elements share one scale (and zero point), as attn_sdpa_desc can express it:
//   row      one per key row (group 0)
//   group32  one per 32 consecutive elements of a row
//   channel  one per channel of a (batch, kv head) over all its rows; a 4-bit type has one per
//            pair of channels (attn.h: the group of a 4-bit type is even)
//   head     one per (batch, kv head)
//   tensor   one for the whole cache
enum class granularity { row, group32, channel, head, tensor };
const char *granularity_name(granularity g);
bool parse_granularity(const std::string &s, granularity &g);

// A K/V element type, symmetric (zero == false) or with zero points.
struct kv_format {
    const char *name;
    attn_dtype type;
    bool zero;
};

// One side (K or V) of a quantized cache: the codes in dense BHSD order (element e in byte
// e * bits / 8, 4-bit low nibble first), the scales and zero points, and where attn_sdpa finds
// them (scale strides and group of the descriptor).
struct quantized_side {
    std::vector<uint8_t> codes;
    std::vector<float> scale, zero;  // zero is empty without zero points
    attn_layout strides{0, 0, 0};
    int64_t group = 0;
};

// Quantizes x, dense [batch, heads, len, dim], with attn_quantize: every set of elements that
// shares a scale under g is gathered into one row and quantized as one group (so the scale is
// max|x| / qmax of that set, or its [min, max] with zero points, by attn_quantize's rules).
attn_status quantize_side(const std::vector<float> &x, int64_t batch, int64_t heads,
                          int64_t len, int64_t dim, const kv_format &f, granularity g,
                          quantized_side &out);

// attn_sdpa over the quantized cache (q and out f32), causal aligned at the end of the keys
// (ATTN_CAUSAL_BOTTOM_RIGHT: with len_q = 1 every key is seen).
attn_status attention_quantized(attn_context *ctx, const shape &s, const std::vector<float> &q,
                                attn_dtype type, const quantized_side &k,
                                const quantized_side &v, std::vector<float> &out);

// The same attention over K and V stored as kv_type (F32 or BF16, rounded by attn_convert).
attn_status attention_stored(attn_context *ctx, const shape &s, const std::vector<float> &q,
                             const std::vector<float> &k, const std::vector<float> &v,
                             attn_dtype kv_type, std::vector<float> &out);

// The same attention in float64 over the f32 values of q, k, v: the yardstick.
std::vector<double> attention_exact(const shape &s, const std::vector<float> &q,
                                    const std::vector<float> &k, const std::vector<float> &v);

// ||got - want||_2 / ||want||_2 over all elements.
double normwise_error(const std::vector<float> &got, const std::vector<double> &want);

}  // namespace attn_quant_accuracy
