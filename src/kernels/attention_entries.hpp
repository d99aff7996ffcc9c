// The entries of the attention implementation list (attention_impl.hpp) that every level has,
// for one Arch: decode (attention_decode.hpp) and f32_tiles (attention.hpp). Included by
// instantiate.hpp, with the level's flags.
#pragma once

#include "kernels/attention.hpp"
#include "kernels/attention_args.hpp"
#include "kernels/attention_decode.hpp"
#include "kernels/attention_impl.hpp"
#include "kernels/isa_namespace.hpp"

ATTN_KERNELS_BEGIN

namespace attention_entries_detail {

inline void use_f32_panels(attention_tile &t, const float *packed) { t.k_packed = packed; }

// V as padded f32 rows, read as such (not paged).
inline void use_padded_v(attention_tile &t, const float *packed, int64_t ld, int64_t) {
    t.v = kv_rows{};
    t.v.base = packed;
    t.v.type = ATTN_DTYPE_F32;
    t.v.ld = ld;
    t.v_padded = true;
}

// A tile without packed K and with few rows (the last tile of a split sequence whose K was too
// large to pack up front) reads K in place, as decoding does.
template <class Arch>
void f32_tile(const attention_tile &t) {
    if (!t.k_packed && t.rows <= attention_direct_rows)
        attention_decode_tile<Arch>(t);
    else
        attention_forward_tile<Arch>(t);
}

// The f32 tiles' key blocking, micro-kernel width and scratch regions, with tiles of br rows:
// where the decode entry (br: the rows it takes at once; a sequence of more takes several)
// and the entries that pack K (the f32 tiles' rows) start.
template <class Arch>
attention_impl f32_blocking(int br) {
    attention_impl e{};
    e.br = br;
    e.bc = attention_blocking<Arch>::bc;
    e.nr = attention_blocking<Arch>::nr_vectors * int(xsimd::batch<float, Arch>::size);
    e.scratch_floats = &attention_scratch_floats<Arch>;
    return e;
}

}  // namespace attention_entries_detail

template <class Arch>
attention_impl attention_decode_entry() {
    attention_impl e = attention_entries_detail::f32_blocking<Arch>(attention_direct_rows);
    e.name = "decode";
    e.max_queries = attention_direct_rows;
    e.few_queries = decode_few_queries;
    e.few_row_bits = decode_few_row_bits;
    e.forward_tile = &attention_decode_tile<Arch>;
    e.weights_tile = &attention_weights_tile<Arch>;
    return e;
}

// The f32 tiles' blocking, scratch and packing, without their kernels: the start of every
// entry that packs K (f32_tiles here, the bf16-pair entries), so that an entry with kernels of
// its own instantiates no other's.
template <class Arch>
attention_impl attention_packed_tiles_base() {
    namespace detail = attention_entries_detail;
    attention_impl e = detail::f32_blocking<Arch>(attention_blocking<Arch>::br);
    e.pack_k = &attention_pack_k<Arch>;
    e.pack_v = &attention_pad_v<Arch>;
    e.use_packed_k = &detail::use_f32_panels;
    e.use_packed_v = &detail::use_padded_v;
    return e;
}

template <class Arch>
attention_impl attention_f32_tiles_entry() {
    attention_impl e = attention_packed_tiles_base<Arch>();
    e.name = "f32_tiles";
    e.forward_tile = &attention_entries_detail::f32_tile<Arch>;
    e.weights_tile = &attention_weights_tile<Arch>;
    return e;
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
