// Quantizing a K or V tensor at each granularity, and attention over it: attn_sdpa on the
// quantized cache, on an f32 or bf16 cache, and in float64.
#include <cmath>
#include <cstring>

#include "accuracy.hpp"

namespace attn_quant_accuracy {

const char *granularity_name(granularity g) {
    switch (g) {
    case granularity::row: return "row";
    case granularity::group32: return "g32";
    case granularity::channel: return "channel";
    case granularity::head: return "head";
    case granularity::tensor: return "tensor";
    }
    return "?";
}

bool parse_granularity(const std::string &s, granularity &g) {
    for (granularity c : {granularity::row, granularity::group32, granularity::channel,
                          granularity::head, granularity::tensor})
        if (s == granularity_name(c)) {
            g = c;
            return true;
        }
    return false;
}

namespace {

// The sets of elements that share a scale: `rows` sets of `dim` elements each, set r holding
// the elements order[r * dim .. r * dim + dim - 1] of the dense tensor (empty order: the
// tensor's own order), and the descriptor's scale strides and group that address set r's
// scale at index r (attn_quantize writes set r's scale at [r]).
struct scale_sets {
    int64_t rows = 0, dim = 0, group = 0;
    attn_layout strides{0, 0, 0};
    std::vector<int64_t> order;
};

scale_sets sets_for(granularity g, int64_t batch, int64_t heads, int64_t len, int64_t dim,
                    int64_t bits) {
    scale_sets s;
    switch (g) {
    case granularity::row:
    case granularity::group32: {
        // attn_quantize's own groups: one row per key, one scale per group of the row
        const int64_t groups = g == granularity::row ? 1 : dim / 32;
        s.rows = batch * heads * len, s.dim = dim, s.group = g == granularity::row ? 0 : 32;
        s.strides = {heads * len * groups, len * groups, groups};
        return s;
    }
    case granularity::channel: {
        // one set per (batch, head, channel group): all its rows' elements of those channels
        const int64_t width = bits == 4 ? 2 : 1, per_head = dim / width;
        s.rows = batch * heads * per_head, s.dim = len * width, s.group = width;
        s.strides = {heads * per_head, per_head, 0};
        s.order.resize(size_t(s.rows * s.dim));
        size_t i = 0;
        for (int64_t bh = 0; bh < batch * heads; ++bh)
            for (int64_t p = 0; p < per_head; ++p)
                for (int64_t j = 0; j < len; ++j)
                    for (int64_t t = 0; t < width; ++t)
                        s.order[i++] = (bh * len + j) * dim + p * width + t;
        return s;
    }
    case granularity::head:
        s.rows = batch * heads, s.dim = len * dim, s.strides = {heads, 1, 0};
        return s;
    case granularity::tensor:
        s.rows = 1, s.dim = batch * heads * len * dim;
        return s;
    }
    return s;
}

int code_at(const std::vector<uint8_t> &codes, int64_t e, int64_t bits) {
    return bits == 8 ? codes[size_t(e)] : (codes[size_t(e / 2)] >> (4 * (e & 1))) & 15;
}

void set_code(std::vector<uint8_t> &codes, int64_t e, int64_t bits, int c) {
    if (bits == 8) {
        codes[size_t(e)] = uint8_t(c);
        return;
    }
    uint8_t &b = codes[size_t(e / 2)];
    b = uint8_t(e & 1 ? (b & 0x0f) | (c << 4) : (b & 0xf0) | c);
}

}  // namespace

attn_status quantize_side(const std::vector<float> &x, int64_t batch, int64_t heads,
                          int64_t len, int64_t dim, const kv_format &f, granularity g,
                          quantized_side &out) {
    const int64_t bits = int64_t(attn_dtype_bits(f.type)), n = batch * heads * len * dim;
    const scale_sets s = sets_for(g, batch, heads, len, dim, bits);
    std::vector<float> gathered;
    if (!s.order.empty()) {
        gathered.resize(size_t(n));
        for (int64_t i = 0; i < n; ++i) gathered[size_t(i)] = x[size_t(s.order[size_t(i)])];
    }
    // the sets of group32 are key rows, quantized in groups of 32; any other set is one group
    const bool grouped = g == granularity::group32;
    const int64_t qgroup = grouped ? 32 : 0, qgroups = grouped ? dim / 32 : 1;
    std::vector<uint8_t> codes(size_t(n * bits / 8));
    out.scale.assign(size_t(s.rows * qgroups), 0.0f);
    out.zero.assign(f.zero ? out.scale.size() : 0, 0.0f);
    const attn_status st = attn_quantize(
        nullptr, s.rows, s.dim, s.order.empty() ? x.data() : gathered.data(), ATTN_DTYPE_F32,
        s.dim, codes.data(), f.type, s.dim, out.scale.data(), f.zero ? out.zero.data() : nullptr,
        qgroups, qgroup);
    if (st != ATTN_OK) return st;
    if (s.order.empty()) {
        out.codes = std::move(codes);
    } else {  // each code back to its element's place in the dense tensor
        out.codes.assign(codes.size(), 0);
        for (int64_t i = 0; i < n; ++i)
            set_code(out.codes, s.order[size_t(i)], bits, code_at(codes, i, bits));
    }
    out.strides = s.strides;
    out.group = s.group;
    return ATTN_OK;
}

namespace {

attn_sdpa_desc describe(const shape &s) {
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, s.batch, s.heads_q, s.len_q, s.len_kv, s.dim);
    d.heads_kv = s.heads_kv;
    d.k = d.v = attn_layout{s.heads_kv * s.len_kv * s.dim, s.len_kv * s.dim, s.dim};
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    return d;
}

}  // namespace

attn_status attention_quantized(attn_context *ctx, const shape &s, const std::vector<float> &q,
                                attn_dtype type, const quantized_side &k,
                                const quantized_side &v, std::vector<float> &out) {
    attn_sdpa_desc d = describe(s);
    d.kv_type = type;
    d.k_scale = k.scale.data();
    d.v_scale = v.scale.data();
    d.k_zero = k.zero.empty() ? nullptr : k.zero.data();
    d.v_zero = v.zero.empty() ? nullptr : v.zero.data();
    d.k_scale_strides = k.strides;
    d.v_scale_strides = v.strides;
    d.k_group = k.group;
    d.v_group = v.group;
    out.assign(size_t(s.batch * s.heads_q * s.len_q * s.dim), 0.0f);
    return attn_sdpa(ctx, &d, q.data(), k.codes.data(), v.codes.data(), out.data());
}

attn_status attention_stored(attn_context *ctx, const shape &s, const std::vector<float> &q,
                             const std::vector<float> &k, const std::vector<float> &v,
                             attn_dtype kv_type, std::vector<float> &out) {
    attn_sdpa_desc d = describe(s);
    d.kv_type = kv_type;
    const size_t n = k.size(), size = attn_dtype_size(kv_type);
    std::vector<uint8_t> ks(n * size), vs(n * size);
    attn_status st = attn_convert(ctx, int64_t(n), k.data(), ATTN_DTYPE_F32, ks.data(), kv_type);
    if (st == ATTN_OK)
        st = attn_convert(ctx, int64_t(n), v.data(), ATTN_DTYPE_F32, vs.data(), kv_type);
    out.assign(size_t(s.batch * s.heads_q * s.len_q * s.dim), 0.0f);
    return st != ATTN_OK ? st : attn_sdpa(ctx, &d, q.data(), ks.data(), vs.data(), out.data());
}

std::vector<double> attention_exact(const shape &s, const std::vector<float> &q,
                                    const std::vector<float> &k, const std::vector<float> &v) {
    const int64_t D = s.dim, group = s.heads_q / s.heads_kv;
    const double scale = 1.0 / std::sqrt(double(D));
    std::vector<double> out(size_t(s.batch * s.heads_q * s.len_q * D), 0.0), p(size_t(s.len_kv));
    for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t h = 0; h < s.heads_q; ++h)
            for (int64_t i = 0; i < s.len_q; ++i) {
                const float *qi = &q[size_t(((b * s.heads_q + h) * s.len_q + i) * D)];
                const int64_t kv = (b * s.heads_kv + h / group) * s.len_kv;
                const int64_t visible = i + s.len_kv - s.len_q + 1;  // bottom-right causal
                double m = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < visible; ++j) {
                    const float *kj = &k[size_t((kv + j) * D)];
                    double dot = 0.0;
                    for (int64_t c = 0; c < D; ++c) dot += double(qi[c]) * double(kj[c]);
                    p[size_t(j)] = dot * scale;
                    m = std::fmax(m, p[size_t(j)]);
                }
                for (int64_t j = 0; j < visible; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - m);
                double *o = &out[size_t(((b * s.heads_q + h) * s.len_q + i) * D)];
                for (int64_t j = 0; j < visible; ++j) {
                    const float *vj = &v[size_t((kv + j) * D)];
                    const double w = p[size_t(j)] / sum;
                    for (int64_t c = 0; c < D; ++c) o[c] += w * double(vj[c]);
                }
            }
    return out;
}

double normwise_error(const std::vector<float> &got, const std::vector<double> &want) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double e = double(got[i]) - want[i];
        diff += e * e;
        norm += want[i] * want[i];
    }
    return std::sqrt(diff) / std::sqrt(norm);
}

}  // namespace attn_quant_accuracy
