"""attn: scaled dot-product and multi-head attention on CPUs (libattn through ctypes).

NumPy arrays in and out (float32). Set ATTN_LIBRARY to the path of libattn.so if it is not
next to this package nor on the linker's path. Every function takes ctx=None (the library's
default context) or an attn.Context. Errors of the library raise attn.AttnError."""
from ._lib import AttnError, has as _has, library_path
from ._context import Context, default_isa
from ._basic import version, gemm, softmax, merge
from ._sdpa import sdpa, sdpa_backward
from ._mha import mha_forward, mha_backward

__version__ = "0.3.0"
__all__ = ["AttnError", "Context", "version", "gemm", "softmax", "merge", "sdpa",
           "sdpa_backward", "mha_forward", "mha_backward", "library_path", "default_isa",
           "has_typed"]


def has_typed():
    """True if the loaded library exports attn_convert and the typed attn_sdpa: then
    convert() exists and sdpa takes float16 and bfloat16-as-uint16 arrays."""
    return _has("attn_convert") and _has("attn_sdpa")


def __getattr__(name):
    # convert() exists only when the loaded library exports attn_convert.
    if name == "convert" and _has("attn_convert"):
        from ._basic import convert
        return convert
    raise AttributeError("module 'attn' has no attribute %r" % name)
