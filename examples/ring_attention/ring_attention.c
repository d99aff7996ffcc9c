/*
 * Ring attention over MPI with attn: P ranks each hold a contiguous shard of the sequence of
 * Q (length --len) and of K, V (length --len-kv, default --len), for every batch and head.
 * The K/V shards travel around the ring (rank r sends to r+1, receives from r-1), double
 * buffered: the next shard is in flight (MPI_Isend/MPI_Irecv) while the current one is used.
 * For each visiting shard a rank computes a partial output with attn_sdpa_f32 (with its lse)
 * and folds it into its running result with attn_merge_f32.
 *
 * Causal masking is global: query i sees key j <= i + (len_kv - len) (top-left when the
 * lengths are equal). For a query shard at offset qo and a key shard at offset ko, local
 * query i sees local key j iff j <= i + delta, delta = qo - ko + len_kv - len, so a shard
 * is skipped (no compute) when no query sees any key, computed without a mask when every
 * key is visible, with ATTN_CAUSAL_TOP_LEFT when delta == 0 (the diagonal shard of equal
 * offsets), ATTN_CAUSAL_BOTTOM_RIGHT when the shards end together (delta == lk - lq), and
 * with an additive -inf mask otherwise (uneven shards of different lengths).
 *
 * Rank 0 gathers Q, K, V and the outputs, runs one single-process attn_sdpa_f32 on the whole
 * tensors and checks max |ring - single| <= 1e-5. Exit status 0 only if the check passes.
 * Usage: mpirun -np 4 ring_attention --batch 2 --heads 4 --len 1001 --dim 64 --causal
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attn/attn.h>

#define TOLERANCE 1e-5f

typedef struct {
    int64_t batch, heads, len, len_kv, dim;
    int causal;
    uint64_t seed;
} options;

static void die(const char *what) {
    fprintf(stderr, "ring_attention: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void check(attn_status s, const char *call) {
    if (s != ATTN_OK) {
        fprintf(stderr, "ring_attention: %s: %s: %s\n", call, attn_status_string(s),
                attn_last_error());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

/* A value in [-1, 1) that depends only on (seed, tensor, b, h, global position, d). */
static float value(uint64_t seed, int tensor, int64_t b, int64_t h, int64_t pos, int64_t d) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)tensor;
    const int64_t parts[4] = {b, h, pos, d};
    for (int i = 0; i < 4; ++i) {
        z ^= (uint64_t)parts[i] + 0x9E3779B97F4A7C15ull + (z << 6) + (z >> 2);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
    }
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Shard r of a length n split over p ranks: the first n % p shards are one longer. */
static int64_t shard_len(int64_t n, int p, int r) { return n / p + (r < n % p); }
static int64_t shard_off(int64_t n, int p, int r) {
    return (int64_t)r * (n / p) + (r < n % p ? r : n % p);
}

/* x [B, H, len, D] dense: positions [off, off + len) of tensor `tensor`. */
static void fill(float *x, const options *o, int tensor, int64_t off, int64_t len) {
    for (int64_t b = 0; b < o->batch; ++b)
        for (int64_t h = 0; h < o->heads; ++h)
            for (int64_t i = 0; i < len; ++i)
                for (int64_t d = 0; d < o->dim; ++d)
                    *x++ = value(o->seed, tensor, b, h, off + i, d);
}

enum part { PART_SKIP, PART_FULL, PART_TOP_LEFT, PART_BOTTOM_RIGHT, PART_MASK };

/* How query shard [qo, qo + lq) attends to key shard [ko, ko + lk) (see the top comment). */
static enum part classify(const options *o, int64_t qo, int64_t lq, int64_t ko, int64_t lk,
                          int64_t *delta) {
    if (!o->causal) return PART_FULL;
    *delta = qo - ko + (o->len_kv - o->len);
    if (*delta + lq - 1 < 0) return PART_SKIP; /* even the last query sees no key */
    if (*delta >= lk - 1) return PART_FULL;    /* even the first query sees every key */
    if (*delta == 0) return PART_TOP_LEFT;
    if (*delta == lk - lq) return PART_BOTTOM_RIGHT;
    return PART_MASK;
}

static void parse(int argc, char **argv, options *o) {
    o->batch = 1, o->heads = 4, o->len = 1001, o->len_kv = -1, o->dim = 64, o->causal = 0;
    o->seed = 1;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--causal")) { o->causal = 1; continue; }
        if (i + 1 >= argc) die("usage: ring_attention [--batch B] [--heads H] [--len L] "
                               "[--len-kv LK] [--dim D] [--causal] [--seed S]");
        long long v = atoll(argv[++i]);
        if (!strcmp(a, "--batch")) o->batch = v;
        else if (!strcmp(a, "--heads")) o->heads = v;
        else if (!strcmp(a, "--len")) o->len = v;
        else if (!strcmp(a, "--len-kv")) o->len_kv = v;
        else if (!strcmp(a, "--dim")) o->dim = v;
        else if (!strcmp(a, "--seed")) o->seed = (uint64_t)v;
        else die("unknown option (see the usage in the source)");
    }
    if (o->len_kv < 0) o->len_kv = o->len;
    if (o->batch < 1 || o->heads < 1 || o->dim < 1 || o->len < 1 || o->len_kv < 1)
        die("--batch, --heads, --len, --len-kv and --dim must be >= 1");
}

/* Rank 0: the shards of every rank ([B, H, len_r, D] each, in rank order) into one dense
 * [B, H, n, D] tensor. */
static void assemble(const options *o, int p, int64_t n, const float *shards, float *full) {
    const int64_t D = o->dim;
    for (int r = 0; r < p; ++r) {
        const int64_t len = shard_len(n, p, r), off = shard_off(n, p, r);
        for (int64_t bh = 0; bh < o->batch * o->heads; ++bh)
            memcpy(full + (bh * n + off) * D, shards + bh * len * D, (size_t)(len * D) * 4);
        shards += o->batch * o->heads * len * D;
    }
}

/* Gathers each rank's [B, H, len_r, D] shard of a length-n tensor on rank 0 (full: dense). */
static void gather(const options *o, int rank, int p, int64_t n, const float *mine, float *full) {
    int *counts = xmalloc(sizeof(int) * (size_t)p), *displs = xmalloc(sizeof(int) * (size_t)p);
    int64_t total = 0;
    for (int r = 0; r < p; ++r) {
        const int64_t c = o->batch * o->heads * shard_len(n, p, r) * o->dim;
        if (total + c > 2147483647) die("tensors too large for MPI_Gatherv's int counts");
        counts[r] = (int)c, displs[r] = (int)total, total += c;
    }
    float *tmp = rank == 0 ? xmalloc((size_t)total * 4) : NULL;
    MPI_Gatherv(mine, counts[rank], MPI_FLOAT, tmp, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (rank == 0) assemble(o, p, n, tmp, full);
    free(tmp), free(counts), free(displs);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    options o;
    parse(argc, argv, &o);
    if (o.len < p || o.len_kv < p) die("--len and --len-kv must be >= the number of ranks");
    const int64_t B = o.batch, H = o.heads, D = o.dim, BH = B * H;
    const int64_t lq = shard_len(o.len, p, rank), qo = shard_off(o.len, p, rank);
    const int64_t max_lk = shard_len(o.len_kv, p, 0);

    attn_config cfg;
    attn_config_init(&cfg);
    cfg.num_threads = 1; /* one thread per rank: the ranks are the parallelism */
    attn_context *ctx = NULL;
    check(attn_context_create(&cfg, &ctx), "attn_context_create");

    /* My shards; the K/V shard buffers hold [K | V] of the largest shard, two of them. */
    float *q = xmalloc((size_t)(BH * lq * D) * 4);
    float *buf[2] = {xmalloc((size_t)(2 * BH * max_lk * D) * 4),
                     xmalloc((size_t)(2 * BH * max_lk * D) * 4)};
    const int64_t my_lk = shard_len(o.len_kv, p, rank), my_ko = shard_off(o.len_kv, p, rank);
    fill(q, &o, 0, qo, lq);
    fill(buf[0], &o, 1, my_ko, my_lk);
    fill(buf[0] + BH * my_lk * D, &o, 2, my_ko, my_lk);
    float *kmine = xmalloc((size_t)(2 * BH * my_lk * D) * 4); /* kept for the gather */
    memcpy(kmine, buf[0], (size_t)(2 * BH * my_lk * D) * 4);

    const int64_t rows = BH * lq;
    float *acc = xmalloc((size_t)(rows * D) * 4), *acc_lse = xmalloc((size_t)rows * 4);
    float *part = xmalloc((size_t)(rows * D) * 4), *part_lse = xmalloc((size_t)rows * 4);
    float *tmp = xmalloc((size_t)(rows * D) * 4), *tmp_lse = xmalloc((size_t)rows * 4);
    float *mask = xmalloc((size_t)(lq * max_lk) * 4);
    int have = 0, kinds[5] = {0, 0, 0, 0, 0}; /* shards of each enum part */
    double bytes_sent = 0.0;
    const int right = (rank + 1) % p, left = (rank + p - 1) % p;

    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int step = 0; step < p; ++step) {
        const int owner = (rank - step + p) % p; /* whose K/V shard is in buf[step % 2] */
        float *cur = buf[step % 2], *next = buf[(step + 1) % 2];
        const int64_t lk = shard_len(o.len_kv, p, owner), ko = shard_off(o.len_kv, p, owner);
        MPI_Request req[2];
        if (step + 1 < p) { /* the next shard travels while this one is used */
            const int64_t lk_next = shard_len(o.len_kv, p, (owner - 1 + p) % p);
            MPI_Irecv(next, (int)(2 * BH * lk_next * D), MPI_FLOAT, left, step, MPI_COMM_WORLD,
                      &req[0]);
            MPI_Isend(cur, (int)(2 * BH * lk * D), MPI_FLOAT, right, step, MPI_COMM_WORLD,
                      &req[1]);
            bytes_sent += 2.0 * (double)(BH * lk * D) * 4.0;
        }
        int64_t delta = 0;
        const enum part kind = classify(&o, qo, lq, ko, lk, &delta);
        ++kinds[kind];
        if (kind != PART_SKIP) {
            attn_sdpa_desc d;
            attn_sdpa_desc_init(&d, B, H, lq, lk, D);
            d.causal = kind == PART_TOP_LEFT       ? ATTN_CAUSAL_TOP_LEFT
                       : kind == PART_BOTTOM_RIGHT ? ATTN_CAUSAL_BOTTOM_RIGHT
                                                   : ATTN_CAUSAL_NONE;
            if (kind == PART_MASK) { /* j > i + delta hidden; the same for every (b, h) */
                for (int64_t i = 0; i < lq; ++i)
                    for (int64_t j = 0; j < lk; ++j)
                        mask[i * lk + j] = j > i + delta ? -INFINITY : 0.0f;
                d.mask = mask;
                d.mask_strides.batch = 0, d.mask_strides.head = 0, d.mask_strides.seq = lk;
            }
            float *out = have ? part : acc, *lse = have ? part_lse : acc_lse;
            d.lse = lse;
            check(attn_sdpa_f32(ctx, &d, q, cur, cur + BH * lk * D, out), "attn_sdpa_f32");
            if (have) { /* fold: acc = merge(acc, part) */
                const float *outs[2] = {acc, part}, *lses[2] = {acc_lse, part_lse};
                check(attn_merge_f32(ctx, 2, rows, D, outs, lses, tmp, tmp_lse),
                      "attn_merge_f32");
                float *t = acc; acc = tmp; tmp = t;
                t = acc_lse; acc_lse = tmp_lse; tmp_lse = t;
            }
            have = 1;
        }
        if (step + 1 < p) MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    }
    if (!have) memset(acc, 0, (size_t)(rows * D) * 4); /* no key visible to any query here */
    const double elapsed = MPI_Wtime() - t0;

    /* Report per rank (in rank order, through rank 0). */
    double mine[7] = {elapsed, bytes_sent};
    for (int i = 0; i < 5; ++i) mine[2 + i] = kinds[i];
    double *all = rank == 0 ? xmalloc(sizeof mine * (size_t)p) : NULL;
    MPI_Gather(mine, 7, MPI_DOUBLE, all, 7, MPI_DOUBLE, 0, MPI_COMM_WORLD);

    /* Rank 0: gather everything, one single-process attn_sdpa_f32, compare. */
    const int64_t NQ = BH * o.len * D, NK = BH * o.len_kv * D;
    float *fq = NULL, *fk = NULL, *fv = NULL, *fo = NULL, *ref = NULL;
    if (rank == 0) {
        fq = xmalloc((size_t)NQ * 4), fo = xmalloc((size_t)NQ * 4), ref = xmalloc((size_t)NQ * 4);
        fk = xmalloc((size_t)NK * 4), fv = xmalloc((size_t)NK * 4);
    }
    gather(&o, rank, p, o.len, q, fq);
    gather(&o, rank, p, o.len_kv, kmine, fk);
    gather(&o, rank, p, o.len_kv, kmine + BH * my_lk * D, fv);
    gather(&o, rank, p, o.len, acc, fo);
    int ok = 1;
    if (rank == 0) {
        printf("ring attention: %d ranks, batch %lld heads %lld len %lld len_kv %lld dim %lld, "
               "%s, seed %llu\n", p, (long long)B, (long long)H, (long long)o.len,
               (long long)o.len_kv, (long long)D,
               o.causal ? "causal (bottom-right aligned)" : "not causal",
               (unsigned long long)o.seed);
        double total_bytes = 0;
        for (int r = 0; r < p; ++r) {
            const double *m = all + 7 * r;
            printf("  rank %d: queries [%lld, %lld) keys [%lld, %lld): %8.3f ms, %.0f bytes sent;"
                   " shards: %d unmasked, %d top-left, %d bottom-right, %d masked, %d skipped\n", r,
                   (long long)shard_off(o.len, p, r),
                   (long long)(shard_off(o.len, p, r) + shard_len(o.len, p, r)),
                   (long long)shard_off(o.len_kv, p, r),
                   (long long)(shard_off(o.len_kv, p, r) + shard_len(o.len_kv, p, r)),
                   m[0] * 1e3, m[1], (int)m[2 + PART_FULL], (int)m[2 + PART_TOP_LEFT],
                   (int)m[2 + PART_BOTTOM_RIGHT], (int)m[2 + PART_MASK], (int)m[2 + PART_SKIP]);
            total_bytes += m[1];
        }
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, B, H, o.len, o.len_kv, D);
        d.causal = o.causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
        const double t1 = MPI_Wtime();
        check(attn_sdpa_f32(ctx, &d, fq, fk, fv, ref), "attn_sdpa_f32 (single process)");
        const double single = MPI_Wtime() - t1;
        float err = 0.0f;
        for (int64_t i = 0; i < NQ; ++i) {
            const float e = fabsf(fo[i] - ref[i]);
            if (!(e <= err)) err = e; /* a NaN sticks */
        }
        ok = err <= TOLERANCE;
        printf("  total %.0f bytes communicated; single process (1 thread): %.3f ms\n",
               total_bytes, single * 1e3);
        printf("check vs single-process attn_sdpa_f32: max abs error %.3g (tolerance %.0e): %s\n",
               err, TOLERANCE, ok ? "PASS" : "FAIL");
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(fq), free(fk), free(fv), free(fo), free(ref), free(all);
    free(q), free(buf[0]), free(buf[1]), free(kmine), free(acc), free(acc_lse), free(part);
    free(part_lse), free(tmp), free(tmp_lse), free(mask);
    attn_context_destroy(ctx);
    MPI_Finalize();
    return ok ? 0 : 1;
}
