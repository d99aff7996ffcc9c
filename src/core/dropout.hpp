// Attention dropout's keep/drop decision: a pure function of (seed, b, h, i, j), so the
// reference and every SIMD kernel, at any thread count, drop exactly the same weights.
//
//   row_key = mix64 chain over (seed, b, h, i), top 32 bits        (once per query row)
//   bits    = fmix32(row_key ^ (uint32_t)j * 0x9E3779B1)           (per key; 32-bit ops only,
//                                                                    so it vectorises on SSE4)
//   dropped = bits < threshold(p),  threshold = floor(p * 2^32)
//   kept weights are multiplied by keep_scale(p) = 1 / (1 - p)
//
// fmix32 is a bijection, so within one row distinct j < 2^32 give distinct bits.
#pragma once

#include <cstdint>

namespace attn::dropout {

inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

inline uint32_t fmix32(uint32_t x) {  // murmur3 finaliser
    x ^= x >> 16;
    x *= 0x85ebca6bU;
    x ^= x >> 13;
    x *= 0xc2b2ae35U;
    x ^= x >> 16;
    return x;
}

inline uint32_t row_key(uint64_t seed, int64_t b, int64_t h, int64_t i) {
    uint64_t x = mix64(seed + 0x9E3779B97F4A7C15ULL);
    x = mix64(x ^ static_cast<uint64_t>(b));
    x = mix64(x ^ static_cast<uint64_t>(h));
    x = mix64(x ^ static_cast<uint64_t>(i));
    return static_cast<uint32_t>(x >> 32);
}

inline constexpr uint32_t column_multiplier = 0x9E3779B1U;

inline uint32_t bits(uint32_t key, int64_t j) {
    return fmix32(key ^ (static_cast<uint32_t>(j) * column_multiplier));
}

// p in [0, 1): weights whose bits fall below this are dropped.
inline uint32_t threshold(float p) {
    double t = static_cast<double>(p) * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFU : static_cast<uint32_t>(t);
}

inline float keep_scale(float p) { return 1.0f / (1.0f - p); }

inline bool dropped(uint32_t key, int64_t j, uint32_t thresh) { return bits(key, j) < thresh; }

}  // namespace attn::dropout
