// machine_kernels::decode_row_loops on AVX-512: the arithmetic of decoding one query row
// (H32 over 32 KV heads: every KV head serves one row) with nothing else, so that the time a
// key takes there is the least the decode kernels could take for it on this core. Per round,
// decode_loop_keys key rows of dim 128 and their V rows, in L2 (at most 512 KB: the
// first level a cache streamed from memory reaches with the hardware's prefetch):
//   scores: q in registers, the keys 16 at a time, four interleaved, each key's products in
//           one chain of multiply-adds, the 16 sums across their lanes at once
//           (transpose_sum_inlined), times the keys' scales where there is one a row;
//   P V:    o (128 floats) in registers, each key's V row widened and multiplied by its P
//           (P times the row's scale where there is one; P given, in [0, 1]).
// The codes widen as the library widens them (kernels/decode_widen.hpp): bf16 by a shift of
// the zero-extended words; I8 sign-extended and converted; I4 in 16-entry tables a group of
// 32 (times its scale), q and o in the pairs' order; E4M3 64 codes at a time in the quads'
// order, each block's low 7 bits kept for the NaN code. Left out: the softmax between the
// passes (one exponential a vector of 16 scores), the reading of rows from memory, prefetch
// and the call's set-up, which the decode benchmarks' own times include.
#pragma once

#include "arch/machine_kernels.hpp"  // first: its pragmas precede the intrinsics headers

#include <immintrin.h>

#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "core/formats.hpp"
#include "kernels/decode_widen.hpp"
#include "kernels/vec_math.hpp"

namespace attn_bench {
namespace decode_loops {

namespace widen = attn::kernels::decode_widen;
using arch = xsimd::avx512f;
using fbatch = xsimd::batch<float, arch>;
constexpr int dim = decode_loop_dim, vectors = dim / 16;

// One round's rows of one type: codes (or bf16 words) and a scale a row (I4: a group of 32).
struct rows {
    static constexpr int most_bytes = decode_loop_row_bytes(decode_loop_bf16);  // a row, of any kind
    static constexpr int most_scales = decode_loop_row_scales(decode_loop_i4);
    alignas(64) uint8_t k[decode_loop_keys * most_bytes];
    alignas(64) uint8_t v[decode_loop_keys * most_bytes];
    alignas(64) float k_scale[decode_loop_keys * most_scales];
    alignas(64) float v_scale[decode_loop_keys * most_scales];
    alignas(64) float q[dim];
    alignas(64) float p[decode_loop_keys];  // P, in [0, 1] as the softmax leaves it
    alignas(64) float s[decode_loop_keys];
    rows() {
        for (int i = 0; i < decode_loop_keys * most_bytes; ++i) {
            // bf16 words 0x3c.. / 0xbc.. (small values of both signs); codes below the E4M3
            // NaN code
            k[i] = uint8_t(i % 2 ? (i % 5 ? 0x3c : 0xbc) : (i * 37) % 113);
            v[i] = uint8_t(i % 2 ? (i % 3 ? 0x3c : 0xbc) : (i * 53) % 109);
        }
        for (int i = 0; i < decode_loop_keys * most_scales; ++i) k_scale[i] = v_scale[i] = 0.01f + 0.001f * float(i % 7);
        for (int i = 0; i < dim; ++i) q[i] = 0.05f * float(i % 11) - 0.25f;
        for (int c = 0; c < decode_loop_keys; ++c) p[c] = 1.0f / float(1 + c % 17);
    }
};

template <int Kind>
__attribute__((always_inline)) inline void widen_row(const uint8_t *row, const float *scale, fbatch (&x)[vectors],
                                                     __m512i &nan_top) {
    if constexpr (Kind == decode_loop_bf16) {
        const uint16_t *w = reinterpret_cast<const uint16_t *>(row);
#pragma GCC unroll 8
        for (int i = 0; i < vectors; ++i)
            x[i] = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + 16 * i))), 16));
    } else if constexpr (Kind == decode_loop_i8) {
#pragma GCC unroll 8
        for (int i = 0; i < vectors; ++i)
            x[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 16 * i))));
    } else if constexpr (Kind == decode_loop_i4) {
        const __m512 values = widen::nibble_values<attn::core::i4_format, arch>();
#pragma GCC unroll 4
        for (int g = 0; g < vectors / 2; ++g) {
            const __m512 table = widen::group_table<arch>(values, true, scale, nullptr, g);
            const __m512i pairs = widen::nibble_pairs<arch>(row, 32 * g);
            x[2 * g] = widen::even_values<arch>(pairs, table);
            x[2 * g + 1] = widen::odd_values<arch>(pairs, table);
        }
    } else {
#pragma GCC unroll 2
        for (int b = 0; b < vectors / 4; ++b) {
            __m512 quad[4];
            widen::e4m3_quads_at<arch>(row + 64 * b, nan_top, quad);
#pragma GCC unroll 4
            for (int m = 0; m < 4; ++m) x[4 * b + m] = quad[m];
        }
    }
}

template <int Kind>
float loops(int64_t reps) {
    static rows r;  // (one set a type, outside the timing)
    constexpr int keys = decode_loop_keys, rb = decode_loop_row_bytes(Kind), sa = decode_loop_row_scales(Kind);
    constexpr bool row_scale = sa == 1;
    // E4M3 codes read as 2^-120 of their values: 2^60 in q and in the sums, 2^120 in P, as
    // the library folds them (products far from the subnormals)
    constexpr bool e4m3 = Kind == decode_loop_e4m3;
    const float q_unit = e4m3 ? widen::e4m3_q_unit : 1.0f, sum_unit = e4m3 ? widen::e4m3_sum_unit : 1.0f;
    const float p_unit = e4m3 ? widen::e4m3_p_unit : 1.0f;
    __m512i nan_top = _mm512_setzero_si512();
    fbatch o[vectors];
#pragma GCC unroll 8
    for (int i = 0; i < vectors; ++i) o[i] = fbatch(0.0f);
    for (int64_t round = 0; round < reps; ++round) {
        rows *at = &r;
        asm volatile("" : "+r"(at) : : "memory");  // the rows read again every round
        fbatch q[vectors];
#pragma GCC unroll 8
        for (int i = 0; i < vectors; ++i) q[i] = fbatch::load_aligned(at->q + 16 * i) * fbatch(q_unit);
        for (int c0 = 0; c0 < keys; c0 += 16) {
            fbatch acc[16];
#pragma GCC unroll 4
            for (int k0 = 0; k0 < 16; k0 += 4) {
                fbatch x[4][vectors];
#pragma GCC unroll 4
                for (int k = 0; k < 4; ++k)
                    widen_row<Kind>(at->k + (c0 + k0 + k) * rb, at->k_scale + (c0 + k0 + k) * sa, x[k], nan_top);
#pragma GCC unroll 4
                for (int k = 0; k < 4; ++k) acc[k0 + k] = q[0] * x[k][0];
#pragma GCC unroll 8
                for (int i = 1; i < vectors; ++i)
#pragma GCC unroll 4
                    for (int k = 0; k < 4; ++k) acc[k0 + k] = xsimd::fma(q[i], x[k][i], acc[k0 + k]);
            }
            fbatch sums = attn::kernels::transpose_sum_inlined<arch>(acc);
            if constexpr (row_scale) sums *= fbatch::load_aligned(at->k_scale + c0) * fbatch(sum_unit);
            sums.store_aligned(at->s + c0);
        }
        for (int c = 0; c < keys; ++c) {
            fbatch x[vectors];
            widen_row<Kind>(at->v + c * rb, at->v_scale + c * sa, x, nan_top);
            const fbatch p(row_scale ? at->p[c] * at->v_scale[c] * p_unit : at->p[c]);
#pragma GCC unroll 8
            for (int i = 0; i < vectors; ++i) o[i] = xsimd::fma(p, x[i], o[i]);
        }
    }
    fbatch total(0.0f);
    for (int i = 0; i < vectors; ++i) total += o[i];
    return attn::kernels::reduce_add<arch>(total) + float(_mm512_reduce_add_epi32(nan_top) & 1);
}

}  // namespace decode_loops

// machine_kernels::decode_row_loops (machine.hpp).
inline float decode_row_loops(int kind, int64_t reps) {
    switch (kind) {
    case decode_loop_bf16: return decode_loops::loops<decode_loop_bf16>(reps);
    case decode_loop_i8: return decode_loops::loops<decode_loop_i8>(reps);
    case decode_loop_i4: return decode_loops::loops<decode_loop_i4>(reps);
    default: return decode_loops::loops<decode_loop_e4m3>(reps);
    }
}

}  // namespace attn_bench
