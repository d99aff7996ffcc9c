/*
 * Ring attention over MPI with attn: what the passes (ring_passes.c), the sharding
 * (ring_shards.c) and the driver (ring_attention.c) share.
 *
 * Tensors of a rank are dense [batch, heads, local length, dim] with the rank's pieces of the
 * sequence one after the other along the length; a shard's K/V buffer holds [K | V] (and the
 * gradient buffer travelling with it [dK | dV]), each [batch, heads, shard length, dim].
 */
#ifndef RING_H
#define RING_H

#include <stdint.h>

#include <attn/attn.h>

typedef struct {
    int64_t batch, heads, len, len_kv, dim;
    int causal; /* bottom-right aligned: query i sees key j <= i + (len_kv - len) */
    int zigzag; /* 1: rank r holds chunks r and 2P-1-r of 2P; 0: one contiguous shard */
    uint64_t seed;
} options;

/* Global positions [off, off + len) of the sequence, held at local rows [row, row + len). */
typedef struct {
    int64_t off, len, row;
} piece;

/* The pieces a rank holds of one sequence (Q's, or K's and V's), in local order. */
typedef struct {
    int count;
    piece p[2];
    int64_t len; /* local length: the pieces' lengths summed */
} shard;

/* Rank r's shard of a length-n sequence over p ranks (zigzag or contiguous). */
shard shard_of(int64_t n, int p, int r, int zigzag);

/* How a query piece attends to a key piece. */
enum part { PART_SKIP, PART_FULL, PART_TOP_LEFT, PART_BOTTOM_RIGHT, PART_MASK, PART_KINDS };

/* Work of one rank in one pass: pieces computed of each kind, and scores (i, j) visible. */
typedef struct {
    int kinds[PART_KINDS];
    double scores;
    double bytes_sent;
} work;

/* The descriptor of query piece qp (of a local Q of length lq) against key piece kp (of a
 * K/V shard of length lk): layouts strided over the local tensors, causal masking from the
 * global positions (mask: an lq-by-lk buffer, filled when needed). Adds the piece pair to w
 * and returns its kind (PART_SKIP: no query sees any key, d is not set). */
enum part part_desc(const options *o, const piece *qp, int64_t lq, const piece *kp, int64_t lk,
                    float *mask, attn_sdpa_desc *d, work *w);

/* x [B, H, s->len, D] dense: the positions of s of tensor `tensor` (0 q, 1 k, 2 v, 3 dout). */
void fill(float *x, const options *o, int tensor, const shard *s);

/* Rank 0: the length-n tensor [B, H, n, D] from every rank's local one (a collective). */
void gather(const options *o, int rank, int p, int64_t n, const float *mine, float *full);

/* The passes (ring_passes.c). q: [B, H, qs.len, D]; kv: my [K | V]; ctx: one thread.
 * ring_forward writes out [B, H, qs.len, D] and the global lse of each query piece, lse[i]
 * [B, H, qs.p[i].len]. ring_backward writes dq and my shard's [dK | dV]. */
void ring_forward(attn_context *ctx, const options *o, int rank, int p, const float *q,
                  const float *kv, float *out, float *lse[2], work *w);
void ring_backward(attn_context *ctx, const options *o, int rank, int p, const float *q,
                   const float *kv, const float *out, const float *dout, float *const lse[2],
                   float *dq, float *dkv, work *w);

void die(const char *what);
void check(attn_status s, const char *call);
void *xmalloc(size_t n);

#endif
