// How the decode passes (attention_decode_quantized.hpp) find and fetch the K and V rows of a
// block of keys: row_walk gives the row readers of consecutive keys by stride from the first
// (paged rows through the addressing function, core/kv_rows.hpp), row_prefetch brings the rows
// of keys ahead into cache: dense rows (a row's bytes its stride) K as one span a block of keys
// in the score pass and V inside the P V loop (v_prefetch), in spans of rows where one row reads
// a KV head and row by row for several; other rows both in the score pass, row by row.
#pragma once

#include "kernels/isa_namespace.hpp"

#include <cstdint>
#include <cstring>
#include <limits>

#include "core/kv_rows.hpp"
#include "kernels/attention_args.hpp"
#include "kernels/attention_pack.hpp"
#include "kernels/kernels.hpp"
#include "kernels/row_reader.hpp"

ATTN_KERNELS_BEGIN
namespace attention_decode_detail {

// K and V rows this many keys ahead are prefetched (a few KB in flight per thread), at least.
inline constexpr int64_t decode_prefetch_keys = 16;

// Dense K and V rows (decoding's usual cache) may be prefetched further: as many keys as fill
// decode_prefetch().bytes of a row's stream (dispatch.cpp: by CPU family), between
// decode_prefetch_keys and dense_prefetch_keys_max. One row, H32 over 32 KV heads, D128,
// Lk16384 (a cache of 138 MB), on Zen 5: I8 (128-byte rows, 64 keys ahead) takes 0.9x the
// time it takes 16 keys ahead; bf16 (256 bytes, 32 keys) the same time, and 1.03x 64 keys
// ahead. On Zen 4 16 keys ahead is the faster, and rows of 128 and 256 bytes from a call whose
// K and V stream from memory are not prefetched at all (decode_prefetch()'s memory rows).
inline constexpr int64_t dense_prefetch_keys_max = 64;

// Rows at least a page apart (e.g. [batch, seq, head, dim] layouts) are not prefetched:
// with 4 KB pages each such row is a TLB miss, and prefetching them ahead made decoding
// 1.5x slower (B1 H32 L4096 D128, seq stride 16 KB), where rows sharing pages gain 10-20%.
inline constexpr int64_t decode_page_bytes = 4096;

// Whether x's consecutive rows are less than a page apart (worth prefetching). A division, not
// a product: a stride may be as large as int64 allows when one row is read.
inline bool rows_share_pages(const kv_rows &x) {
    return x.ld < decode_page_bytes * 8 / core::element_bits(x.type);
}

// Room for the row readers of up to N keys, left unset: row_walk's prime and readers() write
// each one before it is read, where an array of N readers would set every field of each at
// every call (at Lk16, 15% of the P V pass's samples).
template <class Arch, class E, int N>
struct reader_slots {
    union {
        row_reader<Arch, E> at[N];
    };
    reader_slots() {}
};

// The row readers of keys j0 + c of x: contiguous rows (and their scales) by stride from key
// j0's, found once, without the addressing function's division and type switch per key; paged
// rows (and 4-bit rows of odd stride) through it.
template <class Arch, class E>
struct row_walk {
    const kv_rows &x;
    int64_t j0;
    bool by_stride;
    row_reader<Arch, E> first;  // key j0's (by_stride)
    int64_t step = 0;           // storage elements from a row to the next
    row_walk(const kv_rows &x_, int64_t j) : x(x_), j0(j), by_stride(!x_.pages && !(E::bits == 4 && x_.ld % 2 != 0)) {
        if (by_stride) {
            first = row_reader<Arch, E>(x, j0);
            step = E::bits == 4 ? x.ld / 2 : x.ld;  // a row's storage elements (bytes of 4-bit rows)
        }
    }
    // Readers out[0 .. n) made ready for readers(): by stride, the fields every key shares set
    // once here, so that readers() writes only the row and scale pointers.
    void prime(int64_t n, row_reader<Arch, E> *out) const {
        for (int64_t i = 0; by_stride && i < n; ++i) out[i] = first;
    }
    // out[i] = the first scale of key j0 + c + i's row, i < n (one scale a row): by stride
    // where the rows go so (a copy where the scales are contiguous), else from the readers
    // in[0 .. n) of those keys.
    __attribute__((always_inline)) void row_scales(int64_t c, int64_t n, const row_reader<Arch, E> *in,
                                                   float *out) const {
        if constexpr (E::quantized) {
            if (!by_stride) {
                for (int64_t i = 0; i < n; ++i) out[i] = in[i].sc[0];
                return;
            }
            const int64_t stride = x.scales.row_stride;
            const float *s0 = first.sc + c * stride;
            if (stride == 1) std::memcpy(out, s0, sizeof(float) * size_t(n));
            else
                for (int64_t i = 0; i < n; ++i) out[i] = s0[i * stride];
        }
    }
    // out[i] = the reader of key j0 + c + i, i < n (out primed for at least n keys)
    __attribute__((always_inline)) void readers(int64_t c, int64_t n, row_reader<Arch, E> *out) const {
        if (!by_stride) {
            for (int64_t i = 0; i < n; ++i) out[i] = row_reader<Arch, E>(x, j0 + c + i);
            return;
        }
        for (int64_t i = 0; i < n; ++i) {
            out[i].p = first.p + (c + i) * step;
            if constexpr (E::quantized) {
                out[i].sc = first.sc + (c + i) * x.scales.row_stride;
                if (first.ze) out[i].ze = first.ze + (c + i) * x.scales.row_stride;
            }
        }
    }
};

// Each 64-byte line of the `bytes` at address `at`, once (an address past an array's end is
// only prefetched, never read: a prefetch cannot fault), into the L2 only where l2.
__attribute__((always_inline)) inline void prefetch_lines(uintptr_t at, int64_t bytes, bool l2) {
#pragma GCC unroll 4
    for (uintptr_t a = at & ~uintptr_t(63); a < at + uintptr_t(bytes); a += 64)
        attention_detail::prefetch_line(reinterpret_cast<const char *>(a), l2);
}

// V rows to prefetch inside the P V loop: key c's is the row at at + c * step (at 0: none). The
// rows are contiguous (step bytes each), so every span-th key (span a power of two, the most
// rows that fit span_bytes, at least one) prefetches the lines of the next span rows at once.
// One row a KV head (pv_in_registers) takes spans of 2 KB: a row's few prefetches and the
// loop around them in every key had cost about as much as an 8-bit row's products; several
// rows a KV head prefetch row by row (spans of 1 KB and 4 KB made H32 over 8 KV heads 1.05x
// and 1.2-1.3x slower over bf16).
struct v_prefetch {
    uintptr_t at = 0;
    int64_t step = 0, span = 1;
    bool l2 = false;  // into the L2 only (row_prefetch::to_l2)
    v_prefetch() = default;
    v_prefetch(uintptr_t a, int64_t s, int64_t span_bytes, bool to_l2) : at(a), step(s), l2(to_l2) {
        while (2 * span * step <= span_bytes) span *= 2;
    }
    __attribute__((always_inline)) void fetch(int64_t c) const {
        if (!at || (c & (span - 1)) != 0) return;
        prefetch_lines(at + uintptr_t(c * step), span * step, l2);
    }
};

// Prefetches of the K and V rows of key j0 + c: by stride where the rows are contiguous (no
// addressing function per key), through the block table where paged. Only where rows share
// pages: rows a page apart each cost a TLB miss, and prefetching them made decoding slower.
// Prefetched rows of decode_prefetch().memory_l2_from bytes or more that stream from memory go
// into the L2 only. On Zen 4, f32 rows (512 bytes, D128) prefetched into the L1 were read at
// 13-16 GB/s where a core reads 19-20 (the L1's few misses in flight taken by prefetches); into
// the L2, H32 over 32 KV heads took 0.72-0.78x the time at one thread and 0.62-0.77x at two,
// over 8 KV heads (Lk4096, 32 MiB) 0.55-0.59x, bf16 over 8 KV heads (Lk16384, four rows a KV
// head) 0.84-0.88x. Rows of 128 bytes (I8, E4M3, several rows a KV head) took 1.02-1.09x
// there, and caches held in the L3 (bf16, 16 MiB) 1.3x: they keep prefetching into the L1.
struct row_prefetch {
    const decode_prefetch_policy &policy;  // this CPU's (decode_prefetch()), read once
    const kv_rows &k, &v;
    int64_t dim_k, dim_v, k_bytes, v_bytes;  // elements and bytes read of a row
    bool on;
    bool to_l2;  // prefetches into the L2 only
    const char *k0 = nullptr, *v0 = nullptr;  // key j0's rows, contiguous rows only
    int64_t k_step = 0, v_step = 0;            // bytes from a row to the next, likewise
    int64_t keys_ahead = decode_prefetch_keys;  // how far ahead: further for dense rows
    // Tile t's K and V rows from key j0 on, dk and dv elements read of each, for a pass over
    // `rows` query rows. The rows stream where the call's K and V fill 3/4 of the last-level cache
    // (attention_tile::kv_beyond_llc) and the pass reads them for one query row, one key's row
    // after another (with several rows a KV head, rows read in step, H32 over 8 KV heads,
    // Lk16384: no prefetch took 1.04x the time over I8 and 1.08-1.1x over bf16, on Zen 4).
    row_prefetch(const attention_tile &t, int64_t dk, int64_t dv, int64_t j0, int rows)
        : policy(decode_prefetch()), k(t.k), v(t.v), dim_k(dk), dim_v(dv),
          k_bytes(core::element_offset_bytes(t.k.type, dk + dk % 2)),
          v_bytes(core::element_offset_bytes(t.v.type, dv + dv % 2)),
          on(rows_share_pages(t.k) && rows_share_pages(t.v) &&
             !(t.kv_beyond_llc && rows == 1 && rows_within(policy.memory_rows_from, policy.memory_rows_below))),
          to_l2(on && t.kv_beyond_llc && policy.memory_l2_from > 0 &&
                rows_within(policy.memory_l2_from, std::numeric_limits<int64_t>::max())) {
        // (strides of rows sharing pages are small: their products below cannot overflow)
        if (on && !k.pages && !v.pages && k.ld * core::element_bits(k.type) % 8 == 0 &&
            v.ld * core::element_bits(v.type) % 8 == 0) {
            k0 = static_cast<const char *>(k.row(j0));
            v0 = static_cast<const char *>(v.row(j0));
            k_step = core::element_offset_bytes(k.type, k.ld);
            v_step = core::element_offset_bytes(v.type, v.ld);
            if (dense()) {
                const int64_t row = k_bytes > v_bytes ? k_bytes : v_bytes, fill = policy.bytes / row;
                keys_ahead = fill < decode_prefetch_keys    ? decode_prefetch_keys
                             : fill > dense_prefetch_keys_max ? dense_prefetch_keys_max
                                                              : fill;
            }
        }
    }
    bool dense() const { return k0 && k_step == k_bytes && v_step == v_bytes; }
    // Whether the K and V rows read are both of [from, below) bytes (the policy's row sizes)
    bool rows_within(int64_t from, int64_t below) const {
        return k_bytes >= from && v_bytes >= from && k_bytes < below && v_bytes < below;
    }
    // The score pass's prefetches, as it reads keys j0 + [c, c + n), for the keys keys_ahead
    // further (none past hi): dense rows K's lines only, as one span; else K and V row by row.
    template <class Arch>
    __attribute__((always_inline)) void fetch_scores(int64_t j0, int64_t c, int64_t n, int64_t hi) const {
        const int64_t c0 = c + keys_ahead;
        const int64_t c1 = c0 + n < hi ? c0 + n : hi;
        if (!on || c1 <= c0) return;
        if (!dense()) {
            for (int64_t c = c0; c < c1; ++c) fetch<Arch>(j0, c);
            return;
        }
        prefetch_lines(reinterpret_cast<uintptr_t>(k0) + uintptr_t(c0 * k_step), (c1 - c0) * k_step, to_l2);
    }
    // The P V loop's for the keys from j0 + c0 (dense rows; else none): V rows keys_ahead
    // ahead.
    v_prefetch v_ahead(int64_t c0, int64_t span_bytes) const {
        if (!dense()) return {};
        return v_prefetch(reinterpret_cast<uintptr_t>(v0) + uintptr_t((c0 + keys_ahead) * v_step), v_step, span_bytes, to_l2);
    }
    template <class Arch>
    __attribute__((always_inline)) void fetch(int64_t j0, int64_t c) const {
        if (k0) {
            attention_detail::prefetch_row<Arch>(k0 + c * k_step, k_bytes, to_l2);
            attention_detail::prefetch_row<Arch>(v0 + c * v_step, v_bytes, to_l2);
        } else {
            attention_detail::prefetch_row<Arch>(k.row(j0 + c), k.type, 0, dim_k, to_l2);
            attention_detail::prefetch_row<Arch>(v.row(j0 + c), v.type, 0, dim_v, to_l2);
        }
    }
};

}  // namespace attention_decode_detail
ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
