// Which keys of a backward key tile each query row of a step sees, and which rows of the step
// each key is seen by, from the one visibility definition (core/scores.hpp): the cuts of
// the fused backward's products (attention_backward.hpp), so that a key hidden from a query row
// (window, causal limit, kv_len) is never read for it and hidden work is skipped. Plain C++.
//
// A row's visible keys [lo, hi) move right with the row (both ends non-decreasing), so the
// rows that see a key c form one range [first, end) too, moving right with c.
#pragma once

#include <cstdint>

#include "kernels/attention_args.hpp"
#include "core/scores.hpp"
#include "kernels/isa_namespace.hpp"

ATTN_KERNELS_BEGIN

// Keys per backward tile (a multiple of every ISA's K panel) and query rows per step.
inline constexpr int64_t backward_bk = 128;
inline constexpr int64_t backward_br = 72;

namespace backward_detail {

// Rows [i0, i0 + rows) of a step (rows <= MaxRows) against tile keys [0, keys) (key key0 + c
// is column c).
template <int64_t MaxRows>
struct step_ranges_of {
    int64_t rows = 0, keys = 0;  // the step's rows; the tile's keys (columns)
    int64_t row_lo[MaxRows], row_hi[MaxRows];               // columns row r sees: [lo, hi)
    int64_t key_first[backward_bk], key_end[backward_bk];   // rows that see column c

    step_ranges_of(const attention_backward_tile &t, int64_t i0, int64_t step_rows)
        : rows(step_rows), keys(t.keys) {
        for (int64_t r = 0; r < rows; ++r) {
            const key_range k = t.visibility.row(i0 + r);
            int64_t lo = k.lo - t.key0, hi = k.hi - t.key0;
            lo = lo < 0 ? 0 : (lo > t.keys ? t.keys : lo);
            hi = hi < lo ? lo : (hi > t.keys ? t.keys : hi);
            row_lo[r] = lo;
            row_hi[r] = hi;
        }
        // column c is seen by rows with hi > c and lo <= c: from the first row whose hi passes
        // c to the first whose lo does
        int64_t first = 0, end = 0;
        for (int64_t c = 0; c < t.keys; ++c) {
            while (first < rows && row_hi[first] <= c) ++first;
            while (end < rows && row_lo[end] <= c) ++end;
            key_first[c] = first;
            key_end[c] = end > first ? end : first;
        }
    }
    key_range row(int64_t r) const { return {row_lo[r], row_hi[r]}; }
    key_range key(int64_t c) const { return {key_first[c], key_end[c]}; }
    // The columns every row of [r0, r1) sees; the rows every column of [c0, c1) is seen by.
    // Empty ({x, x}) when there are none.
    key_range shared_by_rows(int64_t r0, int64_t r1) const {
        return common(row_lo[r1 - 1], row_hi[r0]);
    }
    key_range shared_by_keys(int64_t c0, int64_t c1) const {
        return common(key_first[c1 - 1], key_end[c0]);
    }

  private:
    static key_range common(int64_t lo, int64_t hi) { return {lo, hi > lo ? hi : lo}; }
};
using step_ranges = step_ranges_of<backward_br>;

// The two parts of `own` outside `shared` (either may be empty; all of own when shared is).
struct range_parts {
    key_range part[2];
    range_parts(key_range own, key_range shared) {
        if (shared.hi <= shared.lo) {
            part[0] = own;
            part[1] = {own.hi, own.hi};
            return;
        }
        part[0] = {own.lo, shared.lo < own.hi ? shared.lo : own.hi};
        part[1] = {shared.hi > own.lo ? shared.hi : own.lo, own.hi};
    }
};

}  // namespace backward_detail
ATTN_KERNELS_END  // namespace attn::kernels::ATTN_ISA_NAMESPACE
