/*
 * The two passes of ring attention (see ring.h). In both, the K/V shards travel around the
 * ring (rank r sends to r+1, receives from r-1), double buffered: the next shard is in flight
 * (MPI_Isend/MPI_Irecv) while the current one is used.
 *
 * Forward: for each visiting shard and each pair (my query piece, its key piece) a rank
 * computes a partial output with attn_sdpa_f32 (with its lse) and folds it into the query
 * piece's running result with attn_merge_f32, which gives the output and the global lse.
 *
 * Backward: dQ stays, dK and dV travel with K and V. With the global lse and the final output,
 * attn_sdpa_backward_f32 on one (query piece, key piece) pair gives exactly that pair's terms
 * of the gradients (P = exp(S - lse) are the global probabilities, D = dout . out the global
 * row term), so dQ is the sum over the visiting shards and dK, dV the sum over the ranks they
 * visit. The [dK | dV] of a shard arrives from the left before the rank adds its terms and
 * leaves to the right after; after P steps it is back with the shard's owner.
 */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

/* The shard of the owner of the K/V buffer a rank holds at a step. */
static shard visiting(const options *o, int rank, int p, int step) {
    return shard_of(o->len_kv, p, (rank - step + p) % p, o->zigzag);
}

/* Starts sending the current [K | V] right and receiving the next from the left. */
static void pass_on(const options *o, int rank, int p, int step, const float *cur, float *next,
                    MPI_Request req[2], work *w) {
    const int64_t BHD = o->batch * o->heads * o->dim;
    const int64_t lk = visiting(o, rank, p, step).len, lk_next = visiting(o, rank, p, step + 1).len;
    MPI_Irecv(next, (int)(2 * BHD * lk_next), MPI_FLOAT, (rank + p - 1) % p, step,
              MPI_COMM_WORLD, &req[0]);
    MPI_Isend(cur, (int)(2 * BHD * lk), MPI_FLOAT, (rank + 1) % p, step, MPI_COMM_WORLD,
              &req[1]);
    w->bytes_sent += 2.0 * (double)(BHD * lk) * 4.0;
}

/* dst += src over rows [row, row + len) of every (b, h) of [BH, n, D] tensors. */
static void add_rows(float *dst, const float *src, int64_t BH, int64_t n, int64_t row,
                     int64_t len, int64_t D) {
    for (int64_t bh = 0; bh < BH; ++bh) {
        float *d = dst + (bh * n + row) * D;
        const float *s = src + (bh * n + row) * D;
        for (int64_t i = 0; i < len * D; ++i) d[i] += s[i];
    }
}

/* The largest K/V shard of any rank. */
static int64_t max_shard(const options *o, int p) {
    int64_t m = 0;
    for (int r = 0; r < p; ++r) {
        const int64_t l = shard_of(o->len_kv, p, r, o->zigzag).len;
        m = l > m ? l : m;
    }
    return m;
}

void ring_forward(attn_context *ctx, const options *o, int rank, int p, const float *q,
                  const float *kv, float *out, float *lse[2], work *w) {
    const int64_t BH = o->batch * o->heads, D = o->dim, max_lk = max_shard(o, p);
    const shard qs = shard_of(o->len, p, rank, o->zigzag);
    const int64_t max_rows = BH * qs.p[0].len; /* the first piece is the longest */
    float *buf[2] = {xmalloc((size_t)(2 * BH * max_lk * D) * 4),
                     xmalloc((size_t)(2 * BH * max_lk * D) * 4)};
    memcpy(buf[0], kv, (size_t)(2 * BH * visiting(o, rank, p, 0).len * D) * 4);
    float *acc[2], *part = xmalloc((size_t)(max_rows * D) * 4), *tmp[2];
    float *part_lse = xmalloc((size_t)max_rows * 4), *tmp_lse[2];
    for (int i = 0; i < qs.count; ++i) {
        acc[i] = xmalloc((size_t)(BH * qs.p[i].len * D) * 4);
        tmp[i] = xmalloc((size_t)(BH * qs.p[i].len * D) * 4);
        tmp_lse[i] = xmalloc((size_t)(BH * qs.p[i].len) * 4);
    }
    float *mask = xmalloc((size_t)(qs.p[0].len * max_lk) * 4);
    int have[2] = {0, 0};
    for (int step = 0; step < p; ++step) {
        const shard ks = visiting(o, rank, p, step);
        float *cur = buf[step % 2];
        MPI_Request req[2];
        if (step + 1 < p) pass_on(o, rank, p, step, cur, buf[(step + 1) % 2], req, w);
        for (int a = 0; a < qs.count; ++a)
            for (int b = 0; b < ks.count; ++b) {
                attn_sdpa_desc d;
                if (part_desc(o, &qs.p[a], qs.len, &ks.p[b], ks.len, mask, &d, w) == PART_SKIP)
                    continue;
                const int64_t rows = BH * qs.p[a].len;
                float *po = have[a] ? part : acc[a], *pl = have[a] ? part_lse : lse[a];
                d.lse = pl;
                check(attn_sdpa_f32(ctx, &d, q + qs.p[a].row * D, cur + ks.p[b].row * D,
                                    cur + (BH * ks.len + ks.p[b].row) * D, po), "attn_sdpa_f32");
                if (have[a]) { /* fold: acc = merge(acc, part) */
                    const float *outs[2] = {acc[a], part}, *lses[2] = {lse[a], part_lse};
                    check(attn_merge_f32(ctx, 2, rows, D, outs, lses, tmp[a], tmp_lse[a]),
                          "attn_merge_f32");
                    float *t = acc[a]; acc[a] = tmp[a], tmp[a] = t;
                    memcpy(lse[a], tmp_lse[a], (size_t)rows * 4);
                }
                have[a] = 1;
            }
        if (step + 1 < p) MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    }
    for (int a = 0; a < qs.count; ++a) { /* the pieces into out; none seen: zeros, -inf */
        const int64_t la = qs.p[a].len;
        for (int64_t bh = 0; bh < BH; ++bh) {
            float *dst = out + (bh * qs.len + qs.p[a].row) * D;
            if (have[a]) memcpy(dst, acc[a] + bh * la * D, (size_t)(la * D) * 4);
            else memset(dst, 0, (size_t)(la * D) * 4);
            for (int64_t i = 0; !have[a] && i < la; ++i) lse[a][bh * la + i] = -INFINITY;
        }
        free(acc[a]), free(tmp[a]), free(tmp_lse[a]);
    }
    free(buf[0]), free(buf[1]), free(part), free(part_lse), free(mask);
}

/* Adds a step's [dK | dV] terms (dstep) to the travelling buffer: it arrives from the left
 * (the step-0 buffer is this rank's own, starting from zero), then leaves to the right. */
static void pass_gradients(const options *o, int rank, int p, int step, float *dkv[2],
                           const float *dstep, MPI_Request *sent, MPI_Request *received,
                           work *w) {
    const int64_t BHD = o->batch * o->heads * o->dim;
    const int64_t lk = visiting(o, rank, p, step).len, lk_next = visiting(o, rank, p, step + 1).len;
    float *cur = dkv[step % 2], *next = dkv[(step + 1) % 2];
    if (step == 0) memset(cur, 0, (size_t)(2 * BHD * lk) * 4);
    else MPI_Wait(received, MPI_STATUS_IGNORE);
    for (int64_t i = 0; i < 2 * BHD * lk; ++i) cur[i] += dstep[i];
    if (step > 0) MPI_Wait(sent, MPI_STATUS_IGNORE); /* `next` was the last step's message */
    MPI_Irecv(next, (int)(2 * BHD * lk_next), MPI_FLOAT, (rank + p - 1) % p, p + step,
              MPI_COMM_WORLD, received);
    MPI_Isend(cur, (int)(2 * BHD * lk), MPI_FLOAT, (rank + 1) % p, p + step, MPI_COMM_WORLD,
              sent);
    w->bytes_sent += 2.0 * (double)(BHD * lk) * 4.0;
}

void ring_backward(attn_context *ctx, const options *o, int rank, int p, const float *q,
                   const float *kv, const float *out, const float *dout, float *const lse[2],
                   float *dq, float *dkv_mine, work *w) {
    const int64_t BH = o->batch * o->heads, D = o->dim, max_lk = max_shard(o, p);
    const shard qs = shard_of(o->len, p, rank, o->zigzag);
    float *buf[2], *dkv[2];
    for (int i = 0; i < 2; ++i) {
        buf[i] = xmalloc((size_t)(2 * BH * max_lk * D) * 4);
        dkv[i] = xmalloc((size_t)(2 * BH * max_lk * D) * 4);
    }
    memcpy(buf[0], kv, (size_t)(2 * BH * visiting(o, rank, p, 0).len * D) * 4);
    float *dq_part = xmalloc((size_t)(BH * qs.len * D) * 4);       /* q's layout */
    float *dstep = xmalloc((size_t)(2 * BH * max_lk * D) * 4);     /* this step's dK | dV */
    float *dkv_part = xmalloc((size_t)(2 * BH * max_lk * D) * 4);  /* one pair's dK | dV */
    float *mask = xmalloc((size_t)(qs.p[0].len * max_lk) * 4);
    memset(dq, 0, (size_t)(BH * qs.len * D) * 4);
    MPI_Request sent = MPI_REQUEST_NULL, received = MPI_REQUEST_NULL;
    for (int step = 0; step < p; ++step) {
        const shard ks = visiting(o, rank, p, step);
        const int64_t nk = BH * ks.len * D; /* dV's offset in [dK | dV] */
        float *cur = buf[step % 2];
        MPI_Request req[2];
        if (step + 1 < p) pass_on(o, rank, p, step, cur, buf[(step + 1) % 2], req, w);
        memset(dstep, 0, (size_t)(2 * nk) * 4);
        for (int a = 0; a < qs.count; ++a)
            for (int b = 0; b < ks.count; ++b) {
                attn_sdpa_desc d;
                if (part_desc(o, &qs.p[a], qs.len, &ks.p[b], ks.len, mask, &d, w) == PART_SKIP)
                    continue;
                d.out.batch = o->heads * qs.len * D, d.out.head = qs.len * D;
                const int64_t qr = qs.p[a].row * D, kr = ks.p[b].row * D;
                check(attn_sdpa_backward_f32(ctx, &d, q + qr, cur + kr, cur + nk + kr, out + qr,
                                             dout + qr, lse[a], dq_part + qr, dkv_part + kr,
                                             dkv_part + nk + kr),
                      "attn_sdpa_backward_f32");
                add_rows(dq, dq_part, BH, qs.len, qs.p[a].row, qs.p[a].len, D);
                add_rows(dstep, dkv_part, 2 * BH, ks.len, ks.p[b].row, ks.p[b].len, D);
            }
        pass_gradients(o, rank, p, step, dkv, dstep, &sent, &received, w);
        if (step + 1 < p) MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    }
    MPI_Wait(&received, MPI_STATUS_IGNORE); /* my shard's dK | dV, back from its round */
    MPI_Wait(&sent, MPI_STATUS_IGNORE);
    memcpy(dkv_mine, dkv[p % 2], (size_t)(2 * BH * visiting(o, rank, p, 0).len * D) * 4);
    for (int i = 0; i < 2; ++i) free(buf[i]), free(dkv[i]);
    free(dq_part), free(dstep), free(dkv_part), free(mask);
}
