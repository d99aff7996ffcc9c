// The tile layer: the AMX operations the tile kernels use, behind one narrow interface with
// two implementations, so that the same kernel source runs on the real tiles and on an exact
// software model of them.
//   amx_hw_tiles     the instructions (LDTILECFG, TILELOADD, TILESTORED, TILEZERO, TDPBF16PS,
//                    TILERELEASE); defined only where the translation unit is compiled with
//                    -mamx-tile -mamx-bf16.
//   amx_model_tiles  the model (tile_model.cpp): per-thread tile registers in memory, the
//                    palette's limits checked on every operation, TDPBF16PS as documented.
// A kernel is a template on the policy; its tile indices are template arguments because the
// instructions encode them as immediates. It configures the tiles through tile_guard, whose
// destructor releases them: a thread (a TBB worker, a caller's thread) never keeps, nor
// inherits, a configuration across kernels.
#pragma once

#include <cstdint>

namespace attn::kernels::amx {

// Palette 1's limits: 8 tiles (tmm0-7) of at most 16 rows of at most 64 bytes.
constexpr int palette_tiles = 8, max_rows = 16, max_row_bytes = 64;

// The 64-byte operand of LDTILECFG, as the instruction reads it.
struct tile_config {
    uint8_t palette_id = 0;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};  // bytes per row of each tile
    uint8_t rows[16] = {};
};
static_assert(sizeof(tile_config) == 64, "LDTILECFG reads 64 bytes");

// Palette 1 with tiles 0 .. count-1 all `rows` x `row_bytes`.
inline tile_config uniform_config(int count, int rows, int row_bytes) {
    tile_config c;
    c.palette_id = 1;
    for (int t = 0; t < count; ++t) {
        c.rows[t] = static_cast<uint8_t>(rows);
        c.colsb[t] = static_cast<uint16_t>(row_bytes);
    }
    return c;
}

// The model's operations (tile_model.cpp). Each checks the configuration and the palette's
// limits and ends the process with a message naming the violation (the hardware raises #GP
// or #UD for the same misuse). State is per thread, as the tile registers are.
namespace model {
void configure(const tile_config &cfg);
void release();
bool configured();
void load(int tile, const void *src, int64_t stride);
void store(int tile, void *dst, int64_t stride);
void zero(int tile);
// tile c (rows x n pairs of f32) += tile a (rows x k bf16 pairs) * tile b (k rows x n bf16
// pairs), with TDPBF16PS's documented arithmetic: per element of c, the products of the
// pairs' first halves are summed over k in order in one f32 sum, the second halves' in
// another, both starting at zero; each step is a fused multiply-add (the bf16 product is
// exact, one rounding to nearest even); then c + (first + second). Subnormal inputs (a, b
// and c) are read as zero and subnormal results written as zero; MXCSR plays no part. An
// operation on a NaN returns it quieted, the first NaN operand of a, b, sum (and of c, then
// the pair's sum) winning; invalid operations (inf * 0, inf - inf) give the default NaN
// 0xffc00000. Measured bit for bit against the tiles of a Sapphire Rapids class Xeon
// (tests/test_amx_tiles.cpp).
void dpbf16ps(int c, int a, int b);
}  // namespace model

struct amx_model_tiles {
    static void configure(const tile_config &cfg) { model::configure(cfg); }
    static void release() { model::release(); }
    template <int T>
    static void load(const void *src, int64_t stride) { model::load(T, src, stride); }
    template <int T>
    static void store(void *dst, int64_t stride) { model::store(T, dst, stride); }
    template <int T>
    static void zero() { model::zero(T); }
    template <int C, int A, int B>
    static void dpbf16ps() { model::dpbf16ps(C, A, B); }
};

// GCC spells the macros __AMX_TILE__ / __AMX_BF16__, clang 14 __AMXTILE__ / __AMXBF16__.
#if (defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_BF16__) || defined(__AMXBF16__))
}  // namespace attn::kernels::amx
#include <immintrin.h>
namespace attn::kernels::amx {

// GCC's _tile_loadd, _tile_stored, _tile_zero and _tile_dpbf16ps are macros that paste their
// tile arguments into the instruction text, so they take literal digits only; these are the
// same single instructions with the tile index a template constant ("%c" prints it bare).
// The "memory" clobbers order them against the surrounding loads and stores of the buffers.
struct amx_hw_tiles {
    static void configure(const tile_config &cfg) { _tile_loadconfig(&cfg); }
    static void release() { _tile_release(); }
    template <int T>
    static void load(const void *src, int64_t stride) {
        __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(src), "r"(stride), "n"(T)
                         : "memory");
    }
    template <int T>
    static void store(void *dst, int64_t stride) {
        __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(dst), "r"(stride), "n"(T)
                         : "memory");
    }
    template <int T>
    static void zero() { __asm__ volatile("tilezero %%tmm%c0" ::"n"(T)); }
    template <int C, int A, int B>
    static void dpbf16ps() {
        __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"n"(C), "n"(A), "n"(B));
    }
};
#endif

// Configures the tiles for the life of a kernel; releases them (TILERELEASE: every tile to
// zero, the configuration to the initial state) when the kernel ends, by return or unwind.
template <class Tiles>
class tile_guard {
public:
    explicit tile_guard(const tile_config &cfg) { Tiles::configure(cfg); }
    ~tile_guard() { Tiles::release(); }
    tile_guard(const tile_guard &) = delete;
    tile_guard &operator=(const tile_guard &) = delete;
};

}  // namespace attn::kernels::amx
