"""mha_forward and mha_backward: nn.MultiheadAttention(batch_first=True) on NumPy arrays."""
import ctypes

import numpy as np

from . import _lib
from ._context import handle
from ._sdpa import _causal

_W = ("w_q", "w_k", "w_v", "w_o")
_B = ("b_q", "b_k", "b_v", "b_o")


def _f32(a):
    return None if a is None else np.ascontiguousarray(a, dtype=np.float32)


def _desc(x_q, x_kv, w, b, heads, heads_kv, causal, kv_len, dropout_p, dropout_seed):
    x_q = _f32(x_q)
    self_attn = x_kv is None or x_kv is x_q
    x_kv = x_q if self_attn else _f32(x_kv)
    if x_q.ndim != 3 or x_kv.ndim != 3 or x_kv.shape[0] != x_q.shape[0] \
            or x_kv.shape[2] != x_q.shape[2]:
        raise ValueError("x_q must be [B, Lq, d_model] and x_kv [B, Lk, d_model], got %s, %s"
                         % (x_q.shape, x_kv.shape))
    B, Lq, dm = x_q.shape
    d = _lib.attn_mha_desc()
    _lib.lib().attn_mha_desc_init(ctypes.byref(d), B, Lq, x_kv.shape[1], dm, int(heads))
    if heads_kv is not None:
        d.heads_kv = int(heads_kv)
    w = [_f32(a) for a in w]
    b = [_f32(a) for a in b]
    hd = d.head_dim  # 0 when heads does not divide d_model: the library rejects the call
    if hd >= 1 and d.heads >= 1 and d.heads_kv >= 1:
        wq, wkv = d.heads * hd, d.heads_kv * hd
        want = [(wq, dm), (wkv, dm), (wkv, dm), (dm, wq)]
        for name, a, shape in zip(_W, w, want):
            if a.shape != shape:
                raise ValueError("%s must be %s, got %s" % (name, list(shape), list(a.shape)))
        for name, a, n in zip(_B, b, (wq, wkv, wkv, dm)):
            if a is not None and a.shape != (n,):
                raise ValueError("%s must be [%d], got %s" % (name, n, list(a.shape)))
    for name, a in zip(_W + _B, w + b):
        setattr(d, name, None if a is None else a.ctypes.data)
    d.causal = _causal(causal)
    kl = None
    if kv_len is not None:
        kl = np.ascontiguousarray(kv_len, dtype=np.int32)
        if kl.shape != (B,):
            raise ValueError("kv_len must have shape [%d], got %s" % (B, kl.shape))
        d.kv_len = kl.ctypes.data
    d.dropout_p, d.dropout_seed = float(dropout_p), int(dropout_seed)
    return d, x_q, x_kv, self_attn, (w, b, kl)


def mha_forward(x_q, x_kv, w_q, w_k, w_v, w_o, b_q=None, b_k=None, b_v=None, b_o=None, *,
                heads, heads_kv=None, causal=False, kv_len=None, dropout_p=0.0, dropout_seed=0,
                ctx=None):
    """y = nn.MultiheadAttention(batch_first=True)(x_q, x_kv, x_kv) with the same weights.

    x_q: [B, Lq, d_model]; x_kv: [B, Lk, d_model], or None (or x_q itself) for self-attention.
    w_q: [heads*head_dim, d_model], w_k, w_v: [heads_kv*head_dim, d_model], w_o: [d_model,
    heads*head_dim] (nn.Linear [out, in]; head_dim = d_model // heads); in_proj_weight of
    PyTorch splits into w_q, w_k, w_v. Biases optional ([rows of their weight]). causal as for
    sdpa; kv_len: [B] ints (key padding: keys j >= kv_len[b] hidden). Returns y [B, Lq, d_model].
    Arrays are used as float32 and made contiguous (copied if they are not)."""
    d, x_q, x_kv, _, keep = _desc(x_q, x_kv, (w_q, w_k, w_v, w_o), (b_q, b_k, b_v, b_o), heads,
                                  heads_kv, causal, kv_len, dropout_p, dropout_seed)
    y = np.empty(x_q.shape, np.float32)
    _lib.call("attn_mha_forward_f32", handle(ctx), ctypes.byref(d), x_q.ctypes.data,
              x_kv.ctypes.data, y.ctypes.data)
    return y


def mha_backward(x_q, x_kv, w_q, w_k, w_v, w_o, b_q=None, b_k=None, b_v=None, b_o=None, *,
                 dy, heads, heads_kv=None, causal=False, kv_len=None, dropout_p=0.0,
                 dropout_seed=0, ctx=None):
    """Gradients of a loss given dy = dL/dy [B, Lq, d_model] for mha_forward's arguments.

    Returns a dict: "dx_q" [B, Lq, d_model]; "dx_kv" [B, Lk, d_model] (cross-attention only:
    for self-attention, x_kv None or x_q, dx_q is the whole gradient of x); "dw_q", "dw_k",
    "dw_v", "dw_o" (shapes of the weights); "db_q", ... for each bias given."""
    d, x_q, x_kv, self_attn, (w, b, _) = _desc(
        x_q, x_kv, (w_q, w_k, w_v, w_o), (b_q, b_k, b_v, b_o), heads, heads_kv, causal, kv_len,
        dropout_p, dropout_seed)
    dy = _f32(dy)
    if dy.shape != x_q.shape:
        raise ValueError("dy must be %s, got %s" % (list(x_q.shape), list(dy.shape)))
    res = {"dx_q": np.empty(x_q.shape, np.float32)}
    if not self_attn:
        res["dx_kv"] = np.empty(x_kv.shape, np.float32)
    g = _lib.attn_mha_grads()
    for name, a in zip(_W + _B, w + b):
        if a is not None:
            res["d" + name] = np.empty(a.shape, np.float32)
            setattr(g, "d" + name, res["d" + name].ctypes.data)
    _lib.call("attn_mha_backward_f32", handle(ctx), ctypes.byref(d), x_q.ctypes.data,
              x_kv.ctypes.data, dy.ctypes.data, res["dx_q"].ctypes.data,
              res["dx_kv"].ctypes.data if "dx_kv" in res else None, ctypes.byref(g))
    return res
