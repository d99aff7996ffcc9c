// attn-fingerprint: the shared pieces of the corpus (inputs drawn from a fixed seed, the
// hash of what a call wrote, the record of hashes per function). Public C API only.
#pragma once

#include <attn/attn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace attn_fingerprint {

// FNV-1a, 64 bits, over bytes.
struct fnv1a {
    uint64_t h = 0xcbf29ce484222325ull;
    void add(const void *p, size_t n) {
        const auto *b = static_cast<const unsigned char *>(p);
        for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
    }
    template <class T>
    void add(const std::vector<T> &v) { add(v.data(), v.size() * sizeof(T)); }
};

// xorshift64*: the same numbers on every machine and every run.
struct rng {
    uint64_t s;
    explicit rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 1) {}
    uint64_t bits() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545f4914f6cdd1dull;
    }
    float uniform(float lo, float hi) {  // 24 random bits, exactly representable
        return lo + (hi - lo) * float(bits() >> 40) * (1.0f / 16777216.0f);
    }
};

// n elements of `type` with values in about [-1, 1]: f32 draws, bf16 their top halves, f16
// patterns built directly (so no input depends on the library's own conversions).
std::vector<unsigned char> draw(rng &r, attn_dtype type, int64_t n);
std::vector<float> draw_f32(rng &r, int64_t n, float lo = -1.0f, float hi = 1.0f);

// Hashes per function (and per case, for --cases), in the order they were first seen.
struct record {
    std::vector<std::string> order;
    std::map<std::string, fnv1a> functions;
    struct case_hash_note {
        std::string name;
        uint64_t hash;
        std::string note;  // the message of a call that did not return ATTN_OK
    };
    std::vector<case_hash_note> cases;
    fnv1a *current = nullptr;
    fnv1a case_hash;
    std::string case_name, case_note;

    // Starts a case of `function`; what follows is hashed into both.
    void begin(const std::string &function, const std::string &name);
    void add(const void *p, size_t n) {
        current->add(p, n);
        case_hash.add(p, n);
    }
    template <class T>
    void add(const std::vector<T> &v) { add(v.data(), v.size() * sizeof(T)); }
    void status(attn_status st) {
        add(&st, sizeof st);
        if (st != ATTN_OK) case_note = attn_last_error();
    }
    void end();
};

// Every corpus below calls one family of public functions with ctx and records what it wrote.
void corpus_gemm(attn_context *ctx, record &rec);
void corpus_softmax_convert_merge(attn_context *ctx, record &rec);
void corpus_sdpa_f32(attn_context *ctx, record &rec);
void corpus_sdpa_typed(attn_context *ctx, record &rec);
void corpus_sdpa_backward(attn_context *ctx, record &rec);
void corpus_sdpa_quantized(attn_context *ctx, record &rec);
void corpus_mha(attn_context *ctx, record &rec);

}  // namespace attn_fingerprint
