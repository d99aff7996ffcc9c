// Parallel loops for the drivers: run inside the context's tbb::task_arena, or inline on the
// calling thread when there is no arena or a single thread.
//
// Reproducibility: the loops split [0, count) into chunks with tbb::simple_partitioner, whose
// splitting depends only on count and grain, never on the number of threads. A body must
// still compute every index the same way whichever chunk it lands in (no reductions across
// the indices of a chunk), because the inline path hands it the whole range at once. Then
// results are bitwise identical for every thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

#include <tbb/blocked_range.h>
#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include "ops/ops.hpp"

namespace attn::ops {

// ThreadSanitizer cannot see the synchronisation inside the TBB runtime (not built with it).
// In a -fsanitize=thread build the loops below state the two edges TBB guarantees: what the
// caller did before a loop happens before every body, and every body happens before the loop
// returns. Races between bodies stay visible.
#if defined(__SANITIZE_THREAD__)
#define ATTN_TSAN_EDGES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ATTN_TSAN_EDGES 1
#endif
#endif
#ifdef ATTN_TSAN_EDGES
extern "C" void __tsan_acquire(void *addr);
extern "C" void __tsan_release(void *addr);
#define ATTN_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#define ATTN_TSAN_RELEASE(addr) __tsan_release(addr)
#else
#define ATTN_TSAN_ACQUIRE(addr) ((void)(addr))
#define ATTN_TSAN_RELEASE(addr) ((void)(addr))
#endif

// arena.execute(f), where f may run on one of the arena's threads rather than the caller's
// (when the arena is busy): the sanitizer is told the caller's work happens before f.
template <class F>
void execute_in(tbb::task_arena &arena, const F &f) {
    struct handed_over {
        const F *f;
        void operator()() const {
            ATTN_TSAN_ACQUIRE(const_cast<handed_over *>(this));
            (*f)();
        }
    } call{&f};
    ATTN_TSAN_RELEASE(&call);
    arena.execute(call);
}

// True when a loop should be handed to TBB at all.
inline bool runs_parallel(const exec &ex) { return ex.arena != nullptr && ex.num_threads > 1; }

// Per-worker scratch: a body may index buffers by worker_slot(ex), which is in
// [0, worker_slots(ex)) and distinct among the bodies running at the same moment.
inline int worker_slots(const exec &ex) {
    return runs_parallel(ex) ? ex.arena->max_concurrency() : 1;
}
inline int worker_slot(const exec &ex) {
    return runs_parallel(ex) ? tbb::this_task_arena::current_thread_index() : 0;
}

// A 64-byte aligned float buffer; throws std::bad_alloc like new.
class aligned_floats {
public:
    explicit aligned_floats(size_t count)
        : data_(static_cast<float *>(
              ::operator new(sizeof(float) * (count ? count : 1), std::align_val_t(64)))) {}
    ~aligned_floats() { ::operator delete(data_, std::align_val_t(64)); }
    aligned_floats(const aligned_floats &) = delete;
    aligned_floats &operator=(const aligned_floats &) = delete;
    float *get() const { return data_; }

private:
    float *data_;
};

// body(begin, end) over [0, count), in chunks of at most `grain` indices.
template <class Body>
void parallel_for(const exec &ex, int64_t count, int64_t grain, const Body &body) {
    if (count <= 0) return;
    if (grain < 1) grain = 1;
    if (!runs_parallel(ex)) {
        body(int64_t{0}, count);
        return;
    }
    char start = 0, done = 0;
    ATTN_TSAN_RELEASE(&start);
    execute_in(*ex.arena, [&] {
        tbb::parallel_for(
            tbb::blocked_range<int64_t>(0, count, static_cast<size_t>(grain)),
            [&](const tbb::blocked_range<int64_t> &r) {
                ATTN_TSAN_ACQUIRE(&start);
                body(r.begin(), r.end());
                ATTN_TSAN_RELEASE(&done);
            },
            tbb::simple_partitioner());
    });
    ATTN_TSAN_ACQUIRE(&done);
}

// body(row_begin, row_end, col_begin, col_end) over [0, rows) x [0, cols), in blocks of at
// most row_grain x col_grain.
template <class Body>
void parallel_for_2d(const exec &ex, int64_t rows, int64_t row_grain, int64_t cols,
                     int64_t col_grain, const Body &body) {
    if (rows <= 0 || cols <= 0) return;
    if (row_grain < 1) row_grain = 1;
    if (col_grain < 1) col_grain = 1;
    if (!runs_parallel(ex)) {
        body(int64_t{0}, rows, int64_t{0}, cols);
        return;
    }
    char start = 0, done = 0;
    ATTN_TSAN_RELEASE(&start);
    execute_in(*ex.arena, [&] {
        using range2d = tbb::blocked_range2d<int64_t>;
        tbb::parallel_for(
            range2d(0, rows, static_cast<size_t>(row_grain), 0, cols,
                    static_cast<size_t>(col_grain)),
            [&](const range2d &r) {
                ATTN_TSAN_ACQUIRE(&start);
                body(r.rows().begin(), r.rows().end(), r.cols().begin(), r.cols().end());
                ATTN_TSAN_RELEASE(&done);
            },
            tbb::simple_partitioner());
    });
    ATTN_TSAN_ACQUIRE(&done);
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
