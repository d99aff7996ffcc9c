// The list of forward attention implementations. Each ISA's kernel table holds its entries,
// best first; the plan (ops/sdpa_plan.hpp) gives each sequence of a call the first entry that
// takes it, and the driver (ops/sdpa.cpp) packs K and V and runs the tiles through that entry
// alone: the layouts an entry packs (f32 panels, bf16 pairs, ...) are its own business. A new
// kind of attention kernel is an entry here and a line in the tables of the levels that have
// it. Plain data, no xsimd: the drivers read it, the tables fill it.
//
// Today's entries, in the order they are tried:
//   decode_pairs  the avx512_bf16 and amx levels, a bf16 cache when bf16 products are allowed:
//               the decode entry's blocks with VDPBF16PS over K's pairs of dims and over pairs
//               of keys of V, both read in place (attention_decode_pairs.hpp);
//   decode_pv_pairs  the same levels, a bf16 cache where the products must be exact (f32 or f16
//               queries) and several rows share a KV head: S as the decode entry forms it, P
//               rounded to bf16 and P V on VDPBF16PS as in decode_pairs;
//   decode      a few query rows (or a decoding step of a small head group, its heads as
//               rows): K and V read in place, widened (and dequantized) in registers, nothing
//               packed (attention_decode.hpp), attention_direct_rows rows a tile; a sequence
//               of a few more rows (speculative decoding's drafts, a short chunk of prefill)
//               too, its tiles each reading the keys again (from cache), while that costs less
//               than packing them (attention_args.hpp); a decoding step of a large head group (MLA,
//               GQA of 16 heads a KV head or more) goes to the entries below with its heads as
//               the tile's rows (ops/sdpa_plan.hpp);
//   amx_tiles   the amx levels, when bf16 products are allowed: S and P V on AMX tiles, K and V
//               in the bf16-pair layout (amx/attention_amx.hpp);
//   bf16_pairs  the avx512_bf16 level, when bf16 products are allowed: VDPBF16PS over pairs
//               of keys (attention_bf16.hpp);
//   bf16_code_pairs  the avx512_bf16 level, a quantized cache whose codes bf16 holds exactly,
//               with a scale a key: the bf16-pair tiles over the codes, the scales outside
//               the products (attention_bf16_entries.hpp); amx_code_tiles in its place on the
//               amx levels, the same on AMX tiles;
//   f32_tiles   every level: K in f32 panels, V rows padded (attention.hpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "core/formats.hpp"
#include "core/kv_rows.hpp"

namespace attn::kernels {

struct attention_tile;  // attention_args.hpp

// The products a call's types and fpmath allow (ops/sdpa.cpp applies attn.h's numerics):
//   pairs       bf16 pairs of the stored values (q and K in bf16, or ATTN_FPMATH_BF16);
//   code_pairs  bf16 pairs of a quantized cache's codes, each key's K scale applied to its
//               score and its V scale folded into P before P is rounded to bf16 (bf16 queries
//               with a bf16 output, or ATTN_FPMATH_BF16; one scale a row, no zero points).
struct call_products {
    bool pairs, code_pairs;
    call_products(bool pairs_ = false, bool code_pairs_ = false)  // NOLINT: a bool is `pairs`
        : pairs(pairs_), code_pairs(code_pairs_) {}
};

struct attention_impl {
    const char *name;
    // The sequences it takes: at most max_queries query rows (0: any number), or up to
    // few_queries rows when the rows that share a KV head (query heads a KV head x rows) times
    // the bits of a K element are at most few_row_bits; when pair_products (code_pairs), only
    // in calls that allow call_products::pairs (code_pairs); when bf16_kv_only, only over K
    // and V stored in bf16 (read in place as pairs); only when at least min_shared_rows rows
    // share a KV head (query heads a KV head x rows).
    int64_t max_queries;
    int64_t few_queries, few_row_bits;
    int64_t min_shared_rows;
    bool pair_products;
    bool code_pairs;
    bool bf16_kv_only;
    // Its tiles: query rows and keys per tile, keys per packed K panel, and the scratch of one
    // tile (64-byte aligned floats).
    int br, bc, nr;
    int64_t (*scratch_floats)(int64_t dim_qk, int64_t dim_v);
    // Packing once per head (pack_k null: K and V are read where they live):
    //   pack_k: K rows first .. keys_end - 1 into `panels` panels of nr keys, from `packed`
    //     on, k_floats_per_key(dim_qk) floats a key (k_pairs: two bf16 dims to a 32-bit word);
    //   pack_v: V rows first .. first + keys - 1 into rows of ld floats (ld >= dim_v; the
    //     pair entries lay them out their own way in as many floats);
    //   use_packed_k / use_packed_v: point a tile at them (use_packed_k: at the panel that
    //     holds key 0 of the tile's key axis; use_packed_v: with pack_v's ld and keys).
    bool k_pairs;
    void (*pack_k)(const core::kv_rows &k, int64_t first, int64_t keys_end, int64_t dim_qk,
                   int64_t panels, float *packed);
    void (*pack_v)(const core::kv_rows &v, int64_t first, int64_t keys, int64_t dim_v,
                   float *packed, int64_t ld);
    void (*use_packed_k)(attention_tile &t, const float *packed);
    void (*use_packed_v)(attention_tile &t, const float *packed, int64_t ld, int64_t keys);
    // The tile (attention_args.hpp's contract), and the weights of its rows.
    void (*forward_tile)(const attention_tile &t);
    void (*weights_tile)(const attention_tile &t, float *weights, int64_t weights_ld,
                         bool after_forward);

    bool packs() const { return pack_k != nullptr; }
    int64_t k_floats_per_key(int64_t dim_qk) const { return k_pairs ? (dim_qk + 1) / 2 : dim_qk; }
    bool takes(int64_t queries, call_products allowed, int64_t group, int64_t kv_bits,
               attn_dtype kv_type) const {
        return (max_queries == 0 || queries <= max_queries ||
                (queries <= few_queries && group * queries * kv_bits <= few_row_bits)) &&
               (!pair_products || allowed.pairs) && (!code_pairs || allowed.code_pairs) &&
               reads(kv_type) && group * queries >= min_shared_rows;
    }
    // Whether it takes K and V of kv_type at all.
    bool reads(attn_dtype kv_type) const { return !bf16_kv_only || kv_type == ATTN_DTYPE_BF16; }
    // Whether its products are bf16 pairs in a call that allows them.
    bool runs_pairs(call_products allowed) const {
        return (pair_products && allowed.pairs) || (code_pairs && allowed.code_pairs);
    }
};

// An ISA's entries, best first; the last one takes every sequence.
struct attention_impl_list {
    static constexpr int capacity = 8;
    attention_impl entries[capacity];
    int count;

    // The first entry that takes a sequence of `queries` query rows, `group` query heads a
    // KV head, over K and V of kv_type. Where the call may pack K and V for an entry of bf16
    // pairs, whose products run at twice the f32 rate, while the entries reading them in place
    // would take f32 products (a quantized cache under bf16 products), the few-rows rule counts
    // twice the bits.
    const attention_impl &choose(int64_t queries, call_products allowed, int64_t group = 1,
                                 attn_dtype kv_type = ATTN_DTYPE_F32) const {
        bool packed_pairs = false, in_place_pairs = false;
        for (int i = 0; i < count; ++i) {
            const attention_impl &e = entries[i];
            if (!e.runs_pairs(allowed)) continue;
            if (e.packs()) packed_pairs = true;
            else if (e.reads(kv_type)) in_place_pairs = true;
        }
        const int64_t kv_bits = core::element_bits(kv_type) * (packed_pairs && !in_place_pairs ? 2 : 1);
        for (int i = 0; i + 1 < count; ++i)
            if (entries[i].takes(queries, allowed, group, kv_bits, kv_type)) return entries[i];
        return entries[count - 1];
    }
    // The first entry that packs K and takes `rows` rows (a decoding step's heads as the rows
    // of its tiles: ops/sdpa_plan.hpp).
    const attention_impl &choose_packing(int64_t rows, call_products allowed) const {
        for (int i = 0; i + 1 < count; ++i)
            if (entries[i].packs() && entries[i].takes(rows, allowed, 1, 32, ATTN_DTYPE_F32)) return entries[i];
        return entries[count - 1];
    }
    // The entry called `name`, or null.
    attention_impl *find(const char *name) {
        for (int i = 0; i < count; ++i)
            if (std::strcmp(entries[i].name, name) == 0) return &entries[i];
        return nullptr;
    }
    void append(const attention_impl &e) {
        make_room();
        entries[count++] = e;
    }
    // e before the entry called `name` (which must be there).
    void insert_before(const char *name, const attention_impl &e) {
        const attention_impl *before = find(name);
        if (before == nullptr) throw std::logic_error("attention_impl_list: no such entry");
        make_room();
        const int at = int(before - entries);
        for (int i = count; i > at; --i) entries[i] = entries[i - 1];
        entries[at] = e;
        ++count;
    }
    // The largest tile scratch and tile of any entry (the driver's per-worker slots).
    int64_t max_scratch_floats(int64_t dim_qk, int64_t dim_v) const {
        int64_t m = 0;
        for (int i = 0; i < count; ++i) {
            const int64_t s = entries[i].scratch_floats(dim_qk, dim_v);
            m = s > m ? s : m;
        }
        return m;
    }
    void make_room() const {
        if (count == capacity) throw std::logic_error("attention_impl_list: list full");
    }
    int max_br() const {
        int m = 0;
        for (int i = 0; i < count; ++i) m = entries[i].br > m ? entries[i].br : m;
        return m;
    }
};

}  // namespace attn::kernels
