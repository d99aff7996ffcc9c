// Concurrency stress: several std::threads share one SIMD context, one reference context and
// the default (NULL) context, and call every op with mixed shapes at the same time. Each
// result must equal, bit for bit, the result of the same call made alone on one thread
// beforehand (the API promises bitwise identical results for a given context). Built with
// -fsanitize=thread by tools/run_tsan.sh; also run (--quick) by ctest in every build.
//
// Usage: attn_stress [--quick] [--threads N] [--rounds N]
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attn/attn.h"

namespace {

using floats = std::vector<float>;

floats random_floats(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    floats v(n);
    for (auto &x : v) x = dist(gen);
    return v;
}

// One call: writes every output it has into `out` (outputs concatenated), returns the status.
struct job {
    std::string name;
    size_t out_size;
    std::function<attn_status(attn_context *, float *out)> run;
};

// C = alpha op(A) op(B) + beta C, with C starting from fixed values.
job gemm_job(attn_trans ta, attn_trans tb, int64_t m, int64_t n, int64_t k, uint32_t seed) {
    auto a = std::make_shared<floats>(random_floats(size_t(m * k), seed));
    auto b = std::make_shared<floats>(random_floats(size_t(k * n), seed + 1));
    auto c0 = std::make_shared<floats>(random_floats(size_t(m * n), seed + 2));
    int64_t lda = ta == ATTN_TRANS ? m : k, ldb = tb == ATTN_TRANS ? k : n;
    return {"gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k), c0->size(),
            [=](attn_context *ctx, float *out) {
                std::memcpy(out, c0->data(), c0->size() * sizeof(float));
                return attn_gemm_f32(ctx, ta, tb, m, n, k, 0.75f, a->data(), lda, b->data(), ldb, 0.5f, out, n);
            }};
}

job softmax_job(int64_t rows, int64_t cols, float scale, uint32_t seed) {
    auto x = std::make_shared<floats>(random_floats(size_t(rows * cols), seed));
    return {"softmax " + std::to_string(rows) + "x" + std::to_string(cols), x->size(),
            [=](attn_context *ctx, float *out) {
                return attn_softmax_f32(ctx, rows, cols, scale, x->data(), cols, out, cols);
            }};
}

// An sdpa shape and its options; outputs: out, then weights and lse when requested.
struct sdpa_shape {
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim;
    attn_causal causal = ATTN_CAUSAL_NONE;
    float dropout = 0.0f;
    bool mask = false, kv_len = false, weights = false, lse = false, backward = false;
};

job sdpa_job(const sdpa_shape &s, uint32_t seed) {
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, s.batch, s.heads_q, s.len_q, s.len_kv, s.dim);
    d.heads_kv = s.heads_kv;
    d.k = d.v = attn_layout{s.heads_kv * s.len_kv * s.dim, s.len_kv * s.dim, s.dim};
    d.causal = s.causal;
    d.dropout_p = s.dropout;
    d.dropout_seed = seed;
    size_t nq = size_t(s.batch * s.heads_q * s.len_q * s.dim), nkv = size_t(s.batch * s.heads_kv * s.len_kv * s.dim);
    size_t nw = size_t(s.batch * s.heads_q * s.len_q * s.len_kv), nl = size_t(s.batch * s.heads_q * s.len_q);
    auto q = std::make_shared<floats>(random_floats(nq, seed));
    auto k = std::make_shared<floats>(random_floats(nkv, seed + 1));
    auto v = std::make_shared<floats>(random_floats(nkv, seed + 2));
    auto dout = std::make_shared<floats>(random_floats(nq, seed + 3));
    // A mask broadcast over batch and heads: [len_q, len_kv] with strides {0, 0, len_kv}.
    auto mask = std::make_shared<floats>(random_floats(size_t(s.len_q * s.len_kv), seed + 4));
    auto kv_len = std::make_shared<std::vector<int32_t>>();
    for (int64_t b = 0; b < s.batch; ++b) kv_len->push_back(int32_t((b * 7 + 3) % (s.len_kv + 1)));
    if (s.mask) d.mask = mask->data(), d.mask_strides = attn_layout{0, 0, s.len_kv};
    if (s.kv_len) d.kv_len = kv_len->data();

    std::string name = std::string(s.backward ? "sdpa_backward " : "sdpa ") + std::to_string(s.batch) + "x" +
                       std::to_string(s.heads_q) + "/" + std::to_string(s.heads_kv) + "x" + std::to_string(s.len_q) +
                       "x" + std::to_string(s.len_kv) + "x" + std::to_string(s.dim);
    if (!s.backward) {
        size_t size = nq + (s.weights ? nw : 0) + (s.lse ? nl : 0);
        return {name, size, [=](attn_context *ctx, float *out) {
                    (void)mask, (void)kv_len;  // d points into them: keep them alive with the job
                    attn_sdpa_desc dd = d;
                    dd.weights = s.weights ? out + nq : nullptr;
                    dd.lse = s.lse ? out + nq + (s.weights ? nw : 0) : nullptr;
                    return attn_sdpa_f32(ctx, &dd, q->data(), k->data(), v->data(), out);
                }};
    }
    // Backward from a forward computed once, here, on the reference path.
    auto fwd_out = std::make_shared<floats>(nq);
    auto lse = std::make_shared<floats>(nl);
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = ATTN_IMPL_REFERENCE;
    attn_context *ref = nullptr;
    attn_sdpa_desc fd = d;
    fd.lse = lse->data();
    if (attn_context_create(&cfg, &ref) != ATTN_OK ||
        attn_sdpa_f32(ref, &fd, q->data(), k->data(), v->data(), fwd_out->data()) != ATTN_OK) {
        std::fprintf(stderr, "setup failed for %s: %s\n", name.c_str(), attn_last_error());
        std::exit(2);
    }
    attn_context_destroy(ref);
    return {name, nq + 2 * nkv, [=](attn_context *ctx, float *out) {
                (void)mask, (void)kv_len;
                return attn_sdpa_backward_f32(ctx, &d, q->data(), k->data(), v->data(), fwd_out->data(),
                                              dout->data(), s.lse ? lse->data() : nullptr, out, out + nq,
                                              out + nq + nkv);
            }};
}

job mha_job(int64_t batch, int64_t len_q, int64_t len_kv, int64_t d_model, int64_t heads, int64_t heads_kv,
            bool backward, uint32_t seed) {
    attn_mha_desc d;
    attn_mha_desc_init(&d, batch, len_q, len_kv, d_model, heads);
    d.heads_kv = heads_kv;
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    int64_t qw = heads * d.head_dim, kvw = heads_kv * d.head_dim;
    auto w = std::make_shared<std::vector<floats>>();
    // w_q [qw, d_model], w_k and w_v [kvw, d_model], w_o [d_model, qw]
    for (int64_t size : {qw * d_model, kvw * d_model, kvw * d_model, d_model * qw})
        w->push_back(random_floats(size_t(size), seed++));
    auto bias = std::make_shared<floats>(random_floats(size_t(qw), seed++));
    auto x_q = std::make_shared<floats>(random_floats(size_t(batch * len_q * d_model), seed++));
    auto x_kv = std::make_shared<floats>(random_floats(size_t(batch * len_kv * d_model), seed++));
    auto dy = std::make_shared<floats>(random_floats(x_q->size(), seed++));
    d.w_q = (*w)[0].data(), d.w_k = (*w)[1].data(), d.w_v = (*w)[2].data(), d.w_o = (*w)[3].data();
    d.b_q = bias->data();
    std::string name = std::string(backward ? "mha_backward " : "mha ") + std::to_string(batch) + "x" +
                       std::to_string(len_q) + "x" + std::to_string(len_kv) + "x" + std::to_string(d_model);
    if (!backward)
        return {name, x_q->size(), [=](attn_context *ctx, float *out) {
                    (void)w, (void)bias;  // keep the weights alive as long as the job
                    return attn_mha_forward_f32(ctx, &d, x_q->data(), x_kv->data(), out);
                }};
    size_t nq = x_q->size(), nkv = x_kv->size(), nwq = (*w)[0].size(), nwk = (*w)[1].size();
    return {name, nq + nkv + nwq + 2 * nwk + (*w)[3].size() + size_t(qw), [=](attn_context *ctx, float *out) {
                float *p = out + nq + nkv;
                attn_mha_grads g{p, p + nwq, p + nwq + nwk, p + nwq + 2 * nwk, nullptr, nullptr, nullptr, nullptr};
                g.db_q = g.dw_o + (*w)[3].size();
                (void)bias;
                return attn_mha_backward_f32(ctx, &d, x_q->data(), x_kv->data(), dy->data(), out, out + nq, &g);
            }};
}

job merge_job(int64_t parts, int64_t rows, int64_t dim_v, uint32_t seed) {
    auto outs = std::make_shared<std::vector<floats>>(), lses = std::make_shared<std::vector<floats>>();
    for (int64_t p = 0; p < parts; ++p) {
        outs->push_back(random_floats(size_t(rows * dim_v), seed++));
        lses->push_back(random_floats(size_t(rows), seed++));
        for (auto &l : lses->back()) l *= 4.0f;
    }
    return {"merge " + std::to_string(parts) + "x" + std::to_string(rows), size_t(rows * (dim_v + 1)),
            [=](attn_context *ctx, float *out) {
                std::vector<const float *> o, l;
                for (int64_t p = 0; p < parts; ++p) o.push_back((*outs)[p].data()), l.push_back((*lses)[p].data());
                return attn_merge_f32(ctx, parts, rows, dim_v, o.data(), l.data(), out, out + rows * dim_v);
            }};
}

std::vector<job> make_jobs(bool quick) {
    int64_t big = quick ? 1 : 2;  // --quick keeps each call short
    std::vector<job> jobs;
    jobs.push_back(gemm_job(ATTN_NO_TRANS, ATTN_NO_TRANS, 37, 29, 41, 1));
    jobs.push_back(gemm_job(ATTN_TRANS, ATTN_TRANS, 64 * big, 48, 96, 2));
    jobs.push_back(gemm_job(ATTN_NO_TRANS, ATTN_TRANS, 130, 17 * big, 64, 3));
    jobs.push_back(softmax_job(33, 257, 0.7f, 4));
    jobs.push_back(softmax_job(128 * big, 40, 1.0f, 5));
    sdpa_shape plain{2, 4, 4, 33, 47, 16};
    sdpa_shape gqa{1, 8, 2, 64 * big, 80, 32};
    gqa.causal = ATTN_CAUSAL_BOTTOM_RIGHT, gqa.weights = gqa.lse = true;
    sdpa_shape decode{2, 4, 1, 1, 700 * big, 64};  // one new token against a long cache
    decode.kv_len = true;
    sdpa_shape masked{2, 2, 2, 24, 31, 8};
    masked.mask = true, masked.dropout = 0.2f, masked.causal = ATTN_CAUSAL_TOP_LEFT, masked.lse = true;
    for (auto s : {plain, gqa, decode, masked}) {
        jobs.push_back(sdpa_job(s, 10 + uint32_t(jobs.size())));
        s.backward = true;
        jobs.push_back(sdpa_job(s, 20 + uint32_t(jobs.size())));
    }
    jobs.push_back(mha_job(2, 9, 13, 32, 4, 2, false, 40));
    jobs.push_back(mha_job(2, 9, 13, 32, 4, 2, true, 50));
    jobs.push_back(merge_job(3, 40, 64, 60));
    return jobs;
}

}  // namespace

int main(int argc, char **argv) {
    bool quick = false;
    int threads = 4, rounds = 20;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--quick") quick = true, rounds = 2;
        else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: attn_stress [--quick] [--threads N] [--rounds N]\n");
            return 2;
        }
    }
    std::vector<job> jobs = make_jobs(quick);

    // The shared contexts: SIMD with every hardware thread, the reference, and NULL.
    attn_config cfg;
    attn_config_init(&cfg);
    cfg.impl = ATTN_IMPL_SIMD;
    attn_context *simd = nullptr, *reference = nullptr;
    if (attn_context_create(&cfg, &simd) != ATTN_OK) return std::fprintf(stderr, "%s\n", attn_last_error()), 2;
    cfg.impl = ATTN_IMPL_REFERENCE;
    cfg.num_threads = 2;
    if (attn_context_create(&cfg, &reference) != ATTN_OK) return std::fprintf(stderr, "%s\n", attn_last_error()), 2;
    attn_context *const shared[] = {simd, reference, nullptr};
    const char *shared_name[] = {"simd", "reference", "default"};

    // Expected results: each call alone, on this thread.
    std::vector<floats> expected;
    for (attn_context *ctx : shared)
        for (const job &j : jobs) {
            expected.emplace_back(j.out_size, 0.0f);
            if (j.run(ctx, expected.back().data()) != ATTN_OK) {
                std::fprintf(stderr, "serial %s failed: %s\n", j.name.c_str(), attn_last_error());
                return 1;
            }
        }

    std::atomic<int> mismatches{0}, failures{0}, calls{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            std::mt19937 order(uint32_t(t) * 7919u + 1u);
            size_t total = jobs.size() * 3;
            for (int r = 0; r < rounds; ++r)
                for (size_t n = 0; n < total; ++n) {
                    size_t which = (n * 7 + order()) % total;  // every thread its own order
                    size_t c = which / jobs.size(), j = which % jobs.size();
                    floats out(jobs[j].out_size, 0.0f);
                    if (jobs[j].run(shared[c], out.data()) != ATTN_OK) {
                        std::fprintf(stderr, "thread %d: %s on %s failed: %s\n", t, jobs[j].name.c_str(),
                                     shared_name[c], attn_last_error());
                        ++failures;
                    } else if (std::memcmp(out.data(), expected[which].data(), out.size() * sizeof(float)) != 0) {
                        std::fprintf(stderr, "thread %d: %s on %s differs from the serial run\n", t,
                                     jobs[j].name.c_str(), shared_name[c]);
                        ++mismatches;
                    }
                    ++calls;
                }
        });
    for (auto &th : pool) th.join();
    attn_context_destroy(simd);
    attn_context_destroy(reference);
    std::printf("attn_stress: %d threads, %d calls over %zu jobs x 3 contexts: %d mismatches, %d failures\n",
                threads, calls.load(), jobs.size(), mismatches.load(), failures.load());
    return mismatches == 0 && failures == 0 ? 0 : 1;
}
