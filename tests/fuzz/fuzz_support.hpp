// What the API fuzzer is built from: tensor views over separately allocated buffers (so
// AddressSanitizer sees every access outside a tensor's storage), layout arithmetic the
// harness uses to size buffers and to know which calls the library must reject, and the
// protocol that runs one call on the reference and on a SIMD ISA and compares them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "attn/attn.h"

namespace fuzz {

struct call;
inline const call *&current_call();
inline std::string describe_current();

[[noreturn]] inline void fail(const char *what, const char *detail = "") {
    std::fprintf(stderr, "fuzz_api: %s %s\n  call: %s\n", what, detail, describe_current().c_str());
    std::abort();
}
#define FUZZ_CHECK(cond, what)                                                          \
    do {                                                                                \
        if (!(cond)) fuzz::fail(what, "(" #cond ")");                                   \
    } while (0)

// Buffers larger than this (in floats) are never allocated: such a call is skipped.
constexpr int64_t max_buffer_floats = int64_t(1) << 21;
// Calls whose views hold more elements than this are skipped (keeps the address sets small).
constexpr int64_t max_view_elements = int64_t(1) << 18;

// A tensor [n0, n1, n2, n3] starting at element `offset` of buffer `buf` (-1: a null pointer);
// element (a, b, c, d) is at offset + a*s[0] + b*s[1] + c*s[2] + d (last dim contiguous).
// Matrices are views {1, 1, rows, cols} with s[2] = the leading dimension.
struct view {
    int buf = -1;
    int64_t offset = 0;
    int64_t n[4] = {1, 1, 1, 1};
    int64_t s[3] = {0, 0, 0};
};

inline int64_t elements(const view &t) {
    int64_t count = 1;
    for (int64_t n : t.n) {
        if (n <= 0) return 0;
        if (__builtin_mul_overflow(count, n, &count)) return INT64_MAX;
    }
    return count;
}

// One past the highest element the view can address, relative to its start; 0 when it has
// no element; -1 when the layout is undefined: a negative size, a negative stride on a dim
// longer than 1, or an extent that overflows int64.
inline int64_t extent(const view &t) {
    for (int64_t n : t.n)
        if (n < 0) return -1;
    for (int64_t n : t.n)
        if (n == 0) return 0;
    int64_t e = t.n[3];
    for (int d = 0; d < 3; ++d) {
        if (t.n[d] == 1) continue;
        if (t.s[d] < 0) return -1;
        int64_t span;
        if (__builtin_mul_overflow(t.n[d] - 1, t.s[d], &span)) return -1;
        if (__builtin_add_overflow(e, span, &e)) return -1;
    }
    return e;
}

// Every element address of a defined, small view, sorted.
inline std::vector<int64_t> addresses(const view &t) {
    std::vector<int64_t> out;
    if (extent(t) <= 0) return out;
    out.reserve(static_cast<size_t>(elements(t)));
    for (int64_t a = 0; a < t.n[0]; ++a)
        for (int64_t b = 0; b < t.n[1]; ++b)
            for (int64_t c = 0; c < t.n[2]; ++c) {
                int64_t row = t.offset + a * t.s[0] + b * t.s[1] + c * t.s[2];
                for (int64_t d = 0; d < t.n[3]; ++d) out.push_back(row + d);
            }
    std::sort(out.begin(), out.end());
    return out;
}

// True when two distinct indices of the view reach the same element: an output laid out
// like this would be written twice, which the API rejects.
inline bool aliased_within(const view &t) {
    auto a = addresses(t);
    return std::adjacent_find(a.begin(), a.end()) != a.end();
}

// True when the two views share at least one element.
inline bool overlap(const view &x, const view &y) {
    if (x.buf < 0 || x.buf != y.buf) return false;
    auto a = addresses(x), b = addresses(y);
    std::vector<int64_t> both;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
    return !both.empty();
}

inline std::string str(const view &t) {
    if (t.buf < 0) return "null";
    char s[200];
    std::snprintf(s, sizeof s, "buf%d+%lld [%lld,%lld,%lld,%lld] strides {%lld,%lld,%lld}", t.buf,
                  (long long)t.offset, (long long)t.n[0], (long long)t.n[1], (long long)t.n[2],
                  (long long)t.n[3], (long long)t.s[0], (long long)t.s[1], (long long)t.s[2]);
    return s;
}

// Deterministic values for a buffer: multiples of 1/16 in [-1, 1]. With so few mantissa bits
// every product and every partial sum of the sizes fuzzed is exact, so paths that sum in a
// different order still agree to rounding of the final non-linear steps.
struct value_source {
    uint64_t state;
    float next() {
        state += 0x9E3779B97F4A7C15ULL;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        return static_cast<float>(static_cast<int>(z % 33) - 16) / 16.0f;
    }
};

// Stores an int into an enum-typed field through its bytes. The API's C callers may pass any
// int; C++ code must not load such a value as the enum type, so the harness keeps the int.
template <class Enum>
void set_enum(Enum &field, int value) {
    static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized");
    std::memcpy(&field, &value, sizeof value);
}

using snapshot = std::vector<std::vector<float>>;

// The buffers of one fuzz input. Each is its own heap block, sized exactly.
struct pool {
    std::vector<std::vector<float>> bufs;

    // A buffer for the view (plus its offset), filled from `src`. Undefined or empty views
    // get a small buffer: the library must reject them before touching it. Returns false
    // when the view is too large to allocate.
    bool place(view &t, value_source &src) {
        int64_t e = extent(t);
        if (e > max_buffer_floats || (e >= 0 && elements(t) > max_view_elements)) return false;
        int64_t size = t.offset + (e > 0 ? e : 4);
        bufs.emplace_back(static_cast<size_t>(size));
        for (auto &x : bufs.back()) x = src.next();
        t.buf = static_cast<int>(bufs.size()) - 1;
        return true;
    }
    // Makes `t` share the storage of `host` (same buffer, same start), growing it if needed.
    bool alias(view &t, const view &host, value_source &src) {
        int64_t e = extent(t);
        if (host.buf < 0 || e > max_buffer_floats || (e >= 0 && elements(t) > max_view_elements))
            return false;
        t.buf = host.buf;
        t.offset = host.offset;
        auto &b = bufs[static_cast<size_t>(host.buf)];
        while (static_cast<int64_t>(b.size()) < t.offset + std::max<int64_t>(e, 4)) b.push_back(src.next());
        return true;
    }
    float *at(const view &t) { return t.buf < 0 ? nullptr : bufs[static_cast<size_t>(t.buf)].data() + t.offset; }
    snapshot save() const { return bufs; }
    void restore(const snapshot &s) {
        for (size_t i = 0; i < bufs.size(); ++i) std::memcpy(bufs[i].data(), s[i].data(), s[i].size() * sizeof(float));
    }
    bool same_bytes(const snapshot &s) const {
        for (size_t i = 0; i < bufs.size(); ++i)
            if (std::memcmp(bufs[i].data(), s[i].data(), s[i].size() * sizeof(float)) != 0) return false;
        return true;
    }
};

// Overwrites a few elements of the given input buffers with values the API must survive:
// NaN, +-inf, 1e30, FLT_MAX, denormals. Returns a bitmask of what was written
// (1: NaN, 2: +inf, 4: -inf, 8: huge finite, 16: denormal or zero).
inline unsigned inject_specials(FuzzedDataProvider &in, pool &p, const std::vector<int> &targets) {
    unsigned kinds = 0;
    if (targets.empty()) return 0;
    int count = in.ConsumeIntegralInRange<int>(0, 3);
    for (int i = 0; i < count; ++i) {
        int buf = targets[in.ConsumeIntegralInRange<size_t>(0, targets.size() - 1)];
        if (buf < 0) continue;
        auto &b = p.bufs[static_cast<size_t>(buf)];
        size_t at = in.ConsumeIntegralInRange<size_t>(0, b.size() - 1);
        switch (in.ConsumeIntegralInRange<int>(0, 5)) {
        case 0: b[at] = NAN; kinds |= 1; break;
        case 1: b[at] = INFINITY; kinds |= 2; break;
        case 2: b[at] = -INFINITY; kinds |= 4; break;
        case 3: b[at] = 1e30f; kinds |= 8; break;
        case 4: b[at] = -3.4028235e38f; kinds |= 8; break;
        default: b[at] = 1e-40f; kinds |= 16; break;
        }
    }
    return kinds;
}

// max |got - want| / (1 + |want|) over the listed elements; infinity when NaN or inf
// placement differs.
inline double max_rel_error(const snapshot &got, const snapshot &want,
                            const std::vector<std::vector<char>> &which) {
    double worst = 0.0;
    for (size_t b = 0; b < which.size(); ++b)
        for (size_t i = 0; i < which[b].size(); ++i) {
            if (!which[b][i]) continue;
            double g = got[b][i], w = want[b][i];
            if (std::isnan(g) || std::isnan(w) || std::isinf(g) || std::isinf(w)) {
                if (!(std::isnan(g) && std::isnan(w)) && g != w) return INFINITY;
                continue;
            }
            worst = std::max(worst, std::fabs(g - w) / (1.0 + std::fabs(w)));
        }
    return worst;
}

// One API call, run against every buffer of the pool.
struct call {
    std::function<attn_status(attn_context *)> run;
    std::vector<view> outputs;     // what the call may write
    bool must_reject = false;      // the API defines this call as invalid
    bool must_accept = false;      // the API defines this call as valid: a rejection is a finding
    bool compare = true;           // inputs finite and moderate: reference and SIMD agree to 1e-4
    double tolerance = 1e-4;
    // Extra checks on a pair of accepted results (reference, SIMD), e.g. NaN placement.
    std::function<void(const snapshot &ref, const snapshot &simd)> check;
    // The call's arguments in words, printed with a finding.
    std::function<std::string()> describe;
};

// The call being executed, for the message of a finding.
inline const call *&current_call() {
    static const call *c = nullptr;
    return c;
}

struct run_stats {
    uint64_t calls = 0, accepted = 0, rejected = 0, compared = 0;
};
inline run_stats &stats() {
    static run_stats s;
    return s;
}

// Runs `c` on the reference context and on one SIMD ISA with 1 and with 2 threads, each
// time from the same initial buffers, and checks the contract:
//  - a rejected call returns INVALID_ARGUMENT or OUT_OF_MEMORY, sets a message, writes nothing;
//  - an accepted call writes only the elements of its outputs, and was allowed;
//  - every path gives the same status; the two thread counts agree bitwise;
//  - with clean inputs the reference and SIMD agree to max|simd-ref|/(1+|ref|) <= tolerance.
inline void execute(pool &p, const call &c, attn_context *reference, attn_context *simd_1t,
                    attn_context *simd_2t) {
    current_call() = &c;
    const snapshot initial = p.save();
    std::vector<std::vector<char>> writable(p.bufs.size());
    for (size_t b = 0; b < p.bufs.size(); ++b) writable[b].assign(p.bufs[b].size(), 0);
    for (const view &o : c.outputs)
        if (o.buf >= 0 && !c.must_reject)
            for (int64_t a : addresses(o))
                if (a < static_cast<int64_t>(writable[static_cast<size_t>(o.buf)].size()))
                    writable[static_cast<size_t>(o.buf)][static_cast<size_t>(a)] = 1;

    attn_context *contexts[3] = {reference, simd_1t, simd_2t};
    attn_status status[3];
    snapshot result[3];
    for (int k = 0; k < 3; ++k) {
        p.restore(initial);
        status[k] = c.run(contexts[k]);
        if (status[k] != ATTN_OK) {
            if (c.must_accept) fail("rejected a call the API defines as valid:", attn_last_error());
            FUZZ_CHECK(status[k] == ATTN_INVALID_ARGUMENT || status[k] == ATTN_OUT_OF_MEMORY,
                       "unexpected status for a rejected call");
            FUZZ_CHECK(p.same_bytes(initial), "a rejected call wrote to a buffer");
            FUZZ_CHECK(attn_last_error()[0] != '\0', "a rejected call left no message");
            continue;
        }
        if (c.must_reject) fail("accepted a call the API defines as invalid");
        for (size_t b = 0; b < p.bufs.size(); ++b)
            for (size_t i = 0; i < p.bufs[b].size(); ++i)
                if (!writable[b][i] &&
                    std::memcmp(&p.bufs[b][i], &initial[b][i], sizeof(float)) != 0)
                    fail("an accepted call wrote outside its outputs");
        result[k] = p.save();
    }
    FUZZ_CHECK(status[0] == status[1] && status[1] == status[2], "paths disagree on the status");
    ++stats().calls;
    if (status[0] != ATTN_OK) {
        ++stats().rejected;
        return;
    }
    ++stats().accepted;
    for (size_t b = 0; b < p.bufs.size(); ++b)
        FUZZ_CHECK(std::memcmp(result[1][b].data(), result[2][b].data(), result[1][b].size() * sizeof(float)) == 0,
                   "1 and 2 threads differ bitwise");
    if (c.compare) {
        ++stats().compared;
        double err = max_rel_error(result[1], result[0], writable);
        if (!(err <= c.tolerance)) {
            char msg[64];
            std::snprintf(msg, sizeof msg, "max rel error %g", err);
            fail("SIMD and reference disagree:", msg);
        }
    }
    if (c.check) c.check(result[0], result[1]);
}

inline std::string describe_current() {
    const call *c = current_call();
    return c && c->describe ? c->describe() : std::string("(no description)");
}

}  // namespace fuzz
