// The score pass's dot products for the decode kernel (attention_decode_quantized.hpp): how a
// pass meets the scales of the rows it reads (quant_layout), and KEYS keys x RP query rows of
// lane-wise dot products at a time over whole vectors of dim, summed across their lanes by the
// caller. key_dots reads vector by vector, every key's row at each step (the rows of 16 keys
// and their scales), which suits several rows; key_major_dots, for one row whose q fits in
// registers, reads key by key (a few keys interleaved), each key's row pointer and scale
// loaded once: the same products summed in the same order, so the same bits. 4-bit codes by
// tables in nibble_dots (decode_widen.hpp).
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "kernels/attention_args.hpp"
#include "kernels/decode_widen.hpp"
#include "kernels/row_reader.hpp"
#include "kernels/vec_math.hpp"

ATTN_KERNELS_BEGIN
namespace attention_decode_detail {

// q . x over dim elements, x read by its row reader (whole vectors, then one by one).
template <class Arch, class E>
inline float reader_dot(const float *q, const row_reader<Arch, E> &x, int64_t dim) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    fbatch acc(0.0f);
    int64_t d = 0;
    for (; d + W <= dim; d += W) acc = xsimd::fma(fbatch::load_unaligned(q + d), x.vec(d), acc);
    float sum = reduce_add<Arch>(acc);
    for (; d < dim; ++d) sum += q[d] * x.one(d);
    return sum;
}

// How a pass meets the scales of the K (or V) rows it reads.
struct quant_layout {
    bool by_group;  // a scale (and zero point) per whole vectors, loaded once per group
    bool zeros;     // zero points
    bool fold;      // one scale per row, no zero point: times the sum (K), into P (V)
    bool nibbles;   // 4-bit in groups of whole 32-element spans on AVX-512: tables (decode_widen)
    bool e4m3;      // E4M3 folded on AVX-512: codes read as 2^-120 of their values (decode_widen::e4m3_bits)
    bool channels;  // scales per channel (within a vector), the same for every key: folded into q
    bool bf16_pairs;  // bf16 rows in spans of 32 on AVX-512: even and odd elements by shift and mask
};

// One row, a scale per group, no zero points: the scale meets the group's dot product (K) or
// P (V), not each widened vector (with more rows the scaled vector serves them all).
inline bool scale_once_per_group(const quant_layout &l, int rows) { return rows == 1 && l.by_group && !l.zeros; }

// q rows a pass reads reordered (decode_widen::deinterleave_pairs) or times the scales of the
// channels are at most this long.
inline constexpr int64_t max_pair_dim = 512;

// The layout of x's scales for rows of dim elements, spans of `span` elements a 4-bit pass reads.
// (Inlined: returned from a call, its seven flags were stored a byte at a time and loaded back
// as words, a stalled store forwarding that took 5% of a short decode's time.)
template <class Arch, class E>
ATTN_ALWAYS_INLINE quant_layout layout_of(const kv_rows &x, int64_t dim, int64_t span) {
    constexpr int W = int(xsimd::batch<float, Arch>::size);
    quant_layout l{};
    if constexpr (E::quantized) {  // (f32, bf16, f16: the values as stored, every field false)
        const int64_t group = x.scales.group;
        l.by_group = group % W == 0;
        l.zeros = E::has_zero && x.scales.zero;
        l.fold = l.by_group && group == dim && !l.zeros;
        l.nibbles = decode_widen::available<Arch> && E::bits == 4 && group % 32 == 0 && dim % span == 0 &&
                    dim <= max_pair_dim;
        l.e4m3 = decode_widen::available<Arch> && E::type == ATTN_DTYPE_FP8_E4M3 && l.fold;
        l.channels = !l.by_group && x.scales_shared() && dim <= max_pair_dim;
    } else {
        (void)x;
        l.bf16_pairs = decode_widen::available<Arch> && E::type == ATTN_DTYPE_BF16 && dim % span == 0 &&
                       dim <= max_pair_dim;
    }
    return l;
}

// acc[r * KEYS + k] += lane-wise products of q_r (rows q[r]) and key k over the whole vectors
// of dim (without the scale where l.fold; where l.e4m3, 2^-120 of the values and q times 2^60;
// l.channels: q times the channels' scales, the codes less the channels' zero points, zero[c]
// for element c). E4M3:
// whether the keys' codes hold the NaN code, looked for as they are read (nan_seen).
template <class Arch, class E, int RP, int KEYS>
__attribute__((always_inline)) inline void
key_dots(const quant_layout &l, const float *const *q, const row_reader<Arch, E> *key,
        int64_t dim, int64_t group, const float *zero, xsimd::batch<float, Arch> *acc, bool &nan_seen) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = int(fbatch::size);
    const auto step = [&](int64_t d, auto &&value) __attribute__((always_inline)) {
        fbatch qv[RP];
#pragma GCC unroll 4
        for (int r = 0; r < RP; ++r) qv[r] = fbatch::load_unaligned(q[r] + d);
#pragma GCC unroll 16
        for (int k = 0; k < KEYS; ++k) {
            const fbatch x = value(k, d);
#pragma GCC unroll 4
            for (int r = 0; r < RP; ++r) acc[r * KEYS + k] = xsimd::fma(qv[r], x, acc[r * KEYS + k]);
        }
    };
    if constexpr (decode_widen::available<Arch> && E::type == ATTN_DTYPE_FP8_E4M3) {
        if (l.e4m3) {
            __m512i top = _mm512_setzero_si512();
            int64_t d = 0;
            for (; d + 4 * W <= dim; d += 4 * W)  // 64 codes of a key at a time, q in the quads' order
#pragma GCC unroll 16
                for (int k = 0; k < KEYS; ++k) {
                    __m512 x[4];
                    decode_widen::e4m3_quads_at<Arch>(key[k].p + d, top, x);
#pragma GCC unroll 4
                    for (int r = 0; r < RP; ++r) {
                        fbatch a = acc[r * KEYS + k];
#pragma GCC unroll 4
                        for (int m = 0; m < 4; ++m) a = xsimd::fma(fbatch::load_unaligned(q[r] + d + m * W), fbatch(x[m]), a);
                        acc[r * KEYS + k] = a;
                    }
                }
            if (d + 2 * W <= dim) {  // 32 codes left
#pragma GCC unroll 16
                for (int k = 0; k < KEYS; ++k) {
                    __m512 lo, hi;
                    decode_widen::e4m3_bits_32<Arch>(key[k].p, d, lo, hi);
#pragma GCC unroll 4
                    for (int r = 0; r < RP; ++r) {
                        const fbatch a = xsimd::fma(fbatch::load_unaligned(q[r] + d), fbatch(lo), acc[r * KEYS + k]);
                        acc[r * KEYS + k] = xsimd::fma(fbatch::load_unaligned(q[r] + d + W), fbatch(hi), a);
                    }
                    top = decode_widen::e4m3_low7_top<Arch>(key[k].p + d, 2 * W, top);
                }
                d += 2 * W;
            }
            for (; d < dim; d += W) {
                step(d, [&](int k, int64_t c) { return fbatch(decode_widen::e4m3_bits<Arch>(key[k].p, c)); });
                for (int k = 0; k < KEYS; ++k) top = decode_widen::e4m3_low7_top<Arch>(key[k].p + d, W, top);
            }
            nan_seen = decode_widen::e4m3_has_nan_code<Arch>(top);
            return;
        }
    }
    if constexpr (!E::quantized) {  // f32, bf16, f16: widened
        for (int64_t d = 0; d + W <= dim; d += W) step(d, [&](int k, int64_t c) { return key[k].vec(c); });
    } else if (l.fold) {  // the codes' dot products; the scale after the sum
        for (int64_t d = 0; d < dim; d += W)
            step(d, [&](int k, int64_t c) { return raw_vector<Arch, E>(key[k].p, c); });
    } else if (scale_once_per_group(l, RP)) {  // the group's sum, then its scale
        for (int64_t g0 = 0, gi = 0; g0 < dim; g0 += group, ++gi)
#pragma GCC unroll 16
            for (int k = 0; k < KEYS; ++k) {
                fbatch part = fbatch::load_unaligned(q[0] + g0) * raw_vector<Arch, E>(key[k].p, g0);
                for (int64_t d = g0 + W; d < g0 + group; d += W)
                    part = xsimd::fma(fbatch::load_unaligned(q[0] + d), raw_vector<Arch, E>(key[k].p, d), part);
                acc[k] = xsimd::fma(part, fbatch(key[k].sc[gi]), acc[k]);
            }
    } else if (l.by_group) {  // a scale (and zero point) per group of whole vectors
        const auto groups = [&](auto zeros) __attribute__((always_inline)) {
            for (int64_t g0 = 0, gi = 0; g0 < dim; g0 += group, ++gi) {
                fbatch sk[KEYS], zk[KEYS];
                for (int k = 0; k < KEYS; ++k) {
                    sk[k] = fbatch(key[k].sc[gi]);
                    if constexpr (zeros) zk[k] = fbatch(key[k].ze[gi]);
                }
                for (int64_t d = g0; d < g0 + group; d += W)
                    step(d, [&](int k, int64_t c) {
                        const fbatch raw = raw_vector<Arch, E>(key[k].p, c);
                        if constexpr (zeros) return (raw - zk[k]) * sk[k];
                        else return raw * sk[k];
                    });
            }
        };
        // (the zero points' test outside the loops: a zero point of 0 subtracted cost a vector
        // operation each)
        if (l.zeros) groups(std::true_type{});
        else groups(std::false_type{});
    } else if (l.channels) {
        for (int64_t d = 0; d + W <= dim; d += W)
            step(d, [&](int k, int64_t c) {
                const fbatch raw = raw_vector<Arch, E>(key[k].p, c);
                return l.zeros ? raw - fbatch::load_aligned(zero + c) : raw;
            });
    } else {
        for (int64_t d = 0; d + W <= dim; d += W) step(d, [&](int k, int64_t c) { return key[k].vec(c); });
    }
}

// key_dots' sums for one row (RP 1) whose q is QV whole vectors (dim == QV W), on AVX-512:
// q held in registers, the keys taken KG at a time (their products interleaved for the
// multiply-adds' latency), vector by vector within a key. Each accumulator takes the same
// products in the same order as key_dots', so the same bits; false (nothing done) for the
// layouts it leaves to key_dots (nibbles, and scales with zero points per group). E4M3: the
// keys' codes looked over for the NaN code as they are read (nan_seen).
template <class Arch, class E, int KEYS, int QV>
__attribute__((always_inline)) inline bool
key_major_dots(const quant_layout &l, const float *q, const row_reader<Arch, E> *key, int64_t group,
               const float *zero, xsimd::batch<float, Arch> *acc, bool &nan_seen) {
    if constexpr (decode_widen::available<Arch> && QV % 2 == 0) {
        using fbatch = xsimd::batch<float, Arch>;
        constexpr int W = int(fbatch::size), KG = 4;
        fbatch qv[QV];
#pragma GCC unroll 8
        for (int i = 0; i < QV; ++i) qv[i] = fbatch::load_unaligned(q + i * W);
        // step(k, i): key k's vectors i and i + 1 into acc[k], for every key, KG keys at once
        const auto sweep = [&](auto &&step) __attribute__((always_inline)) {
#pragma GCC unroll 4
            for (int k0 = 0; k0 < KEYS; k0 += KG)
#pragma GCC unroll 4
                for (int i = 0; i < QV; i += 2)
#pragma GCC unroll 4
                    for (int k = k0; k < k0 + KG; ++k) step(k, i);
        };
        // acc[k] += q . x_k, two vectors of x_k at a time from pair(k, i, x0, x1)
        const auto sums = [&](auto &&pair) __attribute__((always_inline)) {
            sweep([&](int k, int i) __attribute__((always_inline)) {
                fbatch x0, x1;
                pair(k, i, x0, x1);
                acc[k] = xsimd::fma(qv[i + 1], x1, xsimd::fma(qv[i], x0, acc[k]));
            });
        };
        if constexpr (!E::quantized) {
            sums([&](int k, int i, fbatch &x0, fbatch &x1) __attribute__((always_inline)) {
                x0 = key[k].vec(i * W);
                x1 = key[k].vec((i + 1) * W);
            });
            return true;
        } else {
            if constexpr (E::type == ATTN_DTYPE_FP8_E4M3) {
                if (l.e4m3) {  // 64 codes a step, q in the quads' order
                    static_assert(QV % 4 == 0, "whole blocks of 64 codes");
                    __m512i top = _mm512_setzero_si512();
#pragma GCC unroll 4
                    for (int k0 = 0; k0 < KEYS; k0 += KG)
#pragma GCC unroll 4
                        for (int i = 0; i < QV; i += 4)
#pragma GCC unroll 4
                            for (int k = k0; k < k0 + KG; ++k) {
                                __m512 x[4];
                                decode_widen::e4m3_quads_at<Arch>(key[k].p + i * W, top, x);
                                fbatch a = acc[k];
#pragma GCC unroll 4
                                for (int m = 0; m < 4; ++m) a = xsimd::fma(qv[i + m], fbatch(x[m]), a);
                                acc[k] = a;
                            }
                    nan_seen = decode_widen::e4m3_has_nan_code<Arch>(top);
                    return true;
                }
            }
            if (l.fold || (l.channels && !l.zeros)) {
                sums([&](int k, int i, fbatch &x0, fbatch &x1) __attribute__((always_inline)) {
                    x0 = raw_vector<Arch, E>(key[k].p, i * W);
                    x1 = raw_vector<Arch, E>(key[k].p, (i + 1) * W);
                });
                return true;
            }
            if (l.channels) {
                sums([&](int k, int i, fbatch &x0, fbatch &x1) __attribute__((always_inline)) {
                    x0 = raw_vector<Arch, E>(key[k].p, i * W) - fbatch::load_aligned(zero + i * W);
                    x1 = raw_vector<Arch, E>(key[k].p, (i + 1) * W) - fbatch::load_aligned(zero + (i + 1) * W);
                });
                return true;
            }
            if (scale_once_per_group(l, 1) && group == 2 * W) {  // a group's two vectors, then its scale
                sweep([&](int k, int i) __attribute__((always_inline)) {
                    // (the intrinsics: q x + q' x' must round the first product, as key_dots')
                    const __m512 first = _mm512_mul_ps(qv[i], raw_vector<Arch, E>(key[k].p, i * W));
                    const fbatch part = _mm512_fmadd_ps(qv[i + 1], raw_vector<Arch, E>(key[k].p, (i + 1) * W), first);
                    acc[k] = xsimd::fma(part, fbatch(key[k].sc[i / 2]), acc[k]);
                });
                return true;
            }
        }
    }
    return false;
}

// acc[r * KEYS + k] += the span of 32 elements from d of q_r times key k's, in pairs: q's rows
// reordered at qp (dim apart, decode_widen::deinterleave_pairs), span(k, xe, xo) giving key
// k's even and odd elements there; the even products first, then the odd ones.
template <class Arch, int RP, int KEYS, class Span>
__attribute__((always_inline)) inline void span_pair_dots(const float *qp, int64_t dim, int64_t d,
                                                          xsimd::batch<float, Arch> *acc, Span &&span) {
    __m512 qe[RP], qo[RP];
#pragma GCC unroll 4
    for (int r = 0; r < RP; ++r) {
        qe[r] = _mm512_load_ps(qp + r * dim + d);
        qo[r] = _mm512_load_ps(qp + r * dim + d + 16);
    }
#pragma GCC unroll 16
    for (int k = 0; k < KEYS; ++k) {
        __m512 xe, xo;
        span(k, xe, xo);
#pragma GCC unroll 4
        for (int r = 0; r < RP; ++r) {
            __m512 a = _mm512_fmadd_ps(qe[r], xe, acc[r * KEYS + k]);
            acc[r * KEYS + k] = _mm512_fmadd_ps(qo[r], xo, a);
        }
    }
}

// The same for 4-bit codes by tables (l.nibbles), q's rows reordered in pairs at qp (dim apart).
template <class Arch, class E, int RP, int KEYS>
__attribute__((always_inline)) inline void
nibble_dots(const quant_layout &l, const float *qp, const row_reader<Arch, E> *key,
        int64_t dim, int64_t group, xsimd::batch<float, Arch> *acc) {
    if constexpr (decode_widen::available<Arch> && E::bits == 4) {
        using namespace decode_widen;
        const __m512 values = nibble_values<E, Arch>();
        for (int64_t g0 = 0, gi = 0; g0 < dim; g0 += group, ++gi) {
            __m512 table[KEYS];
            for (int k = 0; k < KEYS; ++k)
                table[k] = group_table<Arch>(values, !l.fold, key[k].sc, l.zeros ? key[k].ze : nullptr, gi);
            for (int64_t d = g0; d < g0 + group; d += 32)
                span_pair_dots<Arch, RP, KEYS>(qp, dim, d, acc, [&](int k, __m512 &xe, __m512 &xo) __attribute__((always_inline)) {
                    const __m512i pairs = nibble_pairs<Arch>(key[k].p, d);
                    xe = even_values<Arch>(pairs, table[k]);
                    xo = odd_values<Arch>(pairs, table[k]);
                });
        }
    }
}

// The same for bf16 rows read in spans of 32 (l.bf16_pairs), q's rows reordered in pairs at qp
// (dim apart): a span's 16 words hold its even elements in their low halves and its odd ones
// in their high halves, so a shift and a mask make the two vectors (decode_widen::bf16_even,
// bf16_odd), where widening 16 elements in order takes a VPMOVZXWD and a shift.
template <class Arch, class E, int RP, int KEYS>
__attribute__((always_inline)) inline void
bf16_pair_dots(const float *qp, const row_reader<Arch, E> *key, int64_t dim, xsimd::batch<float, Arch> *acc) {
    if constexpr (decode_widen::available<Arch> && E::type == ATTN_DTYPE_BF16) {
        using namespace decode_widen;
        for (int64_t d = 0; d < dim; d += 32)
            span_pair_dots<Arch, RP, KEYS>(qp, dim, d, acc, [&](int k, __m512 &xe, __m512 &xo) __attribute__((always_inline)) {
                const __m512i words = bf16_span<Arch>(key[k].p, d);
                xe = bf16_even<Arch>(words);
                xo = bf16_odd<Arch>(words);
            });
    }
}

// How a 4-bit pass makes a key's table for a group, by kind known at compile time, so that no
// test of the layout stays in the loops: the values as they are (one scale per row, folded
// after the sum or into P), times the group's scale, or less its zero point and times its
// scale (decode_widen::group_table with its arguments constant).
enum nibble_tables { tables_plain, tables_scaled, tables_zeros };
inline nibble_tables nibble_tables_of(const quant_layout &l) {
    return l.fold ? tables_plain : l.zeros ? tables_zeros : tables_scaled;
}
template <nibble_tables T, class Arch, class E>
__attribute__((always_inline)) inline __m512 nibble_table(__m512 values, const row_reader<Arch, E> &x, int64_t g) {
    return decode_widen::group_table<Arch>(values, T != tables_plain, x.sc, T == tables_zeros ? x.ze : nullptr, g);
}
// f(std::integral_constant<nibble_tables, t>{}): t as a compile-time constant.
template <class F>
__attribute__((always_inline)) inline void with_tables(nibble_tables t, F &&f) {
    switch (t) {
    case tables_plain: f(std::integral_constant<nibble_tables, tables_plain>{}); return;
    case tables_scaled: f(std::integral_constant<nibble_tables, tables_scaled>{}); return;
    case tables_zeros: f(std::integral_constant<nibble_tables, tables_zeros>{}); return;
    }
}

// nibble_dots' sums for one row (RP 1) whose reordered q is QV whole vectors (dim == QV W),
// on AVX-512: q held in registers, the keys taken KG at a time, span by span within a key,
// each key's table made once a group. Where nibble_dots keeps a table for every key of the
// block besides q and the accumulators (more registers than there are, so spilled to the
// stack), this holds KG tables. The same products summed in the same order, so the same bits.
template <class Arch, class E, int KEYS, int QV, nibble_tables T>
__attribute__((always_inline)) inline void
nibble_key_major_dots(const float *qp, const row_reader<Arch, E> *key, int64_t group,
                      xsimd::batch<float, Arch> *acc) {
    if constexpr (decode_widen::available<Arch> && E::bits == 4 && QV % 2 == 0) {
        using namespace decode_widen;
        constexpr int W = 16, KG = 4, SPANS = QV / 2;
        const __m512 values = nibble_values<E, Arch>();
        const int64_t spans_a_group = group / 32;
        __m512 qv[QV];
#pragma GCC unroll 8
        for (int i = 0; i < QV; ++i) qv[i] = _mm512_load_ps(qp + i * W);
#pragma GCC unroll 4
        for (int k0 = 0; k0 < KEYS; k0 += KG) {
            __m512 table[KG];
            // (the group by a count, not s / spans_a_group: a division by a value known only at
            // run time is an IDIV in every unrolled span)
            int64_t g = 0, left = 0;
#pragma GCC unroll 4
            for (int s = 0; s < SPANS; ++s) {
                if (left == 0) {
#pragma GCC unroll 4
                    for (int k = 0; k < KG; ++k) table[k] = nibble_table<T>(values, key[k0 + k], g);
                    ++g;
                    left = spans_a_group;
                }
                --left;
#pragma GCC unroll 4
                for (int k = 0; k < KG; ++k) {
                    const __m512i pairs = nibble_pairs<Arch>(key[k0 + k].p, s * 32);
                    const __m512 a = _mm512_fmadd_ps(qv[2 * s], even_values<Arch>(pairs, table[k]), acc[k0 + k]);
                    acc[k0 + k] = _mm512_fmadd_ps(qv[2 * s + 1], odd_values<Arch>(pairs, table[k]), a);
                }
            }
        }
    }
}

// nibble_key_major_dots for dim QV W (4 or 8 vectors) and the layout's kind of table; false
// (nothing done) for the rest.
template <class Arch, class E, int KEYS>
__attribute__((always_inline)) inline bool
nibble_key_major(const quant_layout &l, int64_t qv, const float *qp, const row_reader<Arch, E> *key,
                 int64_t group, xsimd::batch<float, Arch> *acc) {
    if constexpr (decode_widen::available<Arch> && E::bits == 4) {
        const auto run = [&](auto tables) __attribute__((always_inline)) {
            constexpr nibble_tables T = decltype(tables)::value;
            if (qv == 8) nibble_key_major_dots<Arch, E, KEYS, 8, T>(qp, key, group, acc);
            else nibble_key_major_dots<Arch, E, KEYS, 4, T>(qp, key, group, acc);
        };
        if (qv != 8 && qv != 4) return false;
        with_tables(nibble_tables_of(l), run);
        return true;
    }
    return false;
}

}  // namespace attention_decode_detail
ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
