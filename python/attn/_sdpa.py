"""sdpa and sdpa_backward: scaled dot-product attention on NumPy arrays."""
import ctypes

import numpy as np

from . import _lib, _quantize, _tensors
from ._context import handle

# numpy dtype -> attn_dtype for the typed attn_sdpa (bf16 travels as uint16 bit patterns).
_TYPED = {np.dtype(np.float32): 0, np.dtype(np.uint16): 1, np.dtype(np.float16): 2}
_NUMPY = {0: np.float32, 1: np.uint16, 2: np.float16}


def _causal(c):
    if c is None or c is False:
        return 0
    if c is True:
        return 1
    if c in _lib.CAUSAL:
        return _lib.CAUSAL[c]
    raise ValueError("causal = %r, must be False, True, 'top_left' or 'bottom_right'" % (c,))


def _to_bhsd(a, layout, name):
    a = a if isinstance(a, np.ndarray) else np.asarray(a, np.float32)
    if a.ndim != 4:
        raise ValueError("%s must be 4-D (%s), got shape %s" % (name, layout.upper(), a.shape))
    return a.transpose(0, 2, 1, 3) if layout == "bshd" else a


def _set_layout(lay, a, per_byte=1):
    """The layout of a's first three dims; per_byte 2: a holds bytes of two 4-bit elements."""
    lay.batch, lay.head, lay.seq = (s * per_byte for s in _tensors.elem_strides(a)[:3])


def _desc(q, k, v, layout, causal, scale, mask, kv_len, dropout_p, dropout_seed, dtype,
          per_byte=1):
    """(desc, q, k, v, keep-alive list) with q, k, v as BHSD views the API can take.
    per_byte 2: k and v are bytes of a 4-bit cache, their last dim half the elements'."""
    if layout not in ("bhsd", "bshd"):
        raise ValueError("layout = %r, must be 'bhsd' or 'bshd'" % (layout,))
    q, k, v = (_to_bhsd(a, layout, n) for a, n in ((q, "q"), (k, "k"), (v, "v")))
    q = _tensors.prepare(q, dtype[0], "q")
    k = _tensors.prepare(k, dtype[1], "k")
    v = _tensors.prepare(v, dtype[1], "v")
    B, Hq, Lq, D = q.shape
    _, Hkv, Lk, _ = k.shape
    if k.shape[0] != B or k.shape[3] * per_byte != D:
        raise ValueError("k must be [%d, heads_kv, len_kv, %d] (BHSD), got %s"
                         % (B, D // per_byte, k.shape))
    if v.shape[:3] != k.shape[:3]:
        raise ValueError("v must be [%d, %d, %d, dim_v] (BHSD), got %s" % (k.shape[:3] + (v.shape,)))
    d = _lib.attn_sdpa_desc()
    _lib.lib().attn_sdpa_desc_init(ctypes.byref(d), B, Hq, Lq, Lk, D)
    d.heads_kv, d.dim_v = Hkv, v.shape[3] * per_byte
    _set_layout(d.q, q)
    _set_layout(d.k, k, per_byte)
    _set_layout(d.v, v, per_byte)
    if scale is not None:
        d.scale = float(scale)
    d.causal = _causal(causal)
    keep = []
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:  # True = the key takes part (PyTorch's boolean attn_mask)
            mask = np.where(mask, np.float32(0), np.float32(-np.inf))
        m = np.broadcast_to(_tensors.prepare(mask, name="mask"), (B, Hq, Lq, Lk))
        keep.append(m)
        d.mask = _tensors.ptr(m)
        _set_layout(d.mask_strides, m)
    _set_kv_len(d, keep, kv_len, B)
    d.dropout_p, d.dropout_seed = float(dropout_p), int(dropout_seed)
    return d, q, k, v, keep


def _set_kv_len(d, keep, kv_len, B):
    """d.kv_len from kv_len (None: every key of each batch), an int32 array of shape [B]."""
    if kv_len is None:
        return
    kl = np.ascontiguousarray(kv_len, dtype=np.int32)
    if kl.shape != (B,):
        raise ValueError("kv_len must have shape [%d], got %s" % (B, kl.shape))
    keep.append(kl)
    d.kv_len = _tensors.ptr(kl)


def _set_features(d, keep, window, softcap, alibi_slopes, sinks):
    """The fields of today's models: window (left, right) with -1 = unbounded, softcap,
    per-head ALiBi slopes and sinks ([Hq] float32 arrays)."""
    d.window_left, d.window_right = (int(w) for w in window)
    d.softcap = float(softcap)
    for name, a in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if a is None:
            continue
        a = np.ascontiguousarray(a, dtype=np.float32)
        if a.shape != (d.heads_q,):
            raise ValueError("%s must have shape [%d], got %s" % (name, d.heads_q, a.shape))
        keep.append(a)
        setattr(d, name, _tensors.ptr(a))


def _new_out(B, H, L, Dv, layout, dtype=np.float32):
    """A dense output in the caller's layout, and its BHSD view."""
    if layout == "bshd":
        o = np.empty((B, L, H, Dv), dtype)
        return o, o.transpose(0, 2, 1, 3)
    o = np.empty((B, H, L, Dv), dtype)
    return o, o


def _packed_starts(cu, name):
    """cu_seqlens as the int32 [batch + 1] array q_start / kv_start take."""
    a = np.ascontiguousarray(cu, dtype=np.int32)
    if a.ndim != 1 or a.shape[0] < 2:
        raise ValueError("%s must be 1-D with batch + 1 >= 2 entries, got shape %s" % (name, a.shape))
    return a


def _sdpa_packed(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, kv_len, dropout_p,
                 dropout_seed, return_lse, ctx, window, softcap, alibi_slopes, sinks,
                 qtype=None, scales=(None, None, None, None)):
    """sdpa over packed sequences: q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv]
    (float32, or k and v the codes of a quantized cache of type qtype, whose scales and zero
    points broadcast to [total_k, Hkv, groups]); sequence b owns rows cu_seqlens_q[b] ..
    cu_seqlens_q[b + 1] - 1 of q and out, and rows cu_seqlens_k[b] .. of k and v (cu_seqlens_k
    None: every sequence reads all of k, v). Returns out [total_q, Hq, Dv], then lse
    [total_q, Hq] if return_lse."""
    qs = _packed_starts(cu_seqlens_q, "cu_seqlens_q")
    ks = _packed_starts(cu_seqlens_k, "cu_seqlens_k") if cu_seqlens_k is not None else None
    if ks is not None and ks.shape != qs.shape:
        raise ValueError("cu_seqlens_k must have the shape of cu_seqlens_q, %s" % (qs.shape,))
    if qtype is None:
        arrays = [np.asarray(a, np.float32) for a in (q, k, v)]
        types, per_byte = (_tensors.F32, _tensors.F32), 1
    else:
        arrays = [np.asarray(q, np.float32), _quantize.codes(k, "k"), _quantize.codes(v, "v")]
        types, per_byte = (_tensors.F32, np.dtype(np.uint8)), _quantize.elements_per_byte(qtype)
    for a, n in zip(arrays, ("q", "k", "v")):
        if a.ndim != 3:
            raise ValueError("%s must be 3-D [total, heads, dim] with cu_seqlens, got %s" % (n, a.shape))
    # [total, heads, dim] is BSHD with a batch of one: the layouts' seq and head strides
    q4, k4, v4 = (a[None] for a in arrays)
    d, q4, k4, v4, keep = _desc(q4, k4, v4, "bshd", causal, scale, None, None, dropout_p,
                                dropout_seed, types, per_byte)
    _set_features(d, keep, window, softcap, alibi_slopes, sinks)
    if qtype is not None:  # scales [total_k, Hkv, groups]: BSHD with a batch of one
        _quantize.set_scales(d, keep, qtype, "bshd",
                             *(None if x is None else np.asarray(x, np.float32)[None] if np.ndim(x) == 3
                               else x for x in scales))
    B = qs.shape[0] - 1
    d.batch = B
    d.len_q = max(1, int(np.max(np.diff(qs))))
    d.len_kv = max(1, int(np.max(np.diff(ks)))) if ks is not None else k4.shape[2]
    keep += [qs, ks]
    d.q_start = _tensors.ptr(qs)
    d.kv_start = _tensors.ptr(ks)
    _set_kv_len(d, keep, kv_len, B)
    Hq = q4.shape[1]
    out = np.empty((int(qs[-1]), Hq, d.dim_v), np.float32)
    _set_layout(d.out, out[None].transpose(0, 2, 1, 3))
    lse = np.empty((int(qs[-1]), Hq), np.float32) if return_lse else None
    d.lse = _tensors.ptr(lse)
    _lib.call("attn_sdpa_f32" if qtype is None else "attn_sdpa", handle(ctx), ctypes.byref(d),
              _tensors.ptr(q4), _tensors.ptr(k4), _tensors.ptr(v4), _tensors.ptr(out))
    return (out, lse) if return_lse else out


def sdpa(q, k, v, causal=False, scale=None, mask=None, kv_len=None, dropout_p=0.0,
         dropout_seed=0, return_lse=False, return_weights=False, layout="bhsd", ctx=None,
         out_dtype=None, window=(-1, -1), softcap=0.0, alibi_slopes=None, sinks=None,
         cu_seqlens_q=None, cu_seqlens_k=None, kv_dtype=None, k_scale=None, v_scale=None,
         k_zero=None, v_zero=None):
    """out = softmax(scale * q @ k^T + mask) @ v per batch and head.

    layout "bhsd": q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv], out [B, Hq, Lq, Dv];
    layout "bshd": q [B, Lq, Hq, D], k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv], out [B, Lq, Hq, Dv].
    Any strides with a contiguous last dim are used as they are (e.g. the transpose of a BSHD
    array passed with layout "bhsd"); other arrays are copied. Hq != Hkv: grouped-query
    attention (Hq a multiple of Hkv; query head h reads kv head h // (Hq // Hkv)).
    causal: False | True (= "top_left", key j <= query i) | "bottom_right" (j <= i + Lk - Lq).
    scale: None = 1/sqrt(D). mask: additive float, broadcastable to [B, Hq, Lq, Lk] (boolean:
    True = visible, False = -inf). kv_len: [B] ints, keys j >= kv_len[b] hidden.
    window (left, right): keys j with i' - left <= j <= i' + right only (-1 = unbounded; i'
    the query's position on the key axis, bottom-right aligned unless causal="top_left");
    causal="bottom_right_kv_len" aligns each sequence at its own kv_len. softcap > 0:
    s -> softcap tanh(s / softcap). alibi_slopes [Hq]: s -= slope |i' - j|. sinks [Hq]: a logit
    per head in every row's softmax denominator (lse includes it).
    dropout_p in [0, 1) with dropout_seed (deterministic). Returns out, then lse [B, Hq, Lq]
    if return_lse, then weights [B, Hq, Lq, Lk] (before dropout) if return_weights.
    float32 arrays; with a library exporting attn_sdpa, float16 and bfloat16-as-uint16 q, k, v
    are passed as they are (k and v of one type), out in out_dtype (default q's dtype).
    Packed sequences (FlashAttention's varlen form): with cu_seqlens_q ([batch + 1] ints,
    starting at 0, nondecreasing), q is [total_q, Hq, D] and out [total_q, Hq, Dv], sequence
    b owning rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1; with cu_seqlens_k likewise k and
    v [total_k, Hkv, D]; each sequence aligned on its own counts (causal "bottom_right": query
    i sees keys j <= i + K_b - n_b). lse is then [total_q, Hq]. float32, no mask, no weights.
    Quantized K/V caches (attn.quantize's output): k and v hold int8 or uint8 codes, kv_dtype
    names their type ("i8", "u8", "i4", "u4", "fp8_e4m3", "fp8_e5m2"; int8 arrays default to
    "i8"); for "i4" and "u4" their last dim is bytes, D // 2 and Dv // 2 (element 2c in the low
    nibble of byte c). An element stands for scale * (code - zero) (integers) or
    scale * fp8(code). k_scale, v_scale (and k_zero, v_zero): float32 arrays broadcastable to
    [B, Hkv, Lk, groups] ([B, Lk, Hkv, groups] with layout "bshd"), `groups` scales per row
    each for dim // groups elements: quantize()'s scales as they are, or [1, 1, 1, D] per
    channel ([1, 1, 1, D // 2] for the 4-bit types, a scale per pair of channels),
    [1, Hkv, 1, 1] per head, a scalar per tensor; FP8 may omit them (scale 1), the integer
    types may not; zero points only for the integer types ("u8", "u4" need them). q may be
    float32, float16 or bfloat16 (uint16), out float32 unless out_dtype. Every other option
    works; with cu_seqlens, k and v are [total_k, Hkv, D] codes (D // 2 bytes for 4 bits) and
    the scales and zero points broadcast to [total_k, Hkv, groups].
    """
    qtype = _quantize.kv_type(k, kv_dtype, (k_scale, v_scale, k_zero, v_zero))
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        if qtype is not None and not _lib.has("attn_sdpa"):
            raise ValueError("a quantized K/V cache needs attn_sdpa, which the loaded library "
                             "(%s) does not export" % _lib.library_path())
        if cu_seqlens_q is None:
            raise ValueError("cu_seqlens_k needs cu_seqlens_q")
        if mask is not None or return_weights or out_dtype not in (None, np.float32):
            raise ValueError("with cu_seqlens: no mask, no weights, float32 output")
        return _sdpa_packed(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, kv_len,
                            dropout_p, dropout_seed, return_lse, ctx, window, softcap,
                            alibi_slopes, sinks, qtype, (k_scale, v_scale, k_zero, v_zero))
    typed = _lib.has("attn_sdpa")
    qd = np.asarray(q).dtype if typed or qtype else None
    kd = np.asarray(k).dtype if typed else None
    per_byte = 1
    if qtype is not None:
        if not typed:
            raise ValueError("a quantized K/V cache needs attn_sdpa, which the loaded library "
                             "(%s) does not export" % _lib.library_path())
        k, v = _quantize.codes(k, "k"), _quantize.codes(v, "v")
        per_byte = _quantize.elements_per_byte(qtype)
        types = (qd if qd in _TYPED else _tensors.F32, np.dtype(np.uint8))
        od = np.dtype(out_dtype if out_dtype is not None else types[0])
    elif typed and qd in _TYPED and kd in _TYPED and (qd != np.float32 or kd != np.float32
                                                      or out_dtype not in (None, np.float32)):
        types = (qd, kd)
        od = np.dtype(out_dtype if out_dtype is not None else qd)
    else:
        types, od = (_tensors.F32, _tensors.F32), _tensors.F32
    if od not in _TYPED:
        raise ValueError("out_dtype must be float32, float16 or uint16 (bf16)")
    d, q, k, v, keep = _desc(q, k, v, layout, causal, scale, mask, kv_len, dropout_p,
                             dropout_seed, types, per_byte)
    _set_features(d, keep, window, softcap, alibi_slopes, sinks)
    if qtype is not None:
        _quantize.set_scales(d, keep, qtype, layout, k_scale, v_scale, k_zero, v_zero)
    B, Hq, Lq, _ = q.shape
    out, out4 = _new_out(B, Hq, Lq, d.dim_v, layout, od)
    _set_layout(d.out, out4)
    lse = np.empty((B, Hq, Lq), np.float32) if return_lse else None
    w = np.empty((B, Hq, Lq, d.len_kv), np.float32) if return_weights else None
    d.lse, d.weights = _tensors.ptr(lse), _tensors.ptr(w)
    args = (handle(ctx), ctypes.byref(d), _tensors.ptr(q), _tensors.ptr(k), _tensors.ptr(v),
            _tensors.ptr(out))
    if qtype is None and types == (_tensors.F32, _tensors.F32) and od == _tensors.F32:
        _lib.call("attn_sdpa_f32", *args)
    else:
        d.q_type, d.out_type = _TYPED[types[0]], _TYPED[od]
        if qtype is None:
            d.kv_type = _TYPED[types[1]]
        _lib.call("attn_sdpa", *args)
    res = (out,) + ((lse,) if return_lse else ()) + ((w,) if return_weights else ())
    return res[0] if len(res) == 1 else res


def _backward_types(q, k, v, out, dout):
    """(q, k/v, out/dout) numpy dtypes of a backward: float32 unless the library exports the
    typed attn_sdpa_backward and a 16-bit array is given (float16, or bfloat16 as uint16)."""
    qd, kd, vd, od, gd = (np.asarray(a).dtype for a in (q, k, v, out, dout))
    qd, kd, vd, od, gd = (t if t in _TYPED else _tensors.F32 for t in (qd, kd, vd, od, gd))
    if (qd, kd, vd, od, gd) == (_tensors.F32,) * 5:
        return qd, kd, od
    if kd != vd or od != gd:
        raise ValueError("k and v must be of one dtype, out and dout of one dtype; got "
                         "%s, %s and %s, %s" % (kd, vd, od, gd))
    if not _lib.has("attn_sdpa_backward"):
        raise ValueError("16-bit arrays need attn_sdpa_backward, which the loaded library (%s) "
                         "does not export; pass float32 arrays" % _lib.library_path())
    return qd, kd, od


def sdpa_backward(q, k, v, out, dout, lse=None, causal=False, scale=None, mask=None,
                  kv_len=None, dropout_p=0.0, dropout_seed=0, layout="bhsd", ctx=None,
                  window=(-1, -1), softcap=0.0, alibi_slopes=None, sinks=None):
    """Gradients (dq, dk, dv) of a loss given dout = dL/dout, for sdpa with the same options.

    q, k, v, out, dout in `layout` as for sdpa (out, dout of out's shape); lse: the forward's
    [B, Hq, Lq] (None: recomputed). dq, dk, dv have the shapes of q, k, v and, when those are
    views (e.g. BSHD), the same strides; with grouped-query attention dk, dv sum over the
    query heads of a group. window, softcap, alibi_slopes, sinks as for sdpa; with sinks the
    result is (dq, dk, dv, dsinks), dsinks [Hq] float32. float32 arrays; with a library
    exporting the typed attn_sdpa_backward, float16 and bfloat16-as-uint16 arrays are passed
    as they are (k and v of one type, out and dout of one type) and dq, dk, dv come in the
    types of q, k, v (accumulated in float32, rounded once)."""
    qt, kt, ot = _backward_types(q, k, v, out, dout)
    q0 = _to_bhsd(q, layout, "q")
    # The gradients share the layouts of q, k, v: those must not repeat elements.
    q, k, v = (a if _tensors.injective(a) else np.ascontiguousarray(a) for a in
               (q0, _to_bhsd(k, layout, "k"), _to_bhsd(v, layout, "v")))
    d, q, k, v, keep = _desc(q, k, v, "bhsd", causal, scale, mask, kv_len, dropout_p,
                             dropout_seed, (qt, kt))
    _set_features(d, keep, window, softcap, alibi_slopes, sinks)
    dsinks = np.empty(d.heads_q, np.float32) if sinks is not None else None
    d.dsinks = _tensors.ptr(dsinks)
    B, Hq, Lq, _ = q.shape
    o4 = _tensors.prepare(_to_bhsd(out, layout, "out"), ot, name="out")
    g4 = _tensors.prepare(_to_bhsd(dout, layout, "dout"), ot, name="dout")
    if o4.shape != (B, Hq, Lq, d.dim_v) or g4.shape != o4.shape:
        raise ValueError("out and dout must be the shape of sdpa's output")
    if _tensors.elem_strides(g4) != _tensors.elem_strides(o4):
        g4 = _tensors.like_strides(o4, ot)
        g4[...] = _to_bhsd(dout, layout, "dout")
    _set_layout(d.out, o4)
    if lse is not None:
        lse = np.ascontiguousarray(lse, dtype=np.float32)
        if lse.shape != (B, Hq, Lq):
            raise ValueError("lse must have shape [%d, %d, %d]" % (B, Hq, Lq))
    dq, dk, dv = (_tensors.like_strides(a, t) for a, t in ((q, qt), (k, kt), (v, kt)))
    args = (handle(ctx), ctypes.byref(d), _tensors.ptr(q), _tensors.ptr(k), _tensors.ptr(v),
            _tensors.ptr(o4), _tensors.ptr(g4), _tensors.ptr(lse), _tensors.ptr(dq),
            _tensors.ptr(dk), _tensors.ptr(dv))
    if (qt, kt, ot) == (_tensors.F32,) * 3:
        _lib.call("attn_sdpa_backward_f32", *args)
    else:
        d.q_type, d.kv_type, d.out_type = _TYPED[qt], _TYPED[kt], _TYPED[ot]
        _lib.call("attn_sdpa_backward", *args)
    if layout == "bshd":
        dq, dk, dv = (a.transpose(0, 2, 1, 3) for a in (dq, dk, dv))
    return (dq, dk, dv, dsinks) if sinks is not None else (dq, dk, dv)
