/*
 * Sharding of the sequence over the ranks, the causal classification of a piece pair, the
 * test data and the gather to rank 0 (see ring.h).
 *
 * Zigzag: the sequence is cut into 2P chunks and rank r holds chunks r and 2P-1-r, so under a
 * causal mask every rank holds one early and one late chunk and sees about the same number of
 * keys (as Llama 3's context parallelism and ring-flash-attention do); contiguous shards give
 * rank r about r + 1/2 shards' worth of visible scores.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

void die(const char *what) {
    fprintf(stderr, "ring_attention: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

void check(attn_status s, const char *call) {
    if (s != ATTN_OK) {
        fprintf(stderr, "ring_attention: %s: %s: %s\n", call, attn_status_string(s),
                attn_last_error());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

void *xmalloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    if (!p) die("out of memory");
    return p;
}

/* Part c of a length n cut into k parts: the first n % k parts are one longer. */
static int64_t cut_len(int64_t n, int k, int c) { return n / k + (c < n % k); }
static int64_t cut_off(int64_t n, int k, int c) {
    return (int64_t)c * (n / k) + (c < n % k ? c : n % k);
}

shard shard_of(int64_t n, int p, int r, int zigzag) {
    shard s;
    memset(&s, 0, sizeof s);
    const int chunks[2] = {r, 2 * p - 1 - r};
    s.count = zigzag ? 2 : 1;
    for (int i = 0; i < s.count; ++i) {
        piece *x = &s.p[i];
        x->off = zigzag ? cut_off(n, 2 * p, chunks[i]) : cut_off(n, p, r);
        x->len = zigzag ? cut_len(n, 2 * p, chunks[i]) : cut_len(n, p, r);
        x->row = s.len;
        s.len += x->len;
    }
    return s;
}

/* Scores (i, j), i < lq, j < lk, with j <= i + delta. */
static double visible_scores(int64_t lq, int64_t lk, int64_t delta) {
    double n = 0;
    for (int64_t i = 0; i < lq; ++i) {
        const int64_t seen = i + delta + 1;
        n += (double)(seen < 0 ? 0 : seen > lk ? lk : seen);
    }
    return n;
}

/* Causal masking is global: query i sees key j <= i + (len_kv - len). For a query piece at
 * offset qo and a key piece at ko, local query i sees local key j iff j <= i + delta,
 * delta = qo - ko + len_kv - len: the pair is skipped when no query sees any key, computed
 * without a mask when every key is visible, with ATTN_CAUSAL_TOP_LEFT when delta == 0,
 * ATTN_CAUSAL_BOTTOM_RIGHT when the pieces end together (delta == lk - lq), and with an
 * additive -inf mask otherwise (pieces of different lengths). */
enum part part_desc(const options *o, const piece *qp, int64_t lq, const piece *kp, int64_t lk,
                    float *mask, attn_sdpa_desc *d, work *w) {
    const int64_t la = qp->len, lb = kp->len, delta = qp->off - kp->off + o->len_kv - o->len;
    enum part kind = PART_FULL;
    if (o->causal) {
        if (delta + la - 1 < 0) kind = PART_SKIP; /* even the last query sees no key */
        else if (delta >= lb - 1) kind = PART_FULL; /* even the first sees every key */
        else if (delta == 0) kind = PART_TOP_LEFT;
        else if (delta == lb - la) kind = PART_BOTTOM_RIGHT;
        else kind = PART_MASK;
    }
    ++w->kinds[kind];
    if (kind == PART_SKIP) return kind;
    w->scores += kind == PART_FULL ? (double)la * (double)lb : visible_scores(la, lb, delta);
    const int64_t H = o->heads, D = o->dim;
    attn_sdpa_desc_init(d, o->batch, H, la, lb, D);
    d->q.batch = H * lq * D, d->q.head = lq * D;
    d->k.batch = d->v.batch = H * lk * D, d->k.head = d->v.head = lk * D;
    d->causal = kind == PART_TOP_LEFT       ? ATTN_CAUSAL_TOP_LEFT
                : kind == PART_BOTTOM_RIGHT ? ATTN_CAUSAL_BOTTOM_RIGHT
                                            : ATTN_CAUSAL_NONE;
    if (kind == PART_MASK) { /* j > i + delta hidden; the same for every (b, h) */
        for (int64_t i = 0; i < la; ++i)
            for (int64_t j = 0; j < lb; ++j)
                mask[i * lb + j] = j > i + delta ? -INFINITY : 0.0f;
        d->mask = mask;
        d->mask_strides.batch = 0, d->mask_strides.head = 0, d->mask_strides.seq = lb;
    }
    return kind;
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

void fill(float *x, const options *o, int tensor, const shard *s) {
    for (int64_t b = 0; b < o->batch; ++b)
        for (int64_t h = 0; h < o->heads; ++h)
            for (int i = 0; i < s->count; ++i)
                for (int64_t t = 0; t < s->p[i].len; ++t)
                    for (int64_t d = 0; d < o->dim; ++d)
                        *x++ = value(o->seed, tensor, b, h, s->p[i].off + t, d);
}

void gather(const options *o, int rank, int p, int64_t n, const float *mine, float *full) {
    const int64_t BH = o->batch * o->heads, D = o->dim;
    int *counts = xmalloc(sizeof(int) * (size_t)p), *displs = xmalloc(sizeof(int) * (size_t)p);
    int64_t total = 0;
    for (int r = 0; r < p; ++r) {
        const int64_t c = BH * shard_of(n, p, r, o->zigzag).len * D;
        if (total + c > 2147483647) die("tensors too large for MPI_Gatherv's int counts");
        counts[r] = (int)c, displs[r] = (int)total, total += c;
    }
    float *tmp = rank == 0 ? xmalloc((size_t)total * 4) : NULL;
    MPI_Gatherv(mine, counts[rank], MPI_FLOAT, tmp, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
    for (int r = 0; rank == 0 && r < p; ++r) { /* rank r's pieces to their global rows */
        const shard s = shard_of(n, p, r, o->zigzag);
        const float *src = tmp + displs[r];
        for (int64_t bh = 0; bh < BH; ++bh)
            for (int i = 0; i < s.count; ++i)
                memcpy(full + (bh * n + s.p[i].off) * D, src + (bh * s.len + s.p[i].row) * D,
                       (size_t)(s.p[i].len * D) * 4);
    }
    free(tmp), free(counts), free(displs);
}
