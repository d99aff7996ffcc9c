"""attn.Context: an attn_context (implementation, instruction set, threads, fpmath)."""
import ctypes

from . import _lib


def _choice(table, value, what):
    if value not in table:
        raise ValueError("%s = %r, must be one of %s" % (what, value, ", ".join(map(repr, table))))
    return table[value]


class Context:
    """An attn_context. impl: "auto" | "reference" | "simd"; isa: "auto" | "scalar" | "sse4" |
    "avx2" | "avx512" | "avx512_bf16" | "amx" | "amx_emulated" (a cap; above the CPU's: AttnError
    ATTN_UNSUPPORTED); threads: 0 = all hardware threads, n = at most n; fpmath: "strict" |
    "bf16". Close it with close() or use it as a context manager (`with attn.Context() as c`).
    Every function of the module takes ctx=None: None is the library's default context."""

    def __init__(self, impl="auto", isa="auto", threads=0, fpmath="strict"):
        self._handle = None
        cfg = _lib.attn_config()
        _lib.lib().attn_config_init(ctypes.byref(cfg))
        cfg.impl = _choice(_lib.IMPL, impl, "impl")
        cfg.max_isa = _choice(_lib.ISA, isa, "isa")
        cfg.num_threads = int(threads)
        cfg.fpmath = _choice(_lib.FPMATH, fpmath, "fpmath")
        handle = ctypes.c_void_p()
        _lib.call("attn_context_create", ctypes.byref(cfg), ctypes.byref(handle))
        self._handle = handle
        self.impl, self.fpmath = impl, fpmath

    @property
    def handle(self):
        """The attn_context * (a ctypes.c_void_p); ValueError once closed."""
        if self._handle is None:
            raise ValueError("attn.Context is closed")
        return self._handle

    @property
    def isa(self):
        """The instruction set its kernels use, e.g. "avx2" ("scalar" for the reference)."""
        return _lib.lib().attn_context_isa(self.handle).decode()

    @property
    def num_threads(self):
        return _lib.lib().attn_context_num_threads(self.handle)

    def close(self):
        if self._handle is not None:
            _lib.lib().attn_context_destroy(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        if self._handle is None:
            return "attn.Context(closed)"
        return "attn.Context(impl=%r, isa=%r, threads=%d, fpmath=%r)" % (
            self.impl, self.isa, self.num_threads, self.fpmath)


def handle(ctx):
    """The attn_context * for ctx (None: NULL, the default context)."""
    if ctx is None:
        return None
    if not isinstance(ctx, Context):
        raise TypeError("ctx must be an attn.Context or None, not %s" % type(ctx).__name__)
    return ctx.handle


def default_isa():
    """The instruction set of the default context."""
    return _lib.lib().attn_context_isa(None).decode()
