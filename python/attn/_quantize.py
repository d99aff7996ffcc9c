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


def kv_type(k, kv_dtype, scales):
    """The quantized type name of a K/V cache given to sdpa, or None for a float cache.
    kv_dtype None: int8 codes are "i8"; uint8 codes need kv_dtype (they may be any type)."""
    if kv_dtype is None:
        kd = np.asarray(k).dtype
        if kd == np.int8:
            return "i8"
        if kd == np.uint8:
            raise ValueError("uint8 k and v: give kv_dtype, one of %s" % sorted(_KV_TYPES))
        if any(x is not None for x in scales):
            raise ValueError("k_scale, v_scale, k_zero, v_zero need a quantized cache (kv_dtype)")
        return None
    if kv_dtype not in _KV_TYPES:
        raise ValueError("kv_dtype = %r, must be one of %s" % (kv_dtype, sorted(_KV_TYPES)))
    return kv_dtype


def elements_per_byte(name):
    return _QUANTIZED[name][1]


def codes(a, name):
    """The codes of a quantized k or v as uint8, without a copy (int8 codes are viewed)."""
    a = np.asarray(a)
    if a.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise TypeError("%s: a quantized cache holds int8 or uint8 codes, got %s" % (name, a.dtype))
    return a.view(np.uint8)


def _scale_view(s, shape, layout, name):
    """A float32 [B, H, L, groups] view of s, given broadcastable to shape in the cache's
    layout (BSHD: [B, L, H, groups]), with strides 0 where it repeats; copied only when its
    strides are not whole non-negative floats or its groups are not contiguous."""
    a = np.asarray(s, np.float32)
    try:
        a = np.broadcast_to(a, shape if layout == "bhsd" else (shape[0], shape[2], shape[1], shape[3]))
    except ValueError:
        raise ValueError("%s must broadcast to %s (%s), got %s"
                         % (name, list(shape), layout.upper(), np.shape(s)))
    if layout == "bshd":
        a = a.transpose(0, 2, 1, 3)
    st = a.strides
    if any(x < 0 or x % 4 for x in st) or (shape[3] > 1 and st[3] != 4):
        a = np.ascontiguousarray(a)
    return a


def set_scales(d, keep, name, layout, k_scale, v_scale, k_zero, v_zero):
    """The quantized cache's fields of descriptor d: kv_type, scales, zero points, their
    strides and groups (groups = the scales' last dim; elements per scale = dim // groups)."""
    d.kv_type = _KV_TYPES[name]
    for side, dim, s, z in (("k", d.dim_qk, k_scale, k_zero), ("v", d.dim_v, v_scale, v_zero)):
        if s is None:
            if z is not None:
                raise ValueError("%s_zero without %s_scale" % (side, side))
            continue  # FP8 without scales: 1 (the library rejects it for the integer types)
        groups = np.shape(s)[-1] if np.ndim(s) else 1
        if groups < 1 or dim % groups:
            raise ValueError("%s_scale: %d groups do not divide the dim %d" % (side, groups, dim))
        shape = (d.batch, d.heads_kv, d.len_kv, groups)
        sa = _scale_view(s, shape, layout, side + "_scale")
        if z is not None:  # the zero points share the scales' strides
            za = _scale_view(z, shape, layout, side + "_zero")
            if za.strides != sa.strides:
                sa, za = np.ascontiguousarray(sa), np.ascontiguousarray(za)
            keep.append(za)
            setattr(d, side + "_zero", _tensors.ptr(za))
        keep.append(sa)
        setattr(d, side + "_scale", _tensors.ptr(sa))
        lay = getattr(d, side + "_scale_strides")
        lay.batch, lay.head, lay.seq = (0 if n <= 1 else x // 4 for n, x in zip(shape, sa.strides[:3]))
        setattr(d, side + "_group", dim // groups)


def sdpa_quantized(q, k, v, dtype, k_scale, v_scale=None, k_zero=None, v_zero=None,
                   causal=False, scale=None, kv_len=None, return_lse=False, ctx=None):
    """attn.sdpa over a quantized K/V cache (kept for existing callers): the same as
    sdpa(q, k, v, kv_dtype=dtype, k_scale=k_scale, v_scale=v_scale, k_zero=k_zero,
    v_zero=v_zero, causal=causal, scale=scale, kv_len=kv_len, return_lse=return_lse, ctx=ctx)
    with q as float32; see sdpa."""
    from ._sdpa import sdpa
    if dtype not in _KV_TYPES:
        raise ValueError("sdpa_quantized: dtype = %r, must be one of %s" % (dtype, sorted(_KV_TYPES)))
    return sdpa(np.asarray(q, np.float32), k, v, causal=causal, scale=scale, kv_len=kv_len,
                return_lse=return_lse, ctx=ctx, kv_dtype=dtype, k_scale=k_scale,
                v_scale=v_scale, k_zero=k_zero, v_zero=v_zero)
