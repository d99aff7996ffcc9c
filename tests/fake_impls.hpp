// A list of attention implementations for tests of the plan, with blocks no ISA has (96-row
// tiles, 128-key blocks, 64-key panels): a decode entry for up to 4 rows that packs nothing,
// then tiles that pack K (their kernels are never run).
#pragma once

#include "kernels/attention_impl.hpp"

namespace attn_test {

inline attn::kernels::attention_impl_list fake_impls() {
    attn::kernels::attention_impl decode{};
    decode.name = "decode";
    decode.max_queries = 4;
    decode.few_queries = decode.few_row_bits = 0;
    decode.br = 96;
    decode.bc = 128;
    decode.nr = 64;
    attn::kernels::attention_impl tiles = decode;
    tiles.name = "tiles";
    tiles.max_queries = 0;
    tiles.pack_k = [](const attn::core::kv_rows &, int64_t, int64_t, int64_t, int64_t, float *) {};
    attn::kernels::attention_impl_list impls{};
    impls.append(decode);
    impls.append(tiles);
    return impls;
}

}  // namespace attn_test
