"""quantize: rows of float32, float16 or bfloat16 (uint16 bits) into a quantized K/V type."""
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
