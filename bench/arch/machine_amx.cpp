// Machine benchmark kernels for amx (avx512_bf16 flags plus -mamx-tile -mamx-bf16): the AMX
// bf16 peak, four independent tile products TDPBF16PS (C 16x16 f32 += A 16x32 bf16 times B
// 32x16 bf16: 16 * 16 * 32 * 2 flops each) into tiles 0-3 from A in tile 4 and B in tile 5.
// Registered only where the library reports the amx level (the OS granted the tile state).
#include <cstring>

#include "arch/machine_kernels.hpp"

namespace attn_bench {

const machine_kernels *machine_kernels_avx512_bf16();

namespace {

struct tile_config {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

float amx_chains(int64_t reps) {
    alignas(64) tile_config cfg;
    std::memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 6; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    alignas(64) uint16_t a[16 * 32], b[16 * 32];
    alignas(64) float c[16 * 16];
    for (int i = 0; i < 16 * 32; ++i) a[i] = b[i] = 0x3c00;  // small bf16 values
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, b, 64);
    for (int64_t r = 0; r < reps; ++r) {
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 5);
        _tile_dpbf16ps(2, 4, 5);
        _tile_dpbf16ps(3, 4, 5);
    }
    _tile_stored(0, c, 64);
    _tile_release();
    return c[0];
}

}  // namespace

const machine_kernels *machine_kernels_amx() {
    static const machine_kernels k = [] {
        machine_kernels m = *machine_kernels_avx512_bf16();
        m.amx_chains = &amx_chains;
        m.amx_flops_per_rep = 4.0 * 16 * 16 * 32 * 2;
        m.bf16_products_exp = nullptr;  // a VDPBF16PS loop: measured on the avx512_bf16 level
        return m;
    }();
    return &k;
}
}  // namespace attn_bench
