/*
 * Ring attention over MPI with attn, forward and backward: P ranks each hold a shard of the
 * sequence of Q (length --len) and of K, V (length --len-kv, default --len), for every batch
 * and head; the K/V shards travel around the ring. The forward (attn_sdpa_f32 per piece pair,
 * folded with attn_merge_f32) gives each rank its rows of the output and their global lse;
 * the backward (attn_sdpa_backward_f32 per piece pair, with that lse) keeps dQ on its rank
 * while dK and dV travel with K and V (ring_passes.c).
 *
 * Shards (--shards, ring_shards.c): zigzag (default) cuts the sequence into 2P chunks and
 * gives rank r chunks r and 2P-1-r, which balances the causal work; contiguous gives rank r
 * the r-th of P pieces. Causal masking is global and bottom-right aligned: query i sees key
 * j <= i + (len_kv - len) (top-left when the lengths are equal).
 *
 * Rank 0 gathers Q, K, V, dout, the outputs and the gradients, runs attn_sdpa_f32 and
 * attn_sdpa_backward_f32 on the whole tensors in one process and checks max |ring - single|
 * <= 1e-5 for out, dq, dk and dv. It prints each rank's work (piece pairs computed, visible
 * scores) and, for causal zigzag shards of equal lengths, checks that the busiest rank
 * computes at most 1.3 times the least busy one's scores. Exit status 0 only if all pass.
 * Usage: mpirun -np 4 ring_attention --batch 2 --heads 4 --len 1001 --dim 64 --causal
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

#define TOLERANCE 1e-5f
#define BALANCE_LIMIT 1.3

static void parse(int argc, char **argv, options *o) {
    o->batch = 1, o->heads = 4, o->len = 1001, o->len_kv = -1, o->dim = 64, o->causal = 0;
    o->zigzag = 1, o->seed = 1;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--causal")) { o->causal = 1; continue; }
        if (i + 1 >= argc) die("usage: ring_attention [--batch B] [--heads H] [--len L] "
                               "[--len-kv LK] [--dim D] [--causal] [--seed S] "
                               "[--shards zigzag|contiguous]");
        const char *v = argv[++i];
        if (!strcmp(a, "--shards")) {
            if (strcmp(v, "zigzag") && strcmp(v, "contiguous")) die("--shards zigzag|contiguous");
            o->zigzag = !strcmp(v, "zigzag");
        } else if (!strcmp(a, "--batch")) o->batch = atoll(v);
        else if (!strcmp(a, "--heads")) o->heads = atoll(v);
        else if (!strcmp(a, "--len")) o->len = atoll(v);
        else if (!strcmp(a, "--len-kv")) o->len_kv = atoll(v);
        else if (!strcmp(a, "--dim")) o->dim = atoll(v);
        else if (!strcmp(a, "--seed")) o->seed = (uint64_t)atoll(v);
        else die("unknown option (see the usage in the source)");
    }
    if (o->len_kv < 0) o->len_kv = o->len;
    if (o->batch < 1 || o->heads < 1 || o->dim < 1 || o->len < 1 || o->len_kv < 1)
        die("--batch, --heads, --len, --len-kv and --dim must be >= 1");
}

/* max |a - b| over n floats (a NaN sticks). */
static float max_error(const float *a, const float *b, int64_t n) {
    float err = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float e = fabsf(a[i] - b[i]);
        if (!(e <= err)) err = e;
    }
    return err;
}

/* Rank 0: one process computes everything again; returns 1 if every error is in tolerance.
 * t: q, k, v, dout, out, dq, dk, dv gathered whole. */
static int check_single(attn_context *ctx, const options *o, float *const t[8]) {
    const int64_t NQ = o->batch * o->heads * o->len * o->dim;
    const int64_t NK = o->batch * o->heads * o->len_kv * o->dim;
    float *ref = xmalloc((size_t)(2 * NQ + 2 * NK) * 4);
    float *rout = ref, *rdq = ref + NQ, *rdk = ref + 2 * NQ, *rdv = rdk + NK;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, o->batch, o->heads, o->len, o->len_kv, o->dim);
    d.causal = o->causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    const double t0 = MPI_Wtime();
    check(attn_sdpa_f32(ctx, &d, t[0], t[1], t[2], rout), "attn_sdpa_f32 (single process)");
    const double t1 = MPI_Wtime();
    check(attn_sdpa_backward_f32(ctx, &d, t[0], t[1], t[2], rout, t[3], NULL, rdq, rdk, rdv),
          "attn_sdpa_backward_f32 (single process)");
    const double t2 = MPI_Wtime();
    printf("  single process (1 thread): forward %.3f ms, backward %.3f ms\n", (t1 - t0) * 1e3,
           (t2 - t1) * 1e3);
    const char *names[4] = {"out", "dq", "dk", "dv"};
    const float *refs[4] = {rout, rdq, rdk, rdv};
    const int64_t sizes[4] = {NQ, NQ, NK, NK};
    int ok = 1;
    for (int i = 0; i < 4; ++i) {
        const float err = max_error(t[4 + i], refs[i], sizes[i]);
        ok &= err <= TOLERANCE;
        printf("check %s vs single-process attn_sdpa%s_f32: max abs error %.3g (tolerance "
               "%.0e): %s\n", names[i], i ? "_backward" : "", err, TOLERANCE,
               err <= TOLERANCE ? "PASS" : "FAIL");
    }
    free(ref);
    return ok;
}

/* Rank 0: each rank's figures (m: 4 + PART_KINDS doubles per rank) and the balance check. */
static int report(const options *o, int p, const double *m) {
    const int stride = 4 + PART_KINDS;
    double lo = INFINITY, hi = 0, lo_parts = INFINITY, hi_parts = 0;
    for (int r = 0; r < p; ++r) {
        const double *x = m + stride * r;
        const double parts = x[4 + PART_FULL] + x[4 + PART_TOP_LEFT] + x[4 + PART_BOTTOM_RIGHT] +
                             x[4 + PART_MASK];
        const shard qs = shard_of(o->len, p, r, o->zigzag);
        printf("  rank %d: queries [%lld, %lld)", r, (long long)qs.p[0].off,
               (long long)(qs.p[0].off + qs.p[0].len));
        if (qs.count == 2)
            printf(" [%lld, %lld)", (long long)qs.p[1].off, (long long)(qs.p[1].off + qs.p[1].len));
        printf(": forward %8.3f ms, backward %8.3f ms, %.0f bytes sent; per pass: %.0f "
               "piece pairs computed (%.0f unmasked, %.0f top-left, %.0f bottom-right, %.0f "
               "masked; %.0f skipped), %.0f visible scores per (batch, head)\n",
               x[0] * 1e3, x[1] * 1e3, x[2], parts, x[4 + PART_FULL], x[4 + PART_TOP_LEFT],
               x[4 + PART_BOTTOM_RIGHT], x[4 + PART_MASK], x[4 + PART_SKIP], x[3]);
        lo = x[3] < lo ? x[3] : lo, hi = x[3] > hi ? x[3] : hi;
        lo_parts = parts < lo_parts ? parts : lo_parts;
        hi_parts = parts > hi_parts ? parts : hi_parts;
    }
    const double ratio = lo > 0 ? hi / lo : INFINITY, ratio_parts = hi_parts / lo_parts;
    printf("work balance (busiest / least busy rank): visible scores %.3f, piece pairs %.3f\n",
           ratio, ratio_parts);
    if (!o->causal || !o->zigzag || o->len != o->len_kv) return 1;
    const int ok = ratio <= BALANCE_LIMIT && ratio_parts <= BALANCE_LIMIT;
    printf("check causal zigzag balance <= %.1f: %s\n", BALANCE_LIMIT, ok ? "PASS" : "FAIL");
    return ok;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    options o;
    parse(argc, argv, &o);
    const int64_t cuts = o.zigzag ? 2 * p : p;
    if (o.len < cuts || o.len_kv < cuts)
        die("--len and --len-kv must be >= the number of ranks (twice that with zigzag)");
    const int64_t BHD = o.batch * o.heads * o.dim;
    const shard qs = shard_of(o.len, p, rank, o.zigzag), ks = shard_of(o.len_kv, p, rank, o.zigzag);

    attn_config cfg;
    attn_config_init(&cfg);
    cfg.num_threads = 1; /* one thread per rank: the ranks are the parallelism */
    attn_context *ctx = NULL;
    check(attn_context_create(&cfg, &ctx), "attn_context_create");

    /* Mine: q, dout, out, dq [B, H, qs.len, D]; [K | V] and [dK | dV] of my K/V shard. */
    float *q = xmalloc((size_t)(4 * BHD * qs.len) * 4), *dout = q + BHD * qs.len;
    float *out = dout + BHD * qs.len, *dq = out + BHD * qs.len;
    float *kv = xmalloc((size_t)(4 * BHD * ks.len) * 4), *dkv = kv + 2 * BHD * ks.len;
    float *lse[2] = {NULL, NULL};
    for (int i = 0; i < qs.count; ++i)
        lse[i] = xmalloc((size_t)(o.batch * o.heads * qs.p[i].len) * 4);
    fill(q, &o, 0, &qs), fill(dout, &o, 3, &qs);
    fill(kv, &o, 1, &ks), fill(kv + BHD * ks.len, &o, 2, &ks);

    work wf, wb;
    memset(&wf, 0, sizeof wf), memset(&wb, 0, sizeof wb);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    ring_forward(ctx, &o, rank, p, q, kv, out, lse, &wf);
    const double t1 = MPI_Wtime();
    ring_backward(ctx, &o, rank, p, q, kv, out, dout, lse, dq, dkv, &wb);
    const double t2 = MPI_Wtime();

    /* Per rank figures (in rank order, through rank 0): the pieces are the forward's. */
    double mine[4 + PART_KINDS] = {t1 - t0, t2 - t1, wf.bytes_sent + wb.bytes_sent, wf.scores};
    for (int i = 0; i < PART_KINDS; ++i) mine[4 + i] = wf.kinds[i];
    double *all = rank == 0 ? xmalloc(sizeof mine * (size_t)p) : NULL;
    MPI_Gather(mine, 4 + PART_KINDS, MPI_DOUBLE, all, 4 + PART_KINDS, MPI_DOUBLE, 0,
               MPI_COMM_WORLD);

    const int64_t NQ = BHD * o.len, NK = BHD * o.len_kv;
    float *t[8] = {NULL}; /* q, k, v, dout, out, dq, dk, dv, whole, on rank 0 */
    for (int i = 0; rank == 0 && i < 8; ++i)
        t[i] = xmalloc((size_t)((i == 1 || i == 2 || i == 6 || i == 7) ? NK : NQ) * 4);
    const float *local[8] = {q, kv, kv + BHD * ks.len, dout, out, dq, dkv, dkv + BHD * ks.len};
    for (int i = 0; i < 8; ++i)
        gather(&o, rank, p, (i == 1 || i == 2 || i == 6 || i == 7) ? o.len_kv : o.len, local[i],
               t[i]);
    int ok = 1;
    if (rank == 0) {
        printf("ring attention: %d ranks, %s shards, batch %lld heads %lld len %lld len_kv %lld "
               "dim %lld, %s, seed %llu\n", p, o.zigzag ? "zigzag" : "contiguous",
               (long long)o.batch, (long long)o.heads, (long long)o.len, (long long)o.len_kv,
               (long long)o.dim, o.causal ? "causal (bottom-right aligned)" : "not causal",
               (unsigned long long)o.seed);
        ok = report(&o, p, all);
        ok &= check_single(ctx, &o, t);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int i = 0; i < 8; ++i) free(t[i]);
    free(all), free(q), free(kv), free(lse[0]), free(lse[1]);
    attn_context_destroy(ctx);
    MPI_Finalize();
    return ok ? 0 : 1;
}
