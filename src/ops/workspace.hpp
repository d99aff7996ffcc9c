// Memory a call keeps for the next call on the same context: the forward driver's scratch, its
// plan and bookkeeping; the fused backward's scratch, row terms and dQ buffers. After a first
// call, repeating a call of the same or a smaller shape on that context allocates nothing in
// proportion to the problem: buffers only grow, vectors keep their capacity. A context holds
// a pool of workspaces; a call takes one for its duration, so calls on one context from
// several threads at once each have their own. The memory is released when the context is
// destroyed.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "ops/ops.hpp"
#include "ops/parallel.hpp"

namespace attn::ops {

// A 64-byte aligned float buffer that only grows.
class growing_floats {
public:
    // At least n floats (their contents undefined); reallocates only past what it holds.
    float *get(size_t n) {
        if (!buf_ || n > size_) {
            buf_.reset();
            size_ = 0;
            buf_ = std::make_unique<aligned_floats>(n);
            size_ = n;
        }
        return buf_->get();
    }

private:
    std::unique_ptr<aligned_floats> buf_;
    size_t size_ = 0;
};

// The states of the drivers that ran in it, one per type: a driver defines a default-
// constructible struct of the vectors and buffers it reuses, and finds it by its type.
class workspace {
public:
    template <class State>
    State &state() {
        static char tag;  // one address per State (not const: constants may be merged)
        for (entry &e : entries_)
            if (e.tag == &tag) return *static_cast<State *>(e.state.get());
        entries_.push_back(entry{&tag, std::make_shared<State>()});
        return *static_cast<State *>(entries_.back().state.get());
    }

private:
    struct entry {
        const void *tag;
        std::shared_ptr<void> state;
    };
    std::vector<entry> entries_;
};

class workspace_pool {
public:
    // A workspace for the lifetime of the lease, back to its pool afterwards (or, from no
    // pool, a workspace of the call's own).
    class lease {
    public:
        lease(workspace_pool *pool, std::unique_ptr<workspace> ws)
            : pool_(pool), ws_(std::move(ws)) {}
        lease(lease &&) = default;
        lease(const lease &) = delete;
        lease &operator=(const lease &) = delete;
        lease &operator=(lease &&) = delete;
        ~lease() {
            if (pool_ && ws_) pool_->give_back(std::move(ws_));
        }
        workspace &operator*() const { return *ws_; }

    private:
        workspace_pool *pool_;
        std::unique_ptr<workspace> ws_;
    };

    lease take() {
        std::lock_guard<std::mutex> lock(mutex_);
        if (free_.empty()) {
            // room for every workspace ever made, so that giving one back (in a destructor)
            // never allocates
            free_.reserve(++created_);
            return lease(this, std::make_unique<workspace>());
        }
        std::unique_ptr<workspace> ws = std::move(free_.back());
        free_.pop_back();
        return lease(this, std::move(ws));
    }

private:
    void give_back(std::unique_ptr<workspace> ws) {
        std::lock_guard<std::mutex> lock(mutex_);
        free_.push_back(std::move(ws));
    }
    std::mutex mutex_;
    std::vector<std::unique_ptr<workspace>> free_;
    size_t created_ = 0;
};

// The call's workspace: from its context's pool, or its own when the exec has none.
inline workspace_pool::lease take_workspace(const exec &ex) {
    if (ex.workspaces) return ex.workspaces->take();
    return workspace_pool::lease(nullptr, std::make_unique<workspace>());
}

}  // namespace attn::ops
