"""Loading libattn.so and declaring its C API (include/attn/attn.h) for ctypes.

The library is looked up, in order, at the path in the ATTN_LIBRARY environment variable,
next to this package (attn/libattn.so, or the directory above it), then through
ctypes.util.find_library("attn"). It is loaded on first use, so `import attn` works without it.
"""
import ctypes
import ctypes.util
import os
import threading

c_int64_p = ctypes.POINTER(ctypes.c_int64)

# attn_status values, by name.
STATUS_NAMES = {0: "ATTN_OK", 1: "ATTN_INVALID_ARGUMENT", 2: "ATTN_OUT_OF_MEMORY",
                3: "ATTN_UNSUPPORTED", 4: "ATTN_INTERNAL_ERROR"}
IMPL = {"auto": 0, "reference": 1, "simd": 2}
ISA = {"auto": 0, "scalar": 1, "sse4": 2, "avx2": 3, "avx512": 4, "avx512_bf16": 5, "amx": 6}
FPMATH = {"strict": 0, "bf16": 1}
CAUSAL = {"none": 0, "top_left": 1, "bottom_right": 2, "bottom_right_kv_len": 3}
DTYPE = {"f32": 0, "bf16": 1, "f16": 2}


class AttnError(RuntimeError):
    """A call into libattn returned a status other than ATTN_OK.

    Attributes: status (int), status_name (e.g. "ATTN_INVALID_ARGUMENT"), function (the C
    function called) and message (attn_last_error(): names the argument and its value)."""

    def __init__(self, status, function, message):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, "ATTN_STATUS_%d" % status)
        self.function = function
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message or function))


# Structures, field for field in the order of attn.h (tests/test_structs.py checks this).
class attn_config(ctypes.Structure):
    _fields_ = [("impl", ctypes.c_int), ("max_isa", ctypes.c_int),
                ("num_threads", ctypes.c_int), ("fpmath", ctypes.c_int)]


class attn_layout(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int64), ("head", ctypes.c_int64), ("seq", ctypes.c_int64)]


class attn_sdpa_desc(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in
                ("batch", "heads_q", "heads_kv", "len_q", "len_kv", "dim_qk", "dim_v")] + [
        ("q", attn_layout), ("k", attn_layout), ("v", attn_layout), ("out", attn_layout),
        ("scale", ctypes.c_float), ("causal", ctypes.c_int),
        ("mask", ctypes.c_void_p), ("mask_strides", attn_layout),
        ("kv_len", ctypes.c_void_p), ("dropout_p", ctypes.c_float),
        ("dropout_seed", ctypes.c_uint64), ("weights", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("q_type", ctypes.c_int), ("kv_type", ctypes.c_int), ("out_type", ctypes.c_int),
        ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_float), ("alibi_slopes", ctypes.c_void_p),
        ("sinks", ctypes.c_void_p), ("dsinks", ctypes.c_void_p),
        ("block_table", ctypes.c_void_p), ("block_table_stride", ctypes.c_int64),
        ("page_size", ctypes.c_int64), ("num_pages", ctypes.c_int64),
        ("q_start", ctypes.c_void_p), ("kv_start", ctypes.c_void_p),
        ("k_scale", ctypes.c_void_p), ("v_scale", ctypes.c_void_p),
        ("k_zero", ctypes.c_void_p), ("v_zero", ctypes.c_void_p),
        ("k_scale_strides", attn_layout), ("v_scale_strides", attn_layout),
        ("k_group", ctypes.c_int64), ("v_group", ctypes.c_int64)]


class attn_mha_desc(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in
                ("batch", "len_q", "len_kv", "d_model", "heads", "heads_kv", "head_dim")] + [
        (n, ctypes.c_void_p) for n in
        ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")] + [
        ("causal", ctypes.c_int), ("kv_len", ctypes.c_void_p),
        ("dropout_p", ctypes.c_float), ("dropout_seed", ctypes.c_uint64)]


class attn_mha_grads(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in
                ("dw_q", "dw_k", "dw_v", "dw_o", "db_q", "db_k", "db_v", "db_o")]


_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_F = ctypes.c_float
_INT = ctypes.c_int
# name: (restype, argtypes). Optional ones (0.2 typed calls) are bound only if exported.
_PROTOTYPES = {
    "attn_version": (ctypes.c_char_p, []),
    "attn_status_string": (ctypes.c_char_p, [_INT]),
    "attn_last_error": (ctypes.c_char_p, []),
    "attn_config_init": (None, [ctypes.POINTER(attn_config)]),
    "attn_context_create": (_INT, [ctypes.POINTER(attn_config), ctypes.POINTER(_P)]),
    "attn_context_destroy": (None, [_P]),
    "attn_context_isa": (ctypes.c_char_p, [_P]),
    "attn_context_num_threads": (_INT, [_P]),
    "attn_gemm_f32": (_INT, [_P, _INT, _INT, _I64, _I64, _I64, _F, _P, _I64, _P, _I64,
                             _F, _P, _I64]),
    "attn_softmax_f32": (_INT, [_P, _I64, _I64, _F, _P, _I64, _P, _I64]),
    "attn_sdpa_desc_init": (None, [ctypes.POINTER(attn_sdpa_desc), _I64, _I64, _I64, _I64,
                                   _I64]),
    "attn_sdpa_f32": (_INT, [_P, ctypes.POINTER(attn_sdpa_desc), _P, _P, _P, _P]),
    "attn_sdpa_backward_f32": (_INT, [_P, ctypes.POINTER(attn_sdpa_desc), _P, _P, _P, _P, _P,
                                      _P, _P, _P, _P]),
    "attn_mha_desc_init": (None, [ctypes.POINTER(attn_mha_desc), _I64, _I64, _I64, _I64,
                                  _I64]),
    "attn_mha_forward_f32": (_INT, [_P, ctypes.POINTER(attn_mha_desc), _P, _P, _P]),
    "attn_mha_backward_f32": (_INT, [_P, ctypes.POINTER(attn_mha_desc), _P, _P, _P, _P, _P,
                                     ctypes.POINTER(attn_mha_grads)]),
    "attn_merge_f32": (_INT, [_P, _I64, _I64, _I64, ctypes.POINTER(_P), ctypes.POINTER(_P),
                              _P, _P]),
}
OPTIONAL = {
    "attn_dtype_size": (ctypes.c_size_t, [_INT]),
    "attn_convert": (_INT, [_P, _I64, _P, _INT, _P, _INT]),
    "attn_sdpa": (_INT, [_P, ctypes.POINTER(attn_sdpa_desc), _P, _P, _P, _P]),
    "attn_gemm": (_INT, [_P, _INT, _INT, _I64, _I64, _I64, _F, _P, _INT, _I64, _P, _INT, _I64,
                         _F, _P, _INT, _I64]),
}

_lock = threading.Lock()
_lib = None


def _candidates():
    env = os.environ.get("ATTN_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(d, "libattn.so") for d in (here, os.path.dirname(here))]
    found = ctypes.util.find_library("attn")
    if found:
        out.append(found)
    return out


def library_path():
    """The path libattn was (or would be) loaded from."""
    return lib()._name


def lib():
    """The loaded libattn (a ctypes.CDLL with argtypes declared). Raises OSError if absent."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(path + " (absent)")
                continue
            try:
                cdll = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            for name, (res, args) in _PROTOTYPES.items():
                fn = getattr(cdll, name)
                fn.restype, fn.argtypes = res, args
            for name, (res, args) in OPTIONAL.items():
                try:
                    fn = getattr(cdll, name)
                except AttributeError:
                    continue
                fn.restype, fn.argtypes = res, args
            _lib = cdll
            return _lib
        raise OSError("libattn.so not found: set ATTN_LIBRARY to its path (build it with "
                      "cmake -DATTN_BUILD_SHARED=ON); tried: " + "; ".join(tried or ["nothing"]))


def has(name):
    """True if the loaded library exports the C function `name` (e.g. "attn_sdpa")."""
    try:
        return hasattr(lib(), name)
    except OSError:
        return False


def call(name, *args):
    """Calls the C function `name`; raises AttnError unless it returns ATTN_OK."""
    status = getattr(lib(), name)(*args)
    if status != 0:
        msg = lib().attn_last_error()
        raise AttnError(status, name, msg.decode("utf-8", "replace") if msg else "")
