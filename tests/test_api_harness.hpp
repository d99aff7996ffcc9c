// Harness for the argument-validation tests: every tensor of a call lives in one memory
// pool, so "no output was written" is a byte comparison of the whole pool before and after
// a rejected call, whatever the case made alias what.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "attn/attn.h"
#include "test_util.hpp"

namespace attn_test {

constexpr float kSentinel = 1234.5f;  // what outputs hold before a call

class tensor_pool {
public:
    explicit tensor_pool(size_t capacity) : floats_(capacity, 0.0f), ints_(256, 0) {}
    tensor_pool(const tensor_pool &) = delete;
    tensor_pool &operator=(const tensor_pool &) = delete;

    // n floats of deterministic data in [-1, 1], after a gap so tensors never touch.
    float *input(size_t n) { return take(n, false); }
    // n floats holding kSentinel.
    float *output(size_t n) { return take(n, true); }
    // n int32 values, each `value`.
    int32_t *ints(size_t n, int32_t value) {
        EXPECT_LE(ints_used_ + n, ints_.size());
        int32_t *p = ints_.data() + ints_used_;
        for (size_t i = 0; i < n; ++i) p[i] = value;
        ints_used_ += n + 8;
        return p;
    }
    // Every byte the pool holds, including the extra bytes a test registers.
    std::string snapshot() const {
        std::string s(reinterpret_cast<const char *>(floats_.data()), floats_.size() * 4);
        s.append(reinterpret_cast<const char *>(ints_.data()), ints_.size() * 4);
        for (auto &[p, n] : extra_) s.append(static_cast<const char *>(p), n);
        return s;
    }
    // Adds memory outside the pool (e.g. an array of pointers) to the snapshot.
    void watch(const void *p, size_t bytes) { extra_.push_back({p, bytes}); }

private:
    float *take(size_t n, bool is_output) {
        EXPECT_LE(used_ + n + 16, floats_.size()) << "pool too small";
        float *p = floats_.data() + used_;
        for (size_t i = 0; i < n; ++i)
            p[i] = is_output ? kSentinel : float((used_ + i) % 17) / 8.0f - 1.0f;
        used_ += n + 16;
        return p;
    }
    std::vector<float> floats_;
    std::vector<int32_t> ints_;
    std::vector<std::pair<const void *, size_t>> extra_;
    size_t used_ = 0, ints_used_ = 0;
};

// One rule: how to break a valid call, and what the message must contain besides the
// function's name (the argument and its value).
template <class Call>
struct rule_case {
    std::string name;
    std::function<void(Call &)> mutate;
    std::vector<std::string> expect;
};

// The two implementations every rule is checked on.
inline std::vector<path> validation_paths() {
    return {{ATTN_IMPL_REFERENCE, ATTN_ISA_AUTO, "reference"},
            {ATTN_IMPL_SIMD, ATTN_ISA_AUTO, "simd"}};
}

// The unmodified call succeeds and writes its outputs: proves the pool comparison below
// can see a write.
template <class Call>
void expect_baseline_writes(attn_context *ctx) {
    Call call;
    const std::string before = call.pool.snapshot();
    ASSERT_EQ(call.run(ctx), ATTN_OK) << attn_last_error();
    EXPECT_NE(call.pool.snapshot(), before) << "the valid call wrote nothing";
}

// The broken call returns ATTN_INVALID_ARGUMENT, names the function, the argument and the
// value, and leaves every byte of the pool as it was.
template <class Call>
void expect_rejected(attn_context *ctx, const rule_case<Call> &rule) {
    SCOPED_TRACE(rule.name);
    Call call;
    rule.mutate(call);
    const std::string before = call.pool.snapshot();
    const attn_status s = call.run(ctx);
    EXPECT_EQ(s, ATTN_INVALID_ARGUMENT) << attn_status_string(s);
    const std::string message = attn_last_error();
    EXPECT_EQ(message.rfind(std::string(Call::function) + ": ", 0), 0u) << message;
    for (const std::string &part : rule.expect)
        EXPECT_NE(message.find(part), std::string::npos)
            << "message \"" << message << "\" lacks \"" << part << "\"";
    EXPECT_TRUE(call.pool.snapshot() == before) << "a rejected call wrote to memory";
}

}  // namespace attn_test
