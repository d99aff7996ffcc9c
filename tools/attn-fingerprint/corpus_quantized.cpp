// The corpus of attn_sdpa over quantized KV caches (its cases named quantized_...): each cache
// (a type and a granularity, quantized by attn_quantize from the case's f32 K and V) on a
// one-row decoding shape, a grouped decoding shape (4 query heads a KV head) and a causal
// prefill with bf16 queries.
#include <string>

#include "problem.hpp"

namespace attn_fingerprint {
namespace {

struct cache_kind {
    const char *name;
    attn_dtype type;
    int64_t group;  // 0: a scale per row
    bool zeros;
};

// rows x dim f32 values at src into codes of `kind` (dim elements a row) with their scales (and
// zero points), a scale per group: the layout attn_sdpa reads with scale strides {.., .., dim / g}.
struct quantized {
    std::vector<unsigned char> codes;
    std::vector<float> scale, zero;
    int64_t per_row = 1;
    attn_status status = ATTN_OK;
    quantized(attn_context *ctx, const cache_kind &kind, const float *src, int64_t rows, int64_t dim) {
        const int64_t group = kind.group ? kind.group : dim;
        per_row = dim / group;
        codes.assign(size_t(rows * dim * attn_dtype_bits(kind.type) / 8), 0);
        scale.assign(size_t(rows * per_row), 0.0f);
        if (kind.zeros) zero.assign(scale.size(), 0.0f);
        status = attn_quantize(ctx, rows, dim, src, ATTN_DTYPE_F32, dim, codes.data(), kind.type, dim,
                               scale.data(), kind.zeros ? zero.data() : nullptr, per_row, group);
    }
};

}  // namespace

void corpus_sdpa_quantized(attn_context *ctx, record &rec) {
    const cache_kind kinds[] = {{"I8_row", ATTN_DTYPE_I8, 0, false},
                                {"I8_g32", ATTN_DTYPE_I8, 32, false},
                                {"U8_g32_zeros", ATTN_DTYPE_U8, 32, true},
                                {"I4_g32", ATTN_DTYPE_I4, 32, false},
                                {"U4_g32_zeros", ATTN_DTYPE_U4, 32, true},
                                {"E4M3_row", ATTN_DTYPE_FP8_E4M3, 0, false},
                                {"E5M2_row", ATTN_DTYPE_FP8_E5M2, 0, false}};
    std::vector<std::pair<sdpa_case, attn_dtype>> shapes;  // and the queries' type
    shapes.push_back({shape("decode_one_row", 1, 4, 4, 1, 700, 128, 128), ATTN_DTYPE_F32});
    shapes.push_back({shape("decode_grouped", 1, 8, 2, 1, 700, 64, 64), ATTN_DTYPE_F32});
    auto prefill = shape("prefill_causal", 1, 2, 1, 70, 70, 64, 64);
    prefill.causal = ATTN_CAUSAL_TOP_LEFT, prefill.lse = true;
    shapes.push_back({prefill, ATTN_DTYPE_BF16});
    for (const auto &[c, q_type] : shapes)
        for (const cache_kind &kind : kinds) {
            rec.begin("attn_sdpa", "quantized_" + c.name + "_" + kind.name);
            problem p(c, q_type, ATTN_DTYPE_F32, q_type);
            const int64_t k_rows = p.k_elems / c.dim_qk, v_rows = p.v_elems / c.dim_v;
            const quantized k(ctx, kind, reinterpret_cast<const float *>(p.k.data()), k_rows, c.dim_qk);
            const quantized v(ctx, kind, reinterpret_cast<const float *>(p.v.data()), v_rows, c.dim_v);
            rec.status(k.status);
            rec.status(v.status);
            p.d.kv_type = kind.type;
            p.d.k_scale = k.scale.data();
            p.d.v_scale = v.scale.data();
            p.d.k_zero = kind.zeros ? k.zero.data() : nullptr;
            p.d.v_zero = kind.zeros ? v.zero.data() : nullptr;
            p.d.k_group = c.dim_qk / k.per_row;
            p.d.v_group = c.dim_v / v.per_row;
            p.d.k_scale_strides = attn_layout{c.heads_kv * c.len_kv * k.per_row,
                                              c.len_kv * k.per_row, k.per_row};
            p.d.v_scale_strides = attn_layout{c.heads_kv * c.len_kv * v.per_row,
                                              c.len_kv * v.per_row, v.per_row};
            rec.status(attn_sdpa(ctx, &p.d, p.q.data(), k.codes.data(), v.codes.data(), p.out.data()));
            p.record_outputs(rec);
            rec.end();
        }
}

}  // namespace attn_fingerprint
