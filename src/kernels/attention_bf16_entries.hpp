// The entries of the attention implementation list (attention_impl.hpp) on bf16 pairs
// (attention_bf16.hpp), for the avx512_bf16 level (and the amx levels, whose table starts
// from it): bf16_pairs, the products of the stored values in bf16, and bf16_code_pairs, the
// products of a quantized cache's codes, its scales outside them. Both take the f32 tiles'
// blocks and scratch with K and V in the pair layouts, and only sequences with more rows than
// the decode entry takes (which reads K and V once, in place, with exact products in f32:
// bound by memory where each K and V row serves one query row, by its vector operations where
// several share it, e.g. 4 query heads a KV head: 64 multiply-adds a KV row at D128).
// Needs -mavx512bf16: included only by src/kernels/arch/avx512_bf16.cpp.
#pragma once

#include "kernels/attention_bf16.hpp"
#include "kernels/attention_entries.hpp"
#include "kernels/isa_namespace.hpp"

ATTN_KERNELS_BEGIN
namespace attention_bf16_detail {

// K pair panels: a key's share of a panel is dim_qk / 2 pairs, 32-bit words, rounded up;
// Codes: of a quantized cache's codes.
template <class Arch, bool Codes>
void pack_k_entry(const kv_rows &k, int64_t first, int64_t keys_end, int64_t dim_qk,
                  int64_t panels, float *packed) {
    pack_k_pairs<Arch>(Codes ? k.codes() : k, first, keys_end, dim_qk, panels,
                       reinterpret_cast<uint16_t *>(packed));
}

// V as pair rows (dims of two keys interleaved) of dim_v rounded up to a vector, 32-bit words,
// in column chunks (v_pair_rows): (keys + 1) / 2 of them fit the keys * ld floats given.
template <class Arch, bool Codes>
void pack_v_entry(const kv_rows &v, int64_t first, int64_t keys, int64_t dim_v, float *packed,
                  int64_t) {
    pack_v_pairs<Arch>(Codes ? v.codes() : v, first, keys, dim_v,
                       attention_detail::round_up(dim_v, lanes<Arch>), v_chunk_words<Arch>,
                       reinterpret_cast<uint16_t *>(packed));
}

inline void use_k_pairs(attention_tile &t, const float *packed) {
    t.k_pairs = reinterpret_cast<const uint16_t *>(packed);
}

// t.v keeps the stored rows, for the keys taken one at a time.
inline void use_v_pairs(attention_tile &t, const float *packed, int64_t, int64_t keys) {
    t.v_pairs = reinterpret_cast<const uint16_t *>(packed);
    t.v_pairs_rows = (keys + 1) / 2;
}

template <class Arch, bool Codes>
void forward_tile(const attention_tile &t) {
    attention_forward_tile_with<Arch, bf16_scores<Arch, Codes>>(t);
}

template <class Arch, bool Codes>
void weights_tile(const attention_tile &t, float *weights, int64_t weights_ld, bool after_forward) {
    attention_weights_tile_with<Arch, bf16_scores<Arch, Codes>>(t, weights, weights_ld, after_forward);
}

template <class Arch, bool Codes>
attention_impl pairs_entry() {
    attention_impl e = attention_packed_tiles_base<Arch>();
    e.name = Codes ? "bf16_code_pairs" : "bf16_pairs";
    e.pair_products = !Codes;
    e.code_pairs = Codes;
    e.k_pairs = true;
    e.pack_k = &pack_k_entry<Arch, Codes>;
    e.pack_v = &pack_v_entry<Arch, Codes>;
    e.use_packed_k = &use_k_pairs;
    e.use_packed_v = &use_v_pairs;
    e.forward_tile = &forward_tile<Arch, Codes>;
    e.weights_tile = &weights_tile<Arch, Codes>;
    return e;
}

}  // namespace attention_bf16_detail

template <class Arch>
attention_impl attention_bf16_pairs_entry() {
    return attention_bf16_detail::pairs_entry<Arch, false>();
}

template <class Arch>
attention_impl attention_bf16_code_pairs_entry() {
    return attention_bf16_detail::pairs_entry<Arch, true>();
}

ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
