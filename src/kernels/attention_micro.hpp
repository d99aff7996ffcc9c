// The attention kernels' block sizes per ISA (one table) and their register-blocked
// micro-kernels, templated on the xsimd Arch:
//   score_block: S[rows x nr] = (scale Q)[rows x dim] K_panel, K packed [dim][nr];
//   pv_block:    O[rows x nv vectors] = O * rescale + P[rows x keys] V[keys x nv vectors].
// Row and vector counts below the block sizes (tile edges) are template instances too.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "kernels/elements.hpp"

ATTN_KERNELS_BEGIN

// Block sizes per ISA, in one table.
//   mr_s x nr_vectors: the S micro-tile (rows x key vectors) held in registers;
//   mr_o x nv:         the O micro-tile (rows x dim_v vectors) of P V;
//   br, bc:          query rows and keys per tile (bc a multiple of nr).
// On AVX-512 a tile has 1024 keys: each row's per-tile work (its max, the rescale of its O
// row, the exponentials' set-up, the sums) is spread over the products of that many keys.
// Against 256 keys (Zen 5, H8 L2048, 1 thread, binaries alternated): bf16 D64 0.93x the
// time, D128 0.97x, f32 D64 0.96x, D128 0.98x, a quantized prefill 0.96x, causal the same;
// D256 (S 384 KiB, past what a 1 MiB L2 holds beside the tile's K and V) no slower (f32 the
// same, bf16 0.96x). 256 keys had measured 1.04-1.08x over 128. The cost is memory: a thread's
// tile scratch (S, and K and V of a tile where they are not packed once a head) is 1.5 MiB at
// D128, 4x what 256 keys took.
template <class Arch>
struct attention_blocking;

template <>
struct attention_blocking<xsimd::avx512f> {  // 32 zmm: 24 accumulators + 4 K loads
    static constexpr int mr_s = 6, nr_vectors = 4, mr_o = 6, nv = 4, br = 96, bc = 1024;
};
template <>
struct attention_blocking<xsimd::fma3<xsimd::avx2>> {  // 16 ymm: 12 accumulators + 2 loads
    static constexpr int mr_s = 6, nr_vectors = 2, mr_o = 6, nv = 2, br = 48, bc = 128;
};
template <>
struct attention_blocking<xsimd::sse4_2> {  // 16 xmm, no FMA
    static constexpr int mr_s = 6, nr_vectors = 2, mr_o = 6, nv = 2, br = 48, bc = 64;
};

namespace attention_detail {

template <class Arch>
constexpr int lanes = static_cast<int>(xsimd::batch<float, Arch>::size);

template <class Arch>
constexpr int panel_keys = attention_blocking<Arch>::nr_vectors * lanes<Arch>;

// static: a plain function compiled with ISA flags must not be shared across translation units.
static constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

template <class Arch>
inline xsimd::batch<float, Arch> lane_index() {
    alignas(64) static constexpr float index[16] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                    8, 9, 10, 11, 12, 13, 14, 15};
    return xsimd::batch<float, Arch>::load_aligned(index);
}

// ---- micro-kernels ----------------------------------------------------------------------

// The rows of the B operand of fma_block: strided (row j at p + j * ld) or listed (row j at
// rows[j] + col: V rows found through kv_rows one by one, e.g. in a paged cache). Either way
// the micro-kernel does the same arithmetic, so the same values give the same bits.
template <class S>
struct strided_rows {
    const S *p;
    int64_t ld;
    const S *operator[](int64_t j) const { return p + j * ld; }
    strided_rows from(int64_t j, int64_t col) const { return {p + j * ld + col, ld}; }
};
template <class S>
struct listed_rows {
    const S *const *rows;
    int64_t col;
    const S *operator[](int64_t j) const { return rows[j] + col; }
    listed_rows from(int64_t j, int64_t c) const { return {rows + j, col + c}; }
};

// acc[r][n] += a[r * lda + j] * b[j * ldb + n * W ...] for j < count: the register block both
// micro-kernels are made of, a broadcast from a against N vectors of row j of b (elements of
// E, widened in registers: each vector once for all rows).
template <class Arch, int Rows, int N, class E, class B>
__attribute__((always_inline)) inline void fma_block(xsimd::batch<float, Arch> (&acc)[Rows][N],
                                                     const float *a, int64_t lda, const B &b,
                                                     int64_t count) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    for (int64_t j = 0; j < count; ++j) {
        fbatch b_vec[N];
#pragma GCC unroll 8
        for (int n = 0; n < N; ++n) b_vec[n] = widen<Arch, E>(b[j] + n * W);
#pragma GCC unroll 32
        for (int r = 0; r < Rows; ++r) {
            const fbatch a_val(a[r * lda + j]);
#pragma GCC unroll 8
            for (int n = 0; n < N; ++n) acc[r][n] = xsimd::fma(a_val, b_vec[n], acc[r][n]);
        }
    }
}

// s[Rows x NRV*W] = qs[Rows x dim] * panel, panel = [dim][nr] (key fastest) of which the
// first NRV vectors of keys are used (fewer near the causal diagonal), and
// row_max[r][0..W) = max(row_max[r], the row's scores) lane-wise, so the softmax needs no
// extra pass over S for the row max. x86 max keeps its second operand when either is NaN:
// a NaN score is left out here and propagates through the softmax sum instead.
template <class Arch, int Rows, int NRV>
inline void score_block(const float *qs, int64_t ldq, const float *panel, int64_t dim,
                        float *s, int64_t lds, float *row_max) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    constexpr int nr = attention_blocking<Arch>::nr_vectors * W;
    fbatch acc[Rows][NRV];
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NRV; ++v) acc[r][v] = fbatch(0.0f);
    fma_block<Arch, Rows, NRV, f32_elements>(acc, qs, ldq, strided_rows<float>{panel, nr}, dim);
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r) {
        fbatch m = fbatch::load_aligned(row_max + r * W);
#pragma GCC unroll 8
        for (int v = 0; v < NRV; ++v) {
            acc[r][v].store_aligned(s + r * lds + v * W);
            m = xsimd::max(acc[r][v], m);
        }
        m.store_aligned(row_max + r * W);
    }
}

template <class Arch, int Rows, int NRV>
inline void score_block_vectors(int vectors, const float *qs, int64_t ldq, const float *panel,
                                int64_t dim, float *s, int64_t lds, float *row_max) {
    if constexpr (NRV == 1) {
        score_block<Arch, Rows, 1>(qs, ldq, panel, dim, s, lds, row_max);
    } else {
        if (vectors == NRV)
            return score_block<Arch, Rows, NRV>(qs, ldq, panel, dim, s, lds, row_max);
        score_block_vectors<Arch, Rows, NRV - 1>(vectors, qs, ldq, panel, dim, s, lds, row_max);
    }
}

// score_block for rows <= Rows and the panel's first `vectors` key vectors.
template <class Arch, int Rows>
inline void score_block_rows(int rows, int vectors, const float *qs, int64_t ldq,
                             const float *panel, int64_t dim, float *s, int64_t lds,
                             float *row_max) {
    constexpr int nrv = attention_blocking<Arch>::nr_vectors;
    if constexpr (Rows == 1) {
        score_block_vectors<Arch, 1, nrv>(vectors, qs, ldq, panel, dim, s, lds, row_max);
    } else {
        if (rows == Rows)
            return score_block_vectors<Arch, Rows, nrv>(vectors, qs, ldq, panel, dim, s, lds,
                                                        row_max);
        score_block_rows<Arch, Rows - 1>(rows, vectors, qs, ldq, panel, dim, s, lds, row_max);
    }
}

// o[Rows x NV*W] = o * rescale[r] + p[Rows x keys] * v[keys x NV*W], V of element type E.
template <class Arch, int Rows, int NV, class E, class B>
inline void pv_block(const float *p, int64_t ldp, int64_t keys, const B &v, float *o, int64_t ldo,
                     const float *rescale) {
    using fbatch = xsimd::batch<float, Arch>;
    constexpr int W = lanes<Arch>;
    fbatch acc[Rows][NV];
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r) {
        const fbatch a(rescale[r]);
#pragma GCC unroll 8
        for (int c = 0; c < NV; ++c) acc[r][c] = fbatch::load_aligned(o + r * ldo + c * W) * a;
    }
    fma_block<Arch, Rows, NV, E>(acc, p, ldp, v, keys);
#pragma GCC unroll 32
    for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < NV; ++c) acc[r][c].store_aligned(o + r * ldo + c * W);
}

template <class Arch, int Rows, int NV, class E, class B>
inline void pv_block_vectors(int vectors, const float *p, int64_t ldp, int64_t keys, const B &v,
                             float *o, int64_t ldo, const float *rescale) {
    if constexpr (NV == 1) {
        pv_block<Arch, Rows, 1, E>(p, ldp, keys, v, o, ldo, rescale);
    } else {
        if (vectors == NV) return pv_block<Arch, Rows, NV, E>(p, ldp, keys, v, o, ldo, rescale);
        pv_block_vectors<Arch, Rows, NV - 1, E>(vectors, p, ldp, keys, v, o, ldo, rescale);
    }
}

template <class Arch, int Rows, class E, class B>
inline void pv_block_any(int rows, int vectors, const float *p, int64_t ldp, int64_t keys,
                         const B &v, float *o, int64_t ldo, const float *rescale) {
    constexpr int nv = attention_blocking<Arch>::nv;
    if constexpr (Rows == 1) {
        pv_block_vectors<Arch, 1, nv, E>(vectors, p, ldp, keys, v, o, ldo, rescale);
    } else {
        if (rows == Rows)
            return pv_block_vectors<Arch, Rows, nv, E>(vectors, p, ldp, keys, v, o, ldo, rescale);
        pv_block_any<Arch, Rows - 1, E>(rows, vectors, p, ldp, keys, v, o, ldo, rescale);
    }
}

}  // namespace attention_detail
ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
