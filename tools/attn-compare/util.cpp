// Helpers shared by the case files: deterministic inputs, layout gathering, error metrics.
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <random>

#include "compare.hpp"

namespace attn_compare {

std::vector<float> random_values(size_t n, uint32_t seed, float lo, float hi) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = dist(gen);
    return v;
}

std::vector<double> to_double(const std::vector<float> &v) {
    return std::vector<double>(v.begin(), v.end());
}

std::string format(const char *fmt, ...) {
    char buf[256];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, args);
    va_end(args);
    return buf;
}

std::vector<float> gather_bhsd(const float *base, attn_layout l, int64_t batch, int64_t heads,
                               int64_t seq, int64_t dim) {
    std::vector<float> out;
    out.reserve(size_t(batch * heads * seq * dim));
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t s = 0; s < seq; ++s) {
                const float *row = base + b * l.batch + h * l.head + s * l.seq;
                out.insert(out.end(), row, row + dim);
            }
    return out;
}

int64_t layout_extent(attn_layout l, int64_t batch, int64_t heads, int64_t seq, int64_t dim) {
    return (batch - 1) * l.batch + (heads - 1) * l.head + (seq - 1) * l.seq + dim;
}

namespace {

// |got - want| / (1 + |want|), infinity when the NaN or infinity patterns differ.
template <class T>
double max_rel_error_impl(const float *got, const T *want, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double g = got[i], w = double(want[i]);
        if (std::isnan(g) || std::isnan(w)) {
            if (std::isnan(g) != std::isnan(w)) return INFINITY;
            continue;
        }
        if (std::isinf(g) || std::isinf(w)) {
            if (g != w) return INFINITY;
            continue;
        }
        const double e = std::fabs(g - w) / (1.0 + std::fabs(w));
        if (e > worst) worst = e;
    }
    return worst;
}

}  // namespace

double max_rel_error(const float *got, const float *want, size_t n) {
    return max_rel_error_impl(got, want, n);
}

double max_rel_error(const float *got, const double *want, size_t n) {
    return max_rel_error_impl(got, want, n);
}

}  // namespace attn_compare
