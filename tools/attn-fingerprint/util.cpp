#include "fingerprint.hpp"

namespace attn_fingerprint {

std::vector<float> draw_f32(rng &r, int64_t n, float lo, float hi) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto &x : v) x = r.uniform(lo, hi);
    return v;
}

std::vector<unsigned char> draw(rng &r, attn_dtype type, int64_t n) {
    std::vector<unsigned char> out(size_t(n) * attn_dtype_size(type));
    for (int64_t i = 0; i < n; ++i) {
        if (type == ATTN_DTYPE_F32) {
            const float x = r.uniform(-1.0f, 1.0f);
            std::memcpy(out.data() + 4 * i, &x, 4);
            continue;
        }
        uint16_t h;
        if (type == ATTN_DTYPE_BF16) {
            const float x = r.uniform(-1.0f, 1.0f);
            uint32_t u;
            std::memcpy(&u, &x, 4);
            h = uint16_t(u >> 16);
        } else {  // f16: sign, exponent 10..15 (2^-5 .. 1.99), ten random mantissa bits
            const uint64_t b = r.bits();
            h = uint16_t(((b >> 63) << 15) | ((10 + (b >> 20) % 6) << 10) | (b & 0x3ff));
        }
        std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
}

void record::begin(const std::string &function, const std::string &name) {
    if (!functions.count(function)) order.push_back(function);
    current = &functions[function];
    case_hash = fnv1a{};
    case_name = function + ":" + name;
    case_note.clear();
}

void record::end() { cases.push_back({case_name, case_hash.h, case_note}); }

}  // namespace attn_fingerprint
