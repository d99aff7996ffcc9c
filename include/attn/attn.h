/*
 * attn — scaled dot-product attention on CPUs, behind a plain C API.
 *
 * Conventions used by every function below:
 *   - Sizes and strides are int64_t and counted in elements (floats), never bytes.
 *   - Every float tensor has its last dimension contiguous (stride 1); the other
 *     dimensions are addressed through the strides given with it.
 *   - Every compute call takes a context first; NULL means the process-wide default
 *     context (ATTN_IMPL_AUTO, ATTN_ISA_AUTO, all hardware threads).
 *   - A call returns ATTN_OK or an error status. On any status other than ATTN_OK no
 *     output buffer has been written, and attn_last_error() explains what was wrong.
 *   - No function calls abort() and no C++ exception crosses this interface.
 *
 * This header is C99 and C++ compatible and includes only <stddef.h> and <stdint.h>.
 */
#ifndef ATTN_ATTN_H
#define ATTN_ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/* Version, status, errors                                                   */
/* ------------------------------------------------------------------------- */

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 3
#define ATTN_VERSION_PATCH 0

/* "0.3.0": the version of the library actually linked. */
const char *attn_version(void);

typedef enum attn_status {
    ATTN_OK = 0,
    ATTN_INVALID_ARGUMENT = 1, /* null pointer, size < allowed, size product overflows, bad stride,
                                  p out of range, aliasing */
    ATTN_OUT_OF_MEMORY = 2,
    ATTN_UNSUPPORTED = 3,      /* well formed, but not available here (e.g. an ISA this CPU lacks) */
    ATTN_INTERNAL_ERROR = 4
} attn_status;

/* Static text for a status; never NULL, also for values outside the enum. */
const char *attn_status_string(attn_status s);

/* This thread's message for its last failed call, "" if none. It names the function,
 * the argument and the offending value, e.g.
 * "attn_sdpa_f32: desc->len_q = -3, must be >= 1". Valid until this thread's next call. */
const char *attn_last_error(void);

/* ------------------------------------------------------------------------- */
/* Context: implementation, instruction set, threads                         */
/* ------------------------------------------------------------------------- */

typedef struct attn_context attn_context;

typedef enum attn_impl {
    ATTN_IMPL_AUTO = 0,      /* the fastest correct path */
    ATTN_IMPL_REFERENCE = 1, /* naive scalar loops: the oracle every fast path is tested against */
    ATTN_IMPL_SIMD = 2       /* cache-blocked xsimd kernels, parallel with oneTBB */
} attn_impl;

typedef enum attn_isa {
    ATTN_ISA_AUTO = 0, /* the best the CPU supports */
    ATTN_ISA_SCALAR = 1,
    ATTN_ISA_SSE4 = 2,
    ATTN_ISA_AVX2 = 3,
    ATTN_ISA_AVX512 = 4,
    ATTN_ISA_AVX512_BF16 = 5, /* AVX-512 with VDPBF16PS (Cooper Lake, Zen 4 and later): "avx512_bf16" */
    ATTN_ISA_AMX = 6,         /* AMX-BF16 tiles with AVX512-BF16 (Sapphire Rapids and later): "amx"
                                 (only when the OS grants the tile state, see attn_context_isa) */
    ATTN_ISA_AMX_EMULATED = 7 /* the amx level's kernels on an exact software model of the tiles:
                                 "amx_emulated", for testing them on any CPU. Selected only
                                 explicitly, as max_isa, never by ATTN_ISA_AUTO; needs
                                 AVX512-BF16 (the kernels around the tiles use it), else
                                 ATTN_UNSUPPORTED naming it. Slow: not for production. */
} attn_isa;

/* How f32 and f16 inputs may be multiplied. */
typedef enum attn_fpmath {
    ATTN_FPMATH_STRICT = 0, /* products in the precision of the stored inputs (default)        */
    ATTN_FPMATH_BF16 = 1    /* f32 and f16 inputs may be rounded to bf16 for the products; sums,
                               softmax and accumulation stay f32 (as oneDNN's fpmath_mode bf16) */
} attn_fpmath;

typedef struct attn_config {
    attn_impl impl;
    attn_isa max_isa; /* cap for runtime dispatch; above what the CPU has -> ATTN_UNSUPPORTED */
    int num_threads;  /* 0 = all hardware threads; n >= 1 = at most n */
    attn_fpmath fpmath; /* appended in 0.2; init: ATTN_FPMATH_STRICT. A value outside the enum:
                           attn_context_create returns ATTN_INVALID_ARGUMENT */
} attn_config;

/* Fills *cfg with the defaults: ATTN_IMPL_AUTO, ATTN_ISA_AUTO, 0 threads (= all),
 * ATTN_FPMATH_STRICT. */
void attn_config_init(attn_config *cfg);

/* Creates a context; cfg NULL = defaults. A context owns its thread pool and may be
 * used by several threads at once. With a given context, results are bitwise identical
 * for every num_threads and every run. A context also keeps the scratch memory of its
 * attn_sdpa calls (plans, packed K and V, split-key partials) and of its backward calls
 * (row terms, dQ accumulators, per-thread scratch) for the next ones: after a first call, a
 * call of the same or a smaller shape allocates nothing in proportion to the problem (but
 * for the f32 copies a backward makes of 16-bit tensors it cannot read as stored: see
 * attn_sdpa_backward). That memory (the most any one call needed, per call running at once)
 * is freed by attn_context_destroy; the default context (ctx NULL) keeps it for the process. */
attn_status attn_context_create(const attn_config *cfg, attn_context **ctx);

/* Destroys a context; NULL is fine. */
void attn_context_destroy(attn_context *ctx);

/* The instruction set the context's kernels use: "amx", "avx512_bf16", "avx512", "avx2",
 * "sse4" or "scalar" (the reference implementation always reports "scalar"). NULL = the
 * default context. The levels are detected at run time from CPUID and the OS: AVX-512 needs
 * the OS to save the ZMM state, AMX also the tile state (XCR0) and the permission the Linux
 * kernel grants through arch_prctl(ARCH_REQ_XCOMP_PERM); if it refuses, "amx" is absent.
 * f32 work under ATTN_FPMATH_STRICT runs the AVX-512 kernels on avx512_bf16 and amx. */
const char *attn_context_isa(const attn_context *ctx);

/* The number of threads the context computes with (>= 1). NULL = the default context. */
int attn_context_num_threads(const attn_context *ctx);

/* ------------------------------------------------------------------------- */
/* Element types and conversion                                              */
/* ------------------------------------------------------------------------- */

typedef enum attn_dtype {
    ATTN_DTYPE_F32 = 0,  /* IEEE binary32                                  */
    ATTN_DTYPE_BF16 = 1, /* bfloat16, as uint16_t bit patterns             */
    ATTN_DTYPE_F16 = 2,  /* IEEE binary16 (half), as uint16_t bit patterns */
    /* 0.3: quantized types, allowed only as desc->kv_type (a K/V cache) and as the output of
     * attn_quantize; every other type field rejects them (ATTN_INVALID_ARGUMENT). An element
     * stands for scale * (q - zero) (integer types) or scale * fp8(q) (FP8 types), with the
     * scale and zero point of its group (see attn_sdpa_desc and attn_quantize). */
    ATTN_DTYPE_I8 = 3,       /* signed 8-bit integer, -128 .. 127, one byte (int8_t)            */
    ATTN_DTYPE_U8 = 4,       /* unsigned 8-bit integer, 0 .. 255, one byte (uint8_t)            */
    ATTN_DTYPE_I4 = 5,       /* signed 4-bit integer, -8 .. 7 (two's complement nibble), two
                                per byte: element 2c is the low nibble of byte c, element
                                2c + 1 its high nibble                                            */
    ATTN_DTYPE_U4 = 6,       /* unsigned 4-bit integer, 0 .. 15, packed two per byte as I4      */
    ATTN_DTYPE_FP8_E4M3 = 7, /* 8-bit float of the OCP FP8 format E4M3 ("e4m3fn"): sign, 4
                                exponent bits (bias 7), 3 mantissa bits; subnormals; no
                                infinities; S.1111.111 is NaN; largest finite value 448          */
    ATTN_DTYPE_FP8_E5M2 = 8  /* 8-bit float of the OCP FP8 format E5M2: sign, 5 exponent bits
                                (bias 15), 2 mantissa bits; subnormals; infinities and NaNs as
                                in IEEE 754 binary16's top byte; largest finite value 57344      */
} attn_dtype;

/* Bytes of one element: 4, 2, 2 for F32, BF16, F16; 1 for I8, U8, FP8_E4M3, FP8_E5M2; 0 for
 * I4 and U4 (half a byte: use attn_dtype_bits) and for a value outside the enum. */
size_t attn_dtype_size(attn_dtype t);

/* Bits of one element: 32, 16, 16, 8, 8, 4, 4, 8, 8 in enum order; 0 outside the enum.
 * Strides and sizes still count elements; element e of a 4-bit array is in byte e / 2. */
size_t attn_dtype_bits(attn_dtype t);

/* dst[i] = src[i] converted from src_type to dst_type, for i < n (n elements, contiguous).
 * Round to nearest even; a NaN stays a NaN (narrowing from f32 gives a quiet NaN, keeping
 * the sign and the top payload bits); +-inf stays +-inf; values beyond the target's range
 * become +-inf. Subnormals are kept, with one exception on every path: f32 subnormals become
 * +-0 when converted to bf16 (as the hardware's vcvtneps2bf16 does). Equal types copy.
 * src == dst with equal element sizes (in place) is allowed; any other overlap is rejected.
 * n == 0 does nothing (the pointers may then be NULL). These are also the rules of every
 * rounding inside the kernels. */
attn_status attn_convert(attn_context *ctx, int64_t n, const void *src, attn_dtype src_type,
                         void *dst, attn_dtype dst_type);

/* Quantizes rows x dim values into a quantized type, in groups of `group` consecutive elements
 * of a row (0 = dim: one group per row), so that new rows can be appended to a K/V cache.
 *   src: rows x dim of src_type (F32, BF16 or F16), row r at element r * src_stride.
 *   dst: rows x dim of dst_type (I8, U8, I4, U4, FP8_E4M3 or FP8_E5M2), row r at element
 *        r * dst_stride (4-bit: element e in byte e / 2, low nibble first).
 *   scale, zero: the scale (and zero point) of row r, group g at [r * scale_stride + g].
 * Strides count elements of their arrays, >= 0; with rows > 1, src_stride, dst_stride >= dim
 * and scale_stride >= the groups of a row (dim / group, 1 for group 0). group divides dim;
 * for a 4-bit dst, dim, group and dst_stride are even. Arithmetic in f32, every step rounded
 * to nearest even:
 *   - zero == NULL (symmetric; I8, I4 and the FP8 types): scale = max|x| / qmax over the group,
 *     qmax = 127 (I8), 7 (I4), 448 (E4M3), 57344 (E5M2); q = x / scale rounded to an integer
 *     (ties to even) and clamped to [-qmax, qmax], or for FP8 the nearest FP8 value of
 *     x / scale (ties to even), saturating at +-qmax. A group whose scale is 0 (all zeros, or
 *     max|x| / qmax underflows) gets scale 0 and q = 0.
 *   - zero != NULL (asymmetric; integer types only, required for U8 and U4): [min, max] of the
 *     group maps onto [qmin, qmax] (I8 -128..127, U8 0..255, I4 -8..7, U4 0..15):
 *     scale = (max - min) / (qmax - qmin), zero = qmin - min / scale,
 *     q = x / scale + zero rounded (ties to even) and clamped to [qmin, qmax]. A group whose
 *     values all equal c gets scale 0, zero 0, q = 0 if c == 0, else scale |c|,
 *     zero = qmin - sign(c), q = qmin (exact). A group with max > min whose scale underflows to
 *     0 gets scale 0, zero 0, q = 0.
 * Rejected with ATTN_INVALID_ARGUMENT, nothing written: a NaN or infinity in src (the message
 * names its row and column), with zero points a group whose max - min overflows f32 (naming
 * its row), and dst, scale or zero overlapping each other or src. Every path (reference, each
 * ISA, any number of threads) gives the same bits. Elements of dst, scale and zero outside
 * the rows and groups written are never touched (a 4-bit row never touches the other nibble
 * of a byte outside it: rows start on whole bytes). rows == 0 or dim == 0 does nothing. */
attn_status attn_quantize(attn_context *ctx, int64_t rows, int64_t dim,
                          const void *src, attn_dtype src_type, int64_t src_stride,
                          void *dst, attn_dtype dst_type, int64_t dst_stride,
                          float *scale, float *zero, int64_t scale_stride, int64_t group);

/* ------------------------------------------------------------------------- */
/* Matrix product                                                            */
/* ------------------------------------------------------------------------- */

typedef enum attn_trans { ATTN_NO_TRANS = 0, ATTN_TRANS = 1 } attn_trans;

/* Row-major C[m,n] = alpha * op(A) * op(B) + beta * C, as cblas_sgemm(CblasRowMajor, ...).
 *   op(A) is [m,k]: A is stored [m, lda] (NO_TRANS, lda >= k) or [k, lda] (TRANS, lda >= m).
 *   op(B) is [k,n]: B is stored [k, ldb] (NO_TRANS, ldb >= n) or [n, ldb] (TRANS, ldb >= k).
 *   C is [m, ldc], ldc >= n.
 * Sizes may be 0 (nothing to do). When beta == 0, C is not read (NaN in C is ignored). */
attn_status attn_gemm_f32(attn_context *ctx, attn_trans trans_a, attn_trans trans_b,
                          int64_t m, int64_t n, int64_t k, float alpha,
                          const float *a, int64_t lda, const float *b, int64_t ldb,
                          float beta, float *c, int64_t ldc);

/* As attn_gemm_f32 (which equals this call with three F32 types, bitwise), in the style of
 * cuBLAS's cublasGemmEx: a, b and c are arrays of their types (leading dimensions in
 * elements); products accumulate in f32; C is read (beta != 0) and written in c_type,
 * rounded once; k == 0 gives C = beta * C (zeros when beta == 0), as cblas. With
 * ATTN_FPMATH_STRICT the products are exact products of the stored values; with
 * ATTN_FPMATH_BF16 f32 and f16 inputs may be rounded to bf16 first. */
attn_status attn_gemm(attn_context *ctx, attn_trans trans_a, attn_trans trans_b,
                      int64_t m, int64_t n, int64_t k, float alpha,
                      const void *a, attn_dtype a_type, int64_t lda,
                      const void *b, attn_dtype b_type, int64_t ldb,
                      float beta, void *c, attn_dtype c_type, int64_t ldc);

/* ------------------------------------------------------------------------- */
/* Softmax                                                                   */
/* ------------------------------------------------------------------------- */

/* y[i,:] = softmax(scale * x[i,:]) for i < rows; x is [rows, ldx], y is [rows, ldy].
 * Stable for any finite magnitude (1e30 included). With scale > 0, -INFINITY entries get
 * weight 0, a row that is all -INFINITY becomes all zeros, a NaN in a row makes it NaN.
 * For every scale, negative ones and overflow included, the weights are those of the softmax
 * of the exact products scale * x[i,j]: a product of -inf gets weight 0 (a row of them:
 * zeros); products of +inf share the row's weight equally and all others get 0; a NaN
 * product (a NaN in x, or 0 * inf) makes the row NaN. So with scale < 0, x = +INFINITY is
 * masked and x = -INFINITY takes the weight.
 * x == y with ldx == ldy (in place) is allowed; any other overlap is rejected. */
attn_status attn_softmax_f32(attn_context *ctx, int64_t rows, int64_t cols, float scale,
                             const float *x, int64_t ldx, float *y, int64_t ldy);

/* ------------------------------------------------------------------------- */
/* Scaled dot-product attention                                              */
/* ------------------------------------------------------------------------- */

typedef enum attn_causal {
    ATTN_CAUSAL_NONE = 0,
    ATTN_CAUSAL_TOP_LEFT = 1,    /* query i sees keys j <= i                    */
    ATTN_CAUSAL_BOTTOM_RIGHT = 2, /* query i sees keys j <= i + (len_kv - len_q) */
    ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN = 3 /* query i of batch b sees keys j <= i + kv_len[b] - len_q
                                           (each sequence's own length; needs kv_len)        */
} attn_causal;

/* Strides, in elements, of a [batch, head, seq, dim] tensor whose dim is contiguous.
 * Dense BHSD: {heads*seq*dim, seq*dim, dim}. BSHD: {seq*heads*dim, dim, heads*dim}. */
typedef struct attn_layout {
    int64_t batch, head, seq;
} attn_layout;

typedef struct attn_sdpa_desc {
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v;
    /* q: [batch, heads_q, len_q, dim_qk]   k: [batch, heads_kv, len_kv, dim_qk]
     * v: [batch, heads_kv, len_kv, dim_v]  out: [batch, heads_q, len_q, dim_v]
     * init: dense [batch, heads, seq, dim] */
    attn_layout q, k, v, out;
    float scale;          /* multiplies Q K^T; init: 1/sqrt(dim_qk); 1.0f = no division */
    attn_causal causal;
    const float *mask;    /* optional additive mask on the scaled scores, element (b,h,i,j) at */
    attn_layout mask_strides; /* mask[b*batch + h*head + i*seq + j]; a stride of 0 broadcasts;
                                 h is the query head                                           */
    const int32_t *kv_len;    /* optional [batch]: keys j >= kv_len[b] are masked (padding)     */
    float dropout_p;          /* 0 = off; in [0,1): weight zeroed with probability p, rest /(1-p) */
    uint64_t dropout_seed;    /* the keep/drop decision is a pure function of (seed, b, h, i, j) */
    float *weights;           /* optional out, dense [batch, heads_q, len_q, len_kv]: softmax
                                 probabilities before dropout (the matrix A)                   */
    float *lse;               /* optional out, dense [batch, heads_q, len_q]: natural-log
                                 logsumexp of the masked, scaled scores; -INFINITY if fully masked */
    /* 0.2: element types (init ATTN_DTYPE_F32). mask, weights and lse stay f32. */
    attn_dtype q_type;        /* q                                                          */
    attn_dtype kv_type;       /* k and v (a KV cache is one type)                           */
    attn_dtype out_type;      /* out                                                        */
    /* 0.2: masks and layouts of today's models. i' is query i's position on the key axis:
     * i with ATTN_CAUSAL_TOP_LEFT, i + kv_len[b] - len_q with ATTN_CAUSAL_BOTTOM_RIGHT_KV_LEN,
     * otherwise i + len_kv - len_q. Causal attention is the window (-1, 0) at that alignment.
     * Order on a score: scale, softcap, + mask, - ALiBi; then keys outside the window, the
     * causal limit or kv_len are hidden (never read). Init: windows -1, softcap 0, pointers
     * NULL, page fields 0. */
    int64_t window_left;       /* sliding window: keys j >= i' - window_left only; -1 = unbounded */
    int64_t window_right;      /* keys j <= i' + window_right only; -1 = unbounded               */
    float softcap;             /* > 0: s -> softcap * tanh(s / softcap), s the scaled score; 0 = off */
    const float *alibi_slopes; /* optional [heads_q]: s -= slope[h] * |i' - j|                    */
    const float *sinks;        /* optional [heads_q]: a logit per head that joins every row's
                                  softmax denominator and contributes no value (attention sinks);
                                  lse includes it, weights are exp(s - lse); -INFINITY = none    */
    float *dsinks;             /* optional out of the backward, [heads_q]: d loss / d sinks       */
    const int32_t *block_table; /* optional, paged K/V: [batch, block_table_stride] page ids:
                                  key j of batch b is row j % page_size of page
                                  p = block_table[b * block_table_stride + j / page_size], at
                                  k + p * k.batch + h * k.head + (j % page_size) * k.seq (and v);
                                  forward only (the backward returns ATTN_UNSUPPORTED)           */
    int64_t block_table_stride; /* entries per batch row of block_table, >= ceil(len_kv/page_size) */
    int64_t page_size;          /* keys per page                                                  */
    int64_t num_pages;          /* pages in each pool; every id used must be in [0, num_pages)    */
    /* 0.3 (init: pointers NULL, strides 0, groups 0). One call for a serving batch: sequences
     * of their own lengths, packed. With q_start, query i of sequence b is the packed row
     * r = q_start[b] + i, at q + r * q.seq + h * q.head (likewise out; q.batch and out.batch
     * are not used); the sequence has n_b = q_start[b + 1] - q_start[b] queries,
     * 0 <= n_b <= len_q (0: skipped), else n_b = len_q. With kv_start, key j of sequence b is
     * the packed row kv_start[b] + j of k and v (k.batch, v.batch unused),
     * K_b = kv_start[b + 1] - kv_start[b] <= len_kv keys, else K_b = len_kv; kv_len[b] must
     * be <= K_b and limits the keys further. A sequence with no keys gives rows of zeros and
     * lse -INFINITY (with sinks: zeros, lse = the sink).
     * i', the query's position on its sequence's key axis, is i (TOP_LEFT),
     * i + kv_len[b] - n_b (BOTTOM_RIGHT_KV_LEN), otherwise i + K_b - n_b. Mask element
     * (b, h, i, j) and the dropout decision (seed, b, h, i, j) take i, j within the sequence.
     * lse with q_start is dense [q_start[batch], heads_q]: row r, head h at r * heads_q + h
     * (so a packed out and its lse fold row by row in attn_merge_f32). weights must be NULL
     * with either field. The backward takes the same fields: dq, dk, dv in the packed layouts
     * of q, k, v; rows of dk and dv of keys no query sees are zeros.
     * Batch invariance: a sequence's output rows and lse are the same bits whatever else is in
     * the batch, at any position (with dropout: at the same b), dense or packed, with any
     * len_q and any len_kv that leaves its visible keys and alignment alone, for every thread
     * count: tiles, key chunks and kernels are chosen from that sequence's problem only. */
    const int32_t *q_start;     /* optional [batch + 1]: q_start[0] = 0, nondecreasing          */
    const int32_t *kv_start;    /* optional [batch + 1], likewise for k, v; not with block_table */
    /* 0.3: quantized K/V caches (kv_type I8, U8, I4, U4, FP8_E4M3 or FP8_E5M2). Element c of key
     * row j of sequence b, kv head h, stands for scale * (q - zero) (integer types) or
     * scale * fp8(q) (FP8), with scale = k_scale[b * s.batch + h * s.head + j * s.seq +
     * c / k_group] (s = k_scale_strides; with paging, b is the page and j the row in it, as for
     * k; with kv_start, j is the packed row and s.batch is unused) and the zero point at the
     * same index of k_zero; likewise for V with the v_ fields.
     * Per row: group 0; per group of a row: group g; per channel: s.seq = 0, group 1 (4-bit: 2);
     * per head or per tensor: strides 0. Rules (ATTN_INVALID_ARGUMENT): the scale pointers are
     * required for the integer types and may be NULL (= 1) for FP8; every one of the four
     * pointers is NULL unless kv_type is quantized, and the zero points are NULL for FP8; groups
     * >= 0 and dividing their dimension; with a 4-bit kv_type, dim_qk, dim_v, the groups and
     * every stride of k and v in use (its dimension has more than one index; with kv_start
     * the row stride always) are even. Scale values are not checked. attn_sdpa reads such
     * caches on every path, packed sequences included (the forward only: the backward with a
     * quantized kv_type is ATTN_UNSUPPORTED); attn_quantize writes them.
     * Numerics: scores are the exact products of q with the dequantized values summed in f32,
     * the rest as for 16-bit caches; the error against float64 on the dequantized values is at
     * most twice that of a plain f32 computation, plus a few units in the last place of
     * out_type. Every code of every quantized type is a bf16 value, so with bf16 q and a bf16
     * output (or under ATTN_FPMATH_BF16), one scale a row (group 0 or the whole row: per row,
     * per head, per tensor) and no zero points, the products may be formed from bf16 pairs of
     * the codes: a score is the row's K scale times the exact products of q with its codes, and
     * P times the row's V scale is rounded to bf16 before P V (the plain computation the rule
     * compares with then rounds P too). */
    const float *k_scale;          /* required for the integer types; FP8: NULL means 1          */
    const float *v_scale;
    const float *k_zero;           /* optional zero points, integer types only; NULL means 0     */
    const float *v_zero;
    attn_layout k_scale_strides;   /* in floats: .batch (per page with block_table; unused with
                                      kv_start), .head (kv head), .seq (key row); 0 broadcasts  */
    attn_layout v_scale_strides;
    int64_t k_group;               /* elements of a K row sharing one scale, dividing dim_qk;
                                      0 = dim_qk (one scale per row)                            */
    int64_t v_group;               /* likewise for V over dim_v                                  */
} attn_sdpa_desc;

/* Dense BHSD layouts, heads_q = heads_kv = heads, dim_qk = dim_v = dim, scale 1/sqrt(dim),
 * no mask, no causal, no kv_len, no dropout, no weights, no lse, every type ATTN_DTYPE_F32,
 * windows -1, softcap 0, no ALiBi, no sinks, no paging, no packed sequences, no scales or zero
 * points (strides and groups 0). */
void attn_sdpa_desc_init(attn_sdpa_desc *d, int64_t batch, int64_t heads,
                         int64_t len_q, int64_t len_kv, int64_t dim);

/* out[b,h,i,:] = sum_j A[b,h,i,j] * v[b,h',j,:], A = softmax_j(scale * q.k + mask), with
 * causal and kv_len masking and dropout as described in attn_sdpa_desc.
 * Grouped-query attention: heads_q % heads_kv == 0, query head h reads key/value head
 * h' = h / (heads_q / heads_kv). A fully masked row gives an output row of zeros (never NaN).
 * Special scores: the score s = scale * (q . k) + mask of a visible key is a float. A score
 * of -inf gets weight 0 (every visible score -inf: an output row of zeros, lse -INFINITY); a
 * score of +inf or NaN makes the row's output and lse NaN. A negative scale flips the sign of
 * an infinite dot product first: an infinite q or k, a +INFINITY mask entry or an overflow
 * can each give +inf. (Unlike attn_softmax_f32, +inf scores do not share the weight.)
 * A key hidden from a row by causal or kv_len masking is never read for that row; any other
 * key contributes A * v even when its weight is 0 (mask -inf, dropped), so a NaN in its v row
 * reaches the output (except, with split-key decoding, where a whole key chunk of the row is
 * masked by -inf).
 * Range: the SIMD paths sum e^(s_j - m) v_j over the keys before dividing by the softmax's
 * sum l >= 1 (as FlashAttention does), so V values within a factor l of FLT_MAX can give inf
 * where the reference, which divides first, stays finite.
 * out must not overlap q, k, v, weights or lse. Without weights, memory use stays
 * O(len * dim): the len_q x len_kv matrix is never built. */
attn_status attn_sdpa_f32(attn_context *ctx, const attn_sdpa_desc *d,
                          const float *q, const float *k, const float *v, float *out);

/* attn_sdpa_f32 with element types: q is an array of d->q_type, k and v of d->kv_type, out
 * of d->out_type (strides in elements of those types). Every combination of F32, BF16 and
 * F16 is accepted (a quantized kv_type: see attn_sdpa_desc; a quantized q_type or out_type is
 * rejected); a type outside the enum is ATTN_INVALID_ARGUMENT naming the field.
 * attn_sdpa_f32 is this call restricted to three F32 types (any other type there:
 * ATTN_INVALID_ARGUMENT naming the field). Numerics with 16-bit inputs: scores are the exact products of the stored values
 * summed in f32; softmax in f32; P may be rounded to bf16 before P V only when V is bf16 or
 * under ATTN_FPMATH_BF16 (a quantized V: see attn_sdpa_desc), and where it is, P's exponential
 * may be taken to 3e-6 relative (the bf16 rounding that follows is up to 2e-3) with the row
 * sums formed from the same values; the output accumulates in f32 and is rounded once to out_type.
 * Against a float64 computation on the same stored inputs the error is at most twice that
 * of a plain 16-bit computation (inputs as stored, products summed in f32, output rounded
 * once), plus a few units in the last place. */
attn_status attn_sdpa(attn_context *ctx, const attn_sdpa_desc *d,
                      const void *q, const void *k, const void *v, void *out);

/* Gradients of a scalar loss with respect to q, k, v given dout (layout of out), for the
 * same d (same mask, causal, dropout seed). lse is the forward's (NULL: recomputed). out is
 * the forward's output: every path takes each row's D = dout . out from it (FlashAttention's
 * delta, equal to sum_j P_j dP_j for the true output), so an out that is not the forward's
 * gives the gradients of that formula, the same on every path. A row that sees no key (a
 * sequence without keys, a window or causal limit past its keys, kv_len 0) takes no
 * gradient, d->dsinks included: its output, 0, depends on nothing.
 * dq, dk, dv use the layouts of q, k, v; with grouped-query attention dk and dv sum over
 * the query heads of a group. d->weights and d->lse are ignored (not written). */
attn_status attn_sdpa_backward_f32(attn_context *ctx, const attn_sdpa_desc *d,
                                   const float *q, const float *k, const float *v,
                                   const float *out, const float *dout, const float *lse,
                                   float *dq, float *dk, float *dv);

/* attn_sdpa_backward_f32 with element types: q and dq of d->q_type; k, v, dk and dv of
 * d->kv_type; out and dout of d->out_type (each F32, BF16 or F16; a type outside the enum is
 * ATTN_INVALID_ARGUMENT naming its field). lse and d->dsinks stay f32. With three F32 types
 * it equals attn_sdpa_backward_f32, bitwise. Gradients accumulate in f32 and are rounded
 * once to their type. P and dS may be rounded to bf16 before a product whose other operand
 * is stored in bf16 (dV = P^T dO when out_type is BF16; dQ = dS K when kv_type is BF16;
 * dK = dS^T Q when q_type is BF16) or under ATTN_FPMATH_BF16, never otherwise.
 * Accuracy: against float64 gradients on the same stored inputs, each gradient's normwise
 * error is at most twice that of a plain 16-bit backward (the same roundings, products summed
 * in f32, each gradient rounded once) plus one unit roundoff of the gradient's type. Every
 * option of attn_sdpa_backward_f32 works in every type. Where the level has bf16 products
 * (avx512_bf16: VDPBF16PS; amx: tiles), a dense batch whose q, k, v and out are all BF16, or
 * any dense batch under ATTN_FPMATH_BF16, is read as stored; other 16-bit tensors are widened
 * into f32 copies made for the call. */
attn_status attn_sdpa_backward(attn_context *ctx, const attn_sdpa_desc *d,
                               const void *q, const void *k, const void *v,
                               const void *out, const void *dout, const float *lse,
                               void *dq, void *dk, void *dv);

/* ------------------------------------------------------------------------- */
/* Multi-head attention                                                      */
/* ------------------------------------------------------------------------- */

typedef struct attn_mha_desc {
    int64_t batch, len_q, len_kv, d_model, heads, heads_kv, head_dim;
    const float *w_q, *w_k, *w_v, *w_o; /* nn.Linear layout [out, in]:
                                           w_q [heads*head_dim, d_model],
                                           w_k, w_v [heads_kv*head_dim, d_model],
                                           w_o [d_model, heads*head_dim] */
    const float *b_q, *b_k, *b_v, *b_o; /* optional biases, NULL = none */
    attn_causal causal;
    const int32_t *kv_len;              /* optional [batch] */
    float dropout_p;
    uint64_t dropout_seed;
} attn_mha_desc;

/* heads_kv = heads, head_dim = d_model / heads, no biases, no causal, no kv_len, no dropout. */
void attn_mha_desc_init(attn_mha_desc *d, int64_t batch, int64_t len_q, int64_t len_kv,
                        int64_t d_model, int64_t heads);

/* y = concat_h(SDPA(x_q W_q^T + b_q, x_kv W_k^T + b_k, x_kv W_v^T + b_v)) W_o^T + b_o,
 * the computation of PyTorch's nn.MultiheadAttention (batch_first=True) given the same
 * weights. x_q, y: [batch, len_q, d_model]; x_kv: [batch, len_kv, d_model], == x_q for
 * self-attention. All dense. */
attn_status attn_mha_forward_f32(attn_context *ctx, const attn_mha_desc *d,
                                 const float *x_q, const float *x_kv, float *y);

typedef struct attn_mha_grads {
    float *dw_q, *dw_k, *dw_v, *dw_o; /* same shapes as the weights; NULL = not wanted */
    float *db_q, *db_k, *db_v, *db_o;
} attn_mha_grads;

/* Gradients given dy [batch, len_q, d_model]. dx_q: [batch, len_q, d_model], dx_kv:
 * [batch, len_kv, d_model]; NULL = not wanted. For self-attention (x_kv == x_q) dx_kv may be
 * NULL and dx_q then holds the whole gradient; with x_kv == x_q but len_kv != len_q, dx_q
 * given and dx_kv NULL is rejected (ATTN_INVALID_ARGUMENT), as the key/value part would be
 * lost. Gradients are written, not accumulated. */
attn_status attn_mha_backward_f32(attn_context *ctx, const attn_mha_desc *d,
                                  const float *x_q, const float *x_kv, const float *dy,
                                  float *dx_q, float *dx_kv, const attn_mha_grads *g);

/* ------------------------------------------------------------------------- */
/* Merging partial results (split keys)                                      */
/* ------------------------------------------------------------------------- */

/* Given attention outputs outs[p] ([rows, dim_v], dense) and their lses[p] ([rows])
 * computed over disjoint sets of keys, writes the attention over the union:
 *   lse = log sum_p exp(lses[p]),  out = sum_p exp(lses[p] - lse) * outs[p].
 * A row whose every lses[p] is -INFINITY gives zeros and lse -INFINITY; a NaN in any lses[p]
 * of a row (a part whose row is NaN) makes that row's out and lse NaN. lse may be NULL. */
attn_status attn_merge_f32(attn_context *ctx, int64_t parts, int64_t rows, int64_t dim_v,
                           const float *const *outs, const float *const *lses,
                           float *out, float *lse);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTN_ATTN_H */
