"""quantize: rows of float32, float16 or bfloat16 (uint16 bits) into a quantized K/V type."""
import ctypes

import numpy as np

from . import _lib, _tensors
from ._context import handle

# dtype name -> (NumPy type of the codes, elements per byte)
_QUANTIZED = {"i8": (np.int8, 1), "u8": (np.uint8, 1), "i4": (np.uint8, 2),
              "u4": (np.uint8, 2), "fp8_e4m3": (np.uint8, 1), "fp8_e5m2": (np.uint8, 1)}
_SOURCES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.uint16): "bf16"}


def quantize(x, dtype, group=0, zero_point=False, ctx=None):
    """attn_quantize over the last axis of x: returns (q, scale, zero).

    x: [..., dim] float32, float16, or uint16 (bfloat16 bit patterns); other float arrays are
    converted to float32. dtype: "i8", "u8", "i4", "u4", "fp8_e4m3" or "fp8_e5m2". group:
    elements sharing a scale, dividing dim (0: the whole row). zero_point: asymmetric (integer
    types only; "u8" and "u4" need it). q: int8 ("i8") or uint8 codes of shape [..., dim]; for
    the 4-bit types, uint8 bytes of shape [..., dim // 2] (element 2c in the low nibble of byte
    c, as signed nibbles for "i4"); the FP8 types' codes are their bit patterns. scale, zero:
    float32 [..., dim // group] (zero is None without zero_point). A value of q stands for
    scale * (q - zero) (integers) or scale * fp8(q). NaN or infinity in x raises AttnError."""
    if not _lib.has("attn_quantize"):
        raise NotImplementedError("the loaded libattn has no attn_quantize")
    if dtype not in _QUANTIZED:
        raise ValueError("quantize: dtype = %r, must be one of %s" % (dtype, sorted(_QUANTIZED)))
    x = np.asarray(x)
    if x.dtype not in _SOURCES:
        x = x.astype(np.float32)
    if x.ndim == 0:
        raise ValueError("quantize: x must have at least one dimension")
    x = np.ascontiguousarray(x)
    dim = x.shape[-1]
    group = int(group)
    groups = 1 if group == 0 else (dim // group if group > 0 else 0)
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    code_type, per_byte = _QUANTIZED[dtype]
    q = np.zeros(x.shape[:-1] + (dim // per_byte,), code_type)
    scale = np.zeros(x.shape[:-1] + (groups,), np.float32)
    zero = np.zeros_like(scale) if zero_point else None
    _lib.call("attn_quantize", handle(ctx), rows, dim, _tensors.ptr(x), _lib.DTYPE[_SOURCES[x.dtype]],
              dim, _tensors.ptr(q), _lib.DTYPE[dtype], dim, _tensors.ptr(scale),
              _tensors.ptr(zero) if zero_point else None, groups, group)
    return q, scale, zero


_KV_TYPES = {"i8": 3, "u8": 4, "i4": 5, "u4": 6, "fp8_e4m3": 7, "fp8_e5m2": 8}


def _scale_view(s, B, H, L, groups, name):
    """A float32 [B, H, L, groups] view of s (broadcast, strides 0 where it repeats), and its
    strides in floats."""
    a = np.asarray(s, np.float32)
    if not a.flags.c_contiguous and not any(st == 0 for st in a.strides):
        a = np.ascontiguousarray(a)
    try:
        a = np.broadcast_to(a, (B, H, L, groups))
    except ValueError:
        raise ValueError("%s must broadcast to [%d, %d, %d, %d], got %s"
                         % (name, B, H, L, groups, np.shape(s)))
    strides = tuple(st // 4 for st in a.strides)
    if strides[3] != 1 and groups > 1:
        a = np.ascontiguousarray(a)
        strides = tuple(st // 4 for st in a.strides)
    return a, strides


def sdpa_quantized(q, k, v, dtype, k_scale, v_scale=None, k_zero=None, v_zero=None,
                   causal=False, scale=None, kv_len=None, return_lse=False, ctx=None):
    """attn_sdpa over a quantized K/V cache, BHSD: out [B, Hq, Lq, Dv] (float32).

    q: float32 [B, Hq, Lq, D]. k, v: the codes as quantize() returns them, [B, Hkv, Lk, D] and
    [B, Hkv, Lk, Dv] (for "i4" and "u4" uint8 bytes [..., D // 2], [..., Dv // 2]). dtype: one
    of "i8", "u8", "i4", "u4", "fp8_e4m3", "fp8_e5m2". k_scale, v_scale (and k_zero, v_zero):
    float32 arrays broadcastable to [B, Hkv, Lk, groups] (groups scales per row, each for
    D // groups elements): quantize()'s scales as they are, or e.g. [1, 1, 1, D] (per
    channel), [1, Hkv, 1, 1] (per head), a scalar (per tensor); FP8 may pass None (scale 1).
    An element stands for scale * (q - zero) (integers) or scale * fp8(q). causal, scale,
    kv_len as for sdpa. Returns out, and lse [B, Hq, Lq] if return_lse."""
    from ._sdpa import _causal, _set_layout
    if dtype not in _KV_TYPES:
        raise ValueError("sdpa_quantized: dtype = %r, must be one of %s" % (dtype, sorted(_KV_TYPES)))
    per_byte = _QUANTIZED[dtype][1]
    q = _tensors.prepare(np.asarray(q, np.float32), name="q")
    k = np.ascontiguousarray(k).view(np.uint8)
    v = np.ascontiguousarray(v).view(np.uint8)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("sdpa_quantized: q, k, v must be 4-D (BHSD)")
    B, Hq, Lq, D = q.shape
    _, Hkv, Lk, _ = k.shape
    Dv = v.shape[3] * per_byte
    if k.shape[0] != B or k.shape[3] * per_byte != D or v.shape[:3] != k.shape[:3]:
        raise ValueError("sdpa_quantized: k must be [%d, heads_kv, len_kv, %d] codes and v share "
                         "its first three dimensions" % (B, D // per_byte))
    d = _lib.attn_sdpa_desc()
    _lib.lib().attn_sdpa_desc_init(ctypes.byref(d), B, Hq, Lq, Lk, D)
    d.heads_kv, d.dim_v, d.kv_type = Hkv, Dv, _KV_TYPES[dtype]
    _set_layout(d.q, q)
    d.k.batch, d.k.head, d.k.seq = Hkv * Lk * D, Lk * D, D
    d.v.batch, d.v.head, d.v.seq = Hkv * Lk * Dv, Lk * Dv, Dv
    if scale is not None:
        d.scale = float(scale)
    d.causal = _causal(causal)
    keep = []
    for side, dim, s, z in (("k", D, k_scale, k_zero), ("v", Dv, v_scale, v_zero)):
        if s is None:
            if z is not None:
                raise ValueError("sdpa_quantized: %s_zero without %s_scale" % (side, side))
            continue
        groups = np.shape(s)[-1] if np.ndim(s) else 1
        sa, st = _scale_view(s, B, Hkv, Lk, groups, side + "_scale")
        if z is not None:  # the zero points share the scales' layout: both dense
            sa = np.ascontiguousarray(sa)
            za = np.ascontiguousarray(_scale_view(z, B, Hkv, Lk, groups, side + "_zero")[0])
            st = tuple(x // 4 for x in sa.strides)
            keep.append(za)
            setattr(d, side + "_zero", _tensors.ptr(za))
        keep.append(sa)
        setattr(d, side + "_scale", _tensors.ptr(sa))
        lay = getattr(d, side + "_scale_strides")
        lay.batch, lay.head, lay.seq = st[0], st[1], st[2]
        setattr(d, side + "_group", dim // groups if groups and dim % groups == 0 else -1)
    if kv_len is not None:
        kl = np.ascontiguousarray(kv_len, dtype=np.int32)
        keep.append(kl)
        d.kv_len = _tensors.ptr(kl)
    out = np.empty((B, Hq, Lq, Dv), np.float32)
    _set_layout(d.out, out)
    lse = np.empty((B, Hq, Lq), np.float32) if return_lse else None
    d.lse = _tensors.ptr(lse)
    _lib.call("attn_sdpa", handle(ctx), ctypes.byref(d), _tensors.ptr(q), _tensors.ptr(k),
              _tensors.ptr(v), _tensors.ptr(out))
    return (out, lse) if return_lse else out
