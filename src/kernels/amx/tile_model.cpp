// The software model of the AMX tiles (tiles.hpp): the tile registers of the calling thread
// in memory, every operation checked against the configuration and palette 1's limits, and
// TDPBF16PS with the arithmetic the instruction documents (see model::dpbf16ps in tiles.hpp).
// Compiled without ISA flags: it runs on any x86-64 CPU.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/amx/tiles.hpp"

namespace attn::kernels::amx::model {
namespace {

struct tile_state {
    bool configured = false;
    tile_config cfg;
    alignas(64) unsigned char data[palette_tiles][max_rows * max_row_bytes];
};

tile_state &state() {
    static thread_local tile_state s;
    return s;
}

[[noreturn]] void violation(const char *what, int value) {
    std::fprintf(stderr, "amx tile model: %s (%d)\n", what, value);
    std::abort();
}

// The tile's configured shape, after checking that it may be used.
const tile_state &usable(int tile) {
    const tile_state &s = state();
    if (!s.configured) violation("tile used without a configuration", tile);
    if (tile < 0 || tile >= palette_tiles) violation("tile index outside palette 1's 8", tile);
    if (s.cfg.rows[tile] == 0) violation("tile not configured (0 rows)", tile);
    return s;
}

uint32_t bits_of(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}
float float_of(uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}
float from_bf16(uint16_t h) { return float_of(uint32_t(h) << 16); }

// Subnormal inputs read as zero, subnormal results written as zero (sign kept).
float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
float quiet(float nan) { return float_of(bits_of(nan) | 0x00400000u); }
const float default_nan = float_of(0xffc00000u);

// sum + a * b rounded once (a, b, sum already flushed); NaN operands propagate in the
// order a, b, sum.
float fused_step(float sum, float a, float b) {
    if (std::isnan(a)) return quiet(a);
    if (std::isnan(b)) return quiet(b);
    if (std::isnan(sum)) return quiet(sum);
    const float r = std::fmaf(a, b, sum);
    return std::isnan(r) ? default_nan : flush(r);
}

// x + y rounded once; a NaN x wins over a NaN y.
float add(float x, float y) {
    if (std::isnan(x)) return quiet(x);
    if (std::isnan(y)) return quiet(y);
    const float r = x + y;
    return std::isnan(r) ? default_nan : flush(r);
}

}  // namespace

void configure(const tile_config &cfg) {
    if (cfg.palette_id != 1) violation("palette other than 1", cfg.palette_id);
    if (cfg.start_row != 0) violation("start_row not 0", cfg.start_row);
    for (int i = 0; i < 14; ++i)
        if (cfg.reserved[i] != 0) violation("reserved configuration byte not 0", i);
    for (int t = 0; t < 16; ++t) {
        const int rows = cfg.rows[t], colsb = cfg.colsb[t];
        if (t >= palette_tiles && (rows != 0 || colsb != 0))
            violation("tile beyond palette 1's 8 configured", t);
        if (rows > max_rows) violation("more than 16 rows", rows);
        if (colsb > max_row_bytes) violation("more than 64 bytes per row", colsb);
        if ((rows == 0) != (colsb == 0)) violation("tile with rows or bytes but not both", t);
    }
    tile_state &s = state();
    s.cfg = cfg;
    std::memset(s.data, 0, sizeof s.data);
    s.configured = true;
}

void release() {
    tile_state &s = state();
    s.configured = false;
    s.cfg = tile_config{};
    std::memset(s.data, 0, sizeof s.data);
}

bool configured() { return state().configured; }

void load(int tile, const void *src, int64_t stride) {
    tile_state &s = const_cast<tile_state &>(usable(tile));
    const int rows = s.cfg.rows[tile], colsb = s.cfg.colsb[tile];
    unsigned char *t = s.data[tile];
    std::memset(t, 0, sizeof s.data[tile]);  // bytes past the shape read as zero
    for (int r = 0; r < rows; ++r)
        std::memcpy(t + r * max_row_bytes, static_cast<const unsigned char *>(src) + r * stride,
                    size_t(colsb));
}

void store(int tile, void *dst, int64_t stride) {
    const tile_state &s = usable(tile);
    const int rows = s.cfg.rows[tile], colsb = s.cfg.colsb[tile];
    for (int r = 0; r < rows; ++r)
        std::memcpy(static_cast<unsigned char *>(dst) + r * stride,
                    s.data[tile] + r * max_row_bytes, size_t(colsb));
}

void zero(int tile) {
    tile_state &s = const_cast<tile_state &>(usable(tile));
    std::memset(s.data[tile], 0, sizeof s.data[tile]);
}

void dpbf16ps(int c, int a, int b) {
    tile_state &s = const_cast<tile_state &>(usable(c));
    usable(a);
    usable(b);
    if (c == a || c == b || a == b) violation("TDPBF16PS with a tile used twice", c);
    const int m_rows = s.cfg.rows[c], n = s.cfg.colsb[c] / 4;
    const int k = s.cfg.colsb[a] / 4;
    if (s.cfg.rows[a] != m_rows) violation("TDPBF16PS: rows of a differ from rows of c", a);
    if (s.cfg.colsb[b] != s.cfg.colsb[c]) violation("TDPBF16PS: bytes of b differ from c", b);
    if (s.cfg.rows[b] != k) violation("TDPBF16PS: rows of b differ from a's pairs", b);
    if (s.cfg.colsb[c] % 4 != 0 || s.cfg.colsb[a] % 4 != 0)
        violation("TDPBF16PS: row bytes not whole pairs", c);
    float *dst = reinterpret_cast<float *>(s.data[c]);
    const auto *ta = reinterpret_cast<const uint16_t *>(s.data[a]);
    const auto *tb = reinterpret_cast<const uint16_t *>(s.data[b]);
    constexpr int row_halves = max_row_bytes / 2;  // bf16 per stored row
    for (int m = 0; m < m_rows; ++m)
        for (int j = 0; j < n; ++j) {
            float first = 0.0f, second = 0.0f;
            for (int p = 0; p < k; ++p) {
                const uint16_t *ap = ta + m * row_halves + 2 * p;
                const uint16_t *bp = tb + p * row_halves + 2 * j;
                first = fused_step(first, flush(from_bf16(ap[0])), flush(from_bf16(bp[0])));
                second = fused_step(second, flush(from_bf16(ap[1])), flush(from_bf16(bp[1])));
            }
            float &out = dst[m * (max_row_bytes / 4) + j];
            out = add(flush(out), add(first, second));
        }
}

}  // namespace attn::kernels::amx::model
