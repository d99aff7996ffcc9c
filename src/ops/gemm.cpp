// The GEMM driver: C = alpha * op(A) * op(B) + beta * C with the BLIS loop structure around
// the packing routines and micro-kernel of src/kernels/gemm.hpp.
//
// Reproducibility: the depth k is never split across threads and its blocking (kc) depends
// on k alone; every element of C is one fma chain per kc block, combined with C in pc
// order. How rows and columns are shared among threads changes who computes an element,
// never how, so results are bitwise identical for every thread count.
#include <algorithm>
#include <cstdint>
#include <memory>

#include "kernels/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/parallel.hpp"
#include "ref/ref.hpp"

namespace attn::ops {
namespace {

// Below this many multiply-adds a product runs on the calling thread: waking workers
// costs more than it saves.
constexpr int64_t serial_below_madds = int64_t{1} << 19;

// C = beta * C (alpha == 0 or k == 0: A and B are not read, as in the reference BLAS).
void scale_c(const exec &ex, int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
    parallel_for(ex, m, std::max<int64_t>(1, 65536 / n), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            float *row = c + i * ldc;
            if (beta == 0.0f)
                std::fill(row, row + n, 0.0f);
            else
                for (int64_t j = 0; j < n; ++j) row[j] *= beta;
        }
    });
}

// Splits `total` into the fewest blocks of at most `block`, all of nearly equal size
// (a multiple of `unit`), so no block is a thin remainder.
int64_t balanced_block(int64_t total, int64_t block, int64_t unit) {
    const int64_t blocks = ceil_div(total, block);
    return unit * ceil_div(ceil_div(total, blocks), unit);
}

}  // namespace

namespace {

// The panels a product runs on, and the table's routines that pack and multiply them:
//   f32 panels: the f32 packing when the elements are used as stored, the typed packing
//     otherwise (widening, or rounding to bf16 under fpmath bf16), the f32 micro-kernel;
//   pair panels (levels with VDPBF16PS, when the products may be bf16: A and B stored in
//     bf16, whose products are exact in f32, or fpmath bf16): two consecutive k of a row or
//     column in one 32-bit word, the bf16 micro-kernel (twice the f32 kernel's rate). A
//     panel of kc elements of depth is then ceil(kc/2) words deep; everything else is equal;
//   tile panels (amx, where the table has them): pairs on AMX tiles, with their own blocks,
//     packing and block kernel; the depth of a panel padded to whole tiles.
struct panels {
    const kernels::kernel_table *kt;
    attn_trans trans_a, trans_b;
    attn_dtype a_type, b_type;
    int64_t lda, ldb;
    bool round_bf16;
    bool a_plain, b_plain;  // f32 elements used as stored
    bool pairs, tiles;
    int64_t MR, NR;

    panels(const kernels::kernel_table *kt_, attn_trans ta, attn_trans tb, attn_dtype at,
           int64_t lda_, attn_dtype bt, int64_t ldb_, bool round)
        : kt(kt_), trans_a(ta), trans_b(tb), a_type(at), b_type(bt), lda(lda_), ldb(ldb_),
          round_bf16(round), a_plain(at == ATTN_DTYPE_F32 && !round),
          b_plain(bt == ATTN_DTYPE_F32 && !round),
          pairs(kt_->gemm_micro_kernel_bf16 != nullptr &&
                ((at == ATTN_DTYPE_BF16 && bt == ATTN_DTYPE_BF16) || round)),
          tiles(pairs && kt_->gemm_block_kernel_tiles != nullptr),
          MR(tiles ? kt_->gemm_mr_tiles : kt_->gemm_mr),
          NR(tiles ? kt_->gemm_nr_tiles : kt_->gemm_nr) {}

    // Words of packed depth for kc elements of k.
    int64_t depth(int64_t kc) const {
        return tiles ? kt->gemm_packed_pairs_tiles(kc) : pairs ? (kc + 1) / 2 : kc;
    }
    // Depth blocks depend on the shape only (kc decides the rounding of C). Pair panels cut
    // k at even offsets (tiles: at whole tiles of 32), so only the last block can end in a
    // lone element.
    int64_t depth_block(int64_t k) const;

    void pack_a(int64_t mc, int64_t kc, const void *src, float *dst) const {
        auto *words = reinterpret_cast<uint32_t *>(dst);
        if (tiles)
            kt->gemm_pack_a_tiles(trans_a, mc, kc, src, a_type, lda, words);
        else if (pairs)
            kt->gemm_pack_a_bf16(trans_a, mc, kc, src, a_type, lda, words);
        else if (a_plain)
            kt->gemm_pack_a(trans_a, mc, kc, static_cast<const float *>(src), lda, dst);
        else
            kt->gemm_pack_a_typed(trans_a, mc, kc, src, a_type, lda, round_bf16, dst);
    }
    void pack_b(int64_t kc, int64_t nc, const void *src, float *dst) const {
        auto *words = reinterpret_cast<uint32_t *>(dst);
        if (tiles)
            kt->gemm_pack_b_tiles(trans_b, kc, nc, src, b_type, ldb, words);
        else if (pairs)
            kt->gemm_pack_b_bf16(trans_b, kc, nc, src, b_type, ldb, words);
        else if (b_plain)
            kt->gemm_pack_b(trans_b, kc, nc, static_cast<const float *>(src), ldb, dst);
        else
            kt->gemm_pack_b_typed(trans_b, kc, nc, src, b_type, ldb, round_bf16, dst);
    }

    // C[mc x n_r] = alpha * (packed A block) * (packed B sliver) + beta * C, for a block of
    // kc elements (kw words) of depth.
    void multiply_block(int64_t kc, int64_t kw, float alpha, const float *a_packed, int64_t mc,
                        const float *b_sliver, float beta, float *c, int64_t ldc,
                        int64_t n_r) const {
        const auto *b_words = reinterpret_cast<const uint32_t *>(b_sliver);
        if (tiles) {  // amx: all of the block's rows in one call
            kt->gemm_block_kernel_tiles(kw, alpha, reinterpret_cast<const uint32_t *>(a_packed),
                                        mc, b_words, beta, c, ldc, n_r);
            return;
        }
        // ir: MR rows at a time, one micro-kernel call per MR x NR tile of C.
        for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t m_r = std::min(MR, mc - ir);
            float *const c_tile = c + ir * ldc;
            if (pairs)
                kt->gemm_micro_kernel_bf16(
                    kw, alpha, reinterpret_cast<const uint32_t *>(a_packed + ir * kw), b_words,
                    beta, c_tile, ldc, m_r, n_r);
            else
                kt->gemm_micro_kernel(kc, alpha, a_packed + ir * kc, b_sliver, beta, c_tile,
                                      ldc, m_r, n_r);
        }
    }
};

int64_t panels::depth_block(int64_t k) const {
    return tiles   ? balanced_block(k, kt->gemm_kc_tiles, 32)
           : pairs ? balanced_block(k, kt->gemm_kc_bf16, 2)
                   : balanced_block(k, kt->gemm_kc, 1);
}

// How C is cut: depth blocks, column blocks of NC, row blocks of MC (cut finer when that
// gives each thread a share of the rows), and column blocks inside a packed B panel only
// when rows alone cannot occupy the threads. Depends on the shape and the thread count only.
struct blocking {
    int64_t kc_max, kw_max, nc_max, mc_max;
    int64_t row_blocks, col_blocks_wanted;
};

blocking plan_blocks(const panels &pn, int threads, int64_t m, int64_t n, int64_t k) {
    const kernels::kernel_table *kt = pn.kt;
    blocking bl{};
    bl.kc_max = pn.depth_block(k);
    bl.kw_max = pn.depth(bl.kc_max);
    bl.nc_max = balanced_block(n, kt->gemm_nc, pn.NR);
    const int64_t m_slivers = ceil_div(m, pn.MR);
    int64_t row_blocks = ceil_div(m, kt->gemm_mc);
    if (threads > 1) row_blocks = std::min(m_slivers, ceil_div(row_blocks, threads) * threads);
    bl.mc_max = pn.MR * ceil_div(m_slivers, row_blocks);
    bl.row_blocks = ceil_div(m, bl.mc_max);
    bl.col_blocks_wanted = bl.row_blocks >= threads ? 1 : ceil_div(threads, bl.row_blocks);
    return bl;
}

// C (f32) = alpha * op(A) * op(B) + beta * C with A and B of any type (see panels).
void gemm_f32_c(const exec &ex_in, const kernels::kernel_table *kt, attn_trans trans_a,
                attn_trans trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                attn_dtype a_type, int64_t lda, const void *b, attn_dtype b_type, int64_t ldb,
                float beta, float *c, int64_t ldc, bool round_bf16) {
    exec ex = ex_in;
    if (m * n * k < serial_below_madds) ex.arena = nullptr;
    if (alpha == 0.0f || k == 0) {
        scale_c(ex, m, n, beta, c, ldc);
        return;
    }
    const panels pn(kt, trans_a, trans_b, a_type, lda, b_type, ldb, round_bf16);
    const int64_t NR = pn.NR;
    const blocking bl = plan_blocks(pn, runs_parallel(ex) ? ex.num_threads : 1, m, n, k);

    // Scratch before any output is written: one B panel, one A block per worker. Small
    // serial products pack on the stack instead of paying for an allocation.
    const int slots = worker_slots(ex);
    const int64_t b_panel_floats = (bl.kw_max * ceil_div(bl.nc_max, NR) * NR + 15) / 16 * 16;
    const int64_t a_block_floats = (bl.mc_max * bl.kw_max + 15) / 16 * 16;  // 64-byte aligned
    const int64_t scratch_floats = b_panel_floats + slots * a_block_floats;
    constexpr int64_t stack_scratch_floats = 8192;  // 32 KiB: 64 x 64 x 64 fits
    alignas(64) float stack_scratch[stack_scratch_floats];
    std::unique_ptr<aligned_floats> heap_scratch;
    float *scratch = stack_scratch;
    if (scratch_floats > stack_scratch_floats) {
        heap_scratch = std::make_unique<aligned_floats>(static_cast<size_t>(scratch_floats));
        scratch = heap_scratch->get();
    }
    float *const b_panel = scratch;
    float *const a_blocks = scratch + b_panel_floats;

    const auto *const a_base = static_cast<const unsigned char *>(a);
    const auto *const b_base = static_cast<const unsigned char *>(b);
    const int64_t a_bytes = core::element_bytes(a_type);
    const int64_t b_bytes = core::element_bytes(b_type);
    // op(A)[i, p] and op(B)[p, j] as pointers into the caller's arrays.
    auto a_at = [&](int64_t i, int64_t p) -> const void * {
        return a_base + a_bytes * (trans_a == ATTN_TRANS ? p * lda + i : i * lda + p);
    };
    auto b_at = [&](int64_t p, int64_t j) -> const void * {
        return b_base + b_bytes * (trans_b == ATTN_TRANS ? j * ldb + p : p * ldb + j);
    };

    // jc: columns of C and B, NC at a time (a KC x NC panel of B is packed once per pc).
    for (int64_t jc = 0; jc < n; jc += bl.nc_max) {
        const int64_t nc = std::min(bl.nc_max, n - jc);
        const int64_t n_slivers = ceil_div(nc, NR);
        const int64_t col_blocks = std::min(n_slivers, bl.col_blocks_wanted);
        const int64_t slivers_per_col_block = ceil_div(n_slivers, col_blocks);
        // pc: the depth, KC at a time; C accumulates across pc, so beta applies only once.
        for (int64_t pc = 0; pc < k; pc += bl.kc_max) {
            const int64_t kc = std::min(bl.kc_max, k - pc);
            const int64_t kw = pn.depth(kc);
            const float beta_pc = pc == 0 ? beta : 1.0f;
            // Pack op(B)[pc:pc+kc, jc:jc+nc], split among the workers by NR slivers.
            parallel_for(ex, n_slivers, 4, [&](int64_t s0, int64_t s1) {
                const int64_t j0 = s0 * NR, j1 = std::min(nc, s1 * NR);
                pn.pack_b(kc, j1 - j0, b_at(pc, jc + j0), b_panel + s0 * kw * NR);
            });
            // ic: rows of C and A, mc at a time, each block packed by the worker that uses it;
            // the blocks (and column blocks of the B panel) are the parallel tasks.
            parallel_for_2d(ex, bl.row_blocks, 1, col_blocks, 1,
                            [&](int64_t rb0, int64_t rb1, int64_t cb0, int64_t cb1) {
                float *a_packed = a_blocks + worker_slot(ex) * a_block_floats;
                for (int64_t rb = rb0; rb < rb1; ++rb) {
                    const int64_t ic = rb * bl.mc_max;
                    const int64_t mc = std::min(bl.mc_max, m - ic);
                    pn.pack_a(mc, kc, a_at(ic, pc), a_packed);
                    const int64_t s_begin = cb0 * slivers_per_col_block;
                    const int64_t s_end = std::min(n_slivers, cb1 * slivers_per_col_block);
                    // jr: NR columns at a time; this B sliver stays in L1 across the ir loop.
                    for (int64_t s = s_begin; s < s_end; ++s) {
                        const int64_t jr = s * NR;
                        pn.multiply_block(kc, kw, alpha, a_packed, mc, b_panel + s * kw * NR,
                                          beta_pc, c + ic * ldc + jc + jr, ldc,
                                          std::min(NR, nc - jr));
                    }
                }
            });
        }
    }
}

}  // namespace

void gemm(const exec &ex, attn_trans trans_a, attn_trans trans_b, int64_t m, int64_t n,
          int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (kt == nullptr) {
        ref::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    gemm_f32_c(ex, kt, trans_a, trans_b, m, n, k, alpha, a, ATTN_DTYPE_F32, lda, b,
               ATTN_DTYPE_F32, ldb, beta, c, ldc, false);
}

void gemm_typed(const exec &ex, attn_trans trans_a, attn_trans trans_b, int64_t m, int64_t n,
                int64_t k, float alpha, const void *a, attn_dtype a_type, int64_t lda,
                const void *b, attn_dtype b_type, int64_t ldb, float beta, void *c,
                attn_dtype c_type, int64_t ldc) {
    if (m == 0 || n == 0) return;
    const bool round_bf16 = ex.fpmath == ATTN_FPMATH_BF16;
    const bool all_f32 =
        a_type == ATTN_DTYPE_F32 && b_type == ATTN_DTYPE_F32 && c_type == ATTN_DTYPE_F32;
    const kernels::kernel_table *kt = simd_kernels(ex);
    if (kt == nullptr) {
        if (all_f32 && !round_bf16)
            ref::gemm(trans_a, trans_b, m, n, k, alpha, static_cast<const float *>(a), lda,
                      static_cast<const float *>(b), ldb, beta, static_cast<float *>(c), ldc);
        else
            ref::gemm_typed(trans_a, trans_b, m, n, k, alpha, a, a_type, lda, b, b_type, ldb,
                            beta, c, c_type, ldc, round_bf16);
        return;
    }
    if (c_type == ATTN_DTYPE_F32) {
        gemm_f32_c(ex, kt, trans_a, trans_b, m, n, k, alpha, a, a_type, lda, b, b_type, ldb,
                   beta, static_cast<float *>(c), ldc, round_bf16);
        return;
    }
    // 16-bit C: the product goes to an f32 copy of C (widened when beta reads it) and is
    // rounded to c_type once, when stored back. Rows are independent: any split is exact.
    aligned_floats acc(static_cast<size_t>(m * n));
    auto *const c16 = static_cast<uint16_t *>(c);
    float *const cf = acc.get();
    const int64_t rows_per_task = std::max<int64_t>(1, 65536 / n);
    if (beta != 0.0f)
        parallel_for(ex, m, rows_per_task, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i)
                kt->convert_array(n, c16 + i * ldc, c_type, cf + i * n, ATTN_DTYPE_F32);
        });
    gemm_f32_c(ex, kt, trans_a, trans_b, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta,
               cf, n, round_bf16);
    parallel_for(ex, m, rows_per_task, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
            kt->convert_array(n, cf + i * n, ATTN_DTYPE_F32, c16 + i * ldc, c_type);
    });
}

}  // namespace attn::ops
