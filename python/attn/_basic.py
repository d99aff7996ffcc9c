"""version, gemm, softmax, merge, convert."""
import ctypes

import numpy as np

from . import _lib, _tensors
from ._context import handle

_CONVERT_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


def version():
    """The version of the loaded libattn, e.g. "0.3.0"."""
    return _lib.lib().attn_version().decode()


def _matrix(a, name):
    """(row-major float32 matrix, its leading dim, transposed?) for a 2-D array, no copy for
    a row-major or a column-major (transposed) view with a contiguous dim."""
    a = np.asarray(a)
    if a.ndim != 2:
        raise ValueError("%s must be 2-D, got shape %s" % (name, a.shape))
    if a.dtype == np.float32 and a.shape[1] > 1 and a.shape[0] > 1 and a.strides[0] == 4 \
            and a.strides[1] % 4 == 0 and a.strides[1] > 0:
        return a.T, a.strides[1] // 4, True  # a column-major view: its transpose is row-major
    a = _tensors.prepare(a, name=name)
    ld = a.strides[0] // 4 if a.shape[0] > 1 else a.shape[1]
    return a, max(ld, a.shape[1], 1), False


# numpy dtype -> attn_dtype (bf16 travels as uint16 bit patterns)
_GEMM_TYPES = {np.dtype(np.float32): 0, np.dtype(np.uint16): 1, np.dtype(np.float16): 2}


def _gemm_typed(a, b, trans_a, trans_b, alpha, beta, c, c_dtype, ctx):
    """attn_gemm: a, b, c of float32, float16 or uint16 (bf16 bits), row-major views."""
    if not _lib.has("attn_gemm"):
        raise NotImplementedError("the loaded libattn has no attn_gemm (typed GEMM)")
    mats = []
    for x, name in ((a, "a"), (b, "b")):
        x = np.asarray(x)
        if x.ndim != 2 or x.dtype not in _GEMM_TYPES:
            raise ValueError("gemm: %s must be a 2-D float32, float16 or uint16 (bf16) array" % name)
        x = _tensors.prepare(x, x.dtype, name)
        ld = x.strides[0] // x.itemsize if x.shape[0] > 1 else x.shape[1]
        mats.append((x, max(ld, x.shape[1], 1)))
    (am, lda), (bm, ldb) = mats
    m, k = (am.shape[1], am.shape[0]) if trans_a else am.shape
    k2, n = (bm.shape[1], bm.shape[0]) if trans_b else bm.shape
    if k != k2:
        raise ValueError("gemm: op(a) is [%d, %d] but op(b) is [%d, %d]" % (m, k, k2, n))
    if c is None:
        c, beta = np.zeros((m, n), np.dtype(c_dtype or np.float32)), 0.0
    if not (isinstance(c, np.ndarray) and c.dtype in _GEMM_TYPES and c.shape == (m, n)
            and (n <= 1 or c.strides[1] == c.itemsize) and c.strides[0] % c.itemsize == 0):
        raise ValueError("gemm: c must be a float32, float16 or uint16 [%d, %d] array with a "
                         "contiguous last dim" % (m, n))
    ldc = max(c.strides[0] // c.itemsize if m > 1 else n, n, 1)
    _lib.call("attn_gemm", handle(ctx), int(bool(trans_a)), int(bool(trans_b)), m, n, k,
              float(alpha), _tensors.ptr(am), _GEMM_TYPES[am.dtype], lda, _tensors.ptr(bm),
              _GEMM_TYPES[bm.dtype], ldb, float(beta), _tensors.ptr(c), _GEMM_TYPES[c.dtype], ldc)
    return c


def gemm(a, b, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, c=None, ctx=None,
         c_dtype=None):
    """C = alpha * op(A) @ op(B) + beta * C, op(X) = X.T if trans_x else X.

    a: [m, k] ([k, m] with trans_a), b: [k, n] ([n, k] with trans_b), 2-D, any strides with one
    contiguous dimension (a transposed float32 view is passed as such, without a copy). c:
    optional [m, n] with a contiguous last dimension, written in place and returned; None: a
    new array of c_dtype (default float32; beta is then irrelevant). float32 throughout runs
    attn_gemm_f32; float16 or bfloat16-as-uint16 a, b or c run the typed attn_gemm (products
    summed in f32, C rounded once to its type)."""
    typed = any(np.asarray(x).dtype != np.float32 for x in (a, b)) or (
        c is not None and np.asarray(c).dtype != np.float32) or (
        c is None and c_dtype not in (None, np.float32))
    if typed:
        return _gemm_typed(a, b, trans_a, trans_b, alpha, beta, c, c_dtype, ctx)
    am, lda, ta = _matrix(a, "a")
    bm, ldb, tb = _matrix(b, "b")
    ta, tb = bool(trans_a) ^ ta, bool(trans_b) ^ tb
    m, k = (am.shape[1], am.shape[0]) if ta else am.shape
    k2, n = (bm.shape[1], bm.shape[0]) if tb else bm.shape
    if k != k2:
        raise ValueError("gemm: op(a) is [%d, %d] but op(b) is [%d, %d]" % (m, k, k2, n))
    if c is None:
        c, beta = np.zeros((m, n), np.float32), 0.0
    elif not (isinstance(c, np.ndarray) and c.dtype == np.float32 and c.shape == (m, n)
              and (n <= 1 or c.strides[1] == 4) and c.strides[0] >= 0 and c.strides[0] % 4 == 0):
        raise ValueError("gemm: c must be a float32 [%d, %d] array with a contiguous last dim"
                         % (m, n))
    ldc = max(c.strides[0] // 4 if m > 1 else n, n, 1)
    _lib.call("attn_gemm_f32", handle(ctx), int(ta), int(tb), m, n, k, float(alpha),
              _tensors.ptr(am), lda, _tensors.ptr(bm), ldb, float(beta), _tensors.ptr(c), ldc)
    return c


def softmax(x, scale=1.0, out=None, ctx=None):
    """softmax(scale * x) along the last axis (float32). x: [..., n]; out: optional float32
    array of x's shape (may be x itself: in place), returned. A 2-D x with a contiguous last
    dim is used in place of a copy; other shapes are made contiguous."""
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("softmax: x must have at least one dimension")
    shape = x.shape
    x2 = _tensors.prepare(x if x.ndim == 2 else np.ascontiguousarray(x).reshape(-1, shape[-1]),
                          name="x")
    if out is None:
        o2, result = np.empty(x2.shape, np.float32), None
    else:
        if not (isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == shape):
            raise ValueError("softmax: out must be a float32 array of shape %s" % (shape,))
        o2 = out if out.ndim == 2 else out.reshape(-1, shape[-1])  # raises if not viewable
        if not _tensors._fits(o2):
            raise ValueError("softmax: out must have a contiguous last dimension")
        result = out
    rows, cols = x2.shape
    ldx = max(x2.strides[0] // 4 if rows > 1 else cols, cols, 1)
    ldy = max(o2.strides[0] // 4 if rows > 1 else cols, cols, 1)
    _lib.call("attn_softmax_f32", handle(ctx), rows, cols, float(scale), _tensors.ptr(x2), ldx,
              _tensors.ptr(o2), ldy)
    return o2.reshape(shape) if result is None else result


def merge(outs, lses, ctx=None):
    """Attention over the union of disjoint key sets from the parts' outputs and lses.

    outs: sequence of P arrays [..., dim_v] (same shape), lses: P arrays of shape outs[0].shape[:-1]
    (natural-log logsumexp, as sdpa(..., return_lse=True) gives). Returns (out, lse)."""
    if len(outs) != len(lses) or not outs:
        raise ValueError("merge: need as many outs as lses, at least one")
    outs = [np.ascontiguousarray(o, dtype=np.float32) for o in outs]
    lses = [np.ascontiguousarray(s, dtype=np.float32) for s in lses]
    shape = outs[0].shape
    for o, s in zip(outs, lses):
        if o.shape != shape or s.shape != shape[:-1]:
            raise ValueError("merge: outs must share a shape [..., dim_v] and lses be [...]")
    dim_v = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    P = ctypes.c_void_p * len(outs)
    out, lse = np.empty(shape, np.float32), np.empty(shape[:-1], np.float32)
    _lib.call("attn_merge_f32", handle(ctx), len(outs), rows, dim_v,
              P(*[o.ctypes.data for o in outs]), P(*[s.ctypes.data for s in lses]),
              _tensors.ptr(out), _tensors.ptr(lse))
    return out, lse


def convert(x, dtype, ctx=None):
    """x converted by attn_convert (round to nearest even). dtype: "f32" | "f16" | "bf16".
    float32 and float16 arrays are themselves; "bf16" values are uint16 arrays of bit
    patterns (a uint16 input is read as bf16). Returns a new array of x's shape."""
    if not _lib.has("attn_convert"):
        raise NotImplementedError("the loaded libattn has no attn_convert")
    x = np.asarray(x)
    src = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
           np.dtype(np.uint16): "bf16"}.get(x.dtype)
    if src is None:
        x, src = x.astype(np.float32), "f32"
    if dtype not in _CONVERT_DTYPES:
        raise ValueError("convert: dtype = %r, must be 'f32', 'f16' or 'bf16'" % (dtype,))
    x = np.ascontiguousarray(x)
    out = np.empty(x.shape, _CONVERT_DTYPES[dtype])
    _lib.call("attn_convert", handle(ctx), x.size, _tensors.ptr(x), _lib.DTYPE[src],
              _tensors.ptr(out), _lib.DTYPE[dtype])
    return out
