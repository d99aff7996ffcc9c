// Parallel loops for the drivers: run inside the context's tbb::task_arena, or inline on the
// calling thread when there is no arena or a single thread.
//
// Reproducibility: the loops split [0, count) into chunks with tbb::simple_partitioner, whose
// splitting depends only on count and grain, never on the number of threads. A body must
// still compute every index the same way whichever chunk it lands in (no reductions across
// the indices of a chunk), because the inline path hands it the whole range at once. Then
// results are bitwise identical for every thread count.
#pragma once

#include <cstdint>

#include <tbb/blocked_range.h>
#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include "ops/ops.hpp"

namespace attn::ops {

// True when a loop should be handed to TBB at all.
inline bool runs_parallel(const exec &ex) { return ex.arena != nullptr && ex.num_threads > 1; }

// body(begin, end) over [0, count), in chunks of at most `grain` indices.
template <class Body>
void parallel_for(const exec &ex, int64_t count, int64_t grain, const Body &body) {
    if (count <= 0) return;
    if (grain < 1) grain = 1;
    if (!runs_parallel(ex) || count <= grain) {
        body(int64_t{0}, count);
        return;
    }
    ex.arena->execute([&] {
        tbb::parallel_for(
            tbb::blocked_range<int64_t>(0, count, static_cast<size_t>(grain)),
            [&](const tbb::blocked_range<int64_t> &r) { body(r.begin(), r.end()); },
            tbb::simple_partitioner());
    });
}

// body(row_begin, row_end, col_begin, col_end) over [0, rows) x [0, cols), in blocks of at
// most row_grain x col_grain.
template <class Body>
void parallel_for_2d(const exec &ex, int64_t rows, int64_t row_grain, int64_t cols,
                     int64_t col_grain, const Body &body) {
    if (rows <= 0 || cols <= 0) return;
    if (row_grain < 1) row_grain = 1;
    if (col_grain < 1) col_grain = 1;
    if (!runs_parallel(ex) || (rows <= row_grain && cols <= col_grain)) {
        body(int64_t{0}, rows, int64_t{0}, cols);
        return;
    }
    ex.arena->execute([&] {
        using range2d = tbb::blocked_range2d<int64_t>;
        tbb::parallel_for(
            range2d(0, rows, static_cast<size_t>(row_grain), 0, cols,
                    static_cast<size_t>(col_grain)),
            [&](const range2d &r) {
                body(r.rows().begin(), r.rows().end(), r.cols().begin(), r.cols().end());
            },
            tbb::simple_partitioner());
    });
}

// body(task) for every task in [0, count): one task per index, for work already cut into
// fixed tiles by the caller.
template <class Body>
void parallel_tasks(const exec &ex, int64_t count, const Body &body) {
    parallel_for(ex, count, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) body(t);
    });
}

}  // namespace attn::ops
