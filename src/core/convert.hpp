// Scalar conversions between f32, bf16 and f16: the rules of attn_convert (attn.h), which
// are also those of every rounding inside the kernels. Plain integer code on the bit
// patterns, so any compiler and any CPU give the same results. (static: the kernels of every
// ISA include these, and a plain function compiled with one ISA's flags must not be shared
// with another's translation unit.)
//   - round to nearest, ties to even;
//   - NaN stays NaN: narrowing keeps the sign and the top payload bits and sets the quiet
//     bit; widening is exact (a signalling f16/bf16 NaN stays as it is, bits shifted up);
//   - +-inf stays +-inf; finite values beyond the target's range become +-inf;
//   - subnormals are kept (f32 -> f16 rounds into f16's subnormals, f16 subnormals widen
//     exactly), except that f32 subnormals become +-0 in bf16, as vcvtneps2bf16 does.
#pragma once

#include <cstdint>
#include <cstring>

namespace attn::convert {

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

// bf16 is the top half of an f32: widening is a shift.
static inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

static inline uint16_t f32_to_bf16(float x) {
    const uint32_t u = f32_bits(x);
    const uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN: quiet, payload top
    if (mag < 0x00800000u) return uint16_t(sign >> 16);           // zero, subnormal: +-0
    // round to nearest even on the low 16 bits; a carry into the exponent is correct
    // (it rounds up to the next binade, or to inf past the largest finite bf16)
    const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(rounded >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));  // inf, NaN
    if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return f32_from_bits(sign);  // +-0
    // subnormal: man * 2^-24, exact in f32
    int shift = 0;
    uint32_t m = man;
    while (!(m & 0x400u)) {
        m <<= 1;
        ++shift;
    }
    return f32_from_bits(sign | (uint32_t(113 - shift) << 23) | ((m & 0x3ffu) << 13));
}

static inline uint16_t f32_to_f16(float x) {
    const uint32_t u = f32_bits(x);
    const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    const uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));  // NaN
    if (mag >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 (and inf): inf
    if (mag >= 0x38800000u) {                                  // normal in f16 (>= 2^-14)
        const uint32_t rounded = mag - (112u << 23) + 0xfffu + ((mag >> 13) & 1u);
        return uint16_t(sign | (rounded >> 13));
    }
    if (mag < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): +-0
    // subnormal in f16: the value is m * 2^(e-150) with the implicit bit; shift to units
    // of 2^-24 and round to nearest even
    const uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14 .. 24 for e in [102, 112]
    const uint32_t halfway = 1u << (shift - 1), low = m & ((1u << shift) - 1u);
    uint32_t q = m >> shift;
    if (low > halfway || (low == halfway && (q & 1u))) ++q;
    return uint16_t(sign | q);
}

}  // namespace attn::convert
