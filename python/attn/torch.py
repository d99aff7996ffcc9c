"""attn.torch: PyTorch 2's scaled_dot_product_attention on CPU tensors, computed by libattn.

    import attn.torch
    out = attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()   # through attn_sdpa_backward_f32 (or the typed attn_sdpa_backward)

The meaning and layouts are those of torch.nn.functional.scaled_dot_product_attention
(PyTorch 2): q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv] -> out [B, Hq, L, Dv]
(3-D [B, L, D] inputs too); out = softmax(q k^T * scale + mask) v per batch and head.
- attn_mask: broadcastable to [B, Hq, L, S]; a bool mask's True takes part, a float mask is
  added to the scaled scores. No gradient flows to it (a mask that requires grad is refused).
- is_causal: query i sees keys j <= i (top-left, torch.ones(L, S).tril()). Unlike PyTorch,
  is_causal may be combined with attn_mask (both apply).
- scale: None = 1/sqrt(D). enable_gqa: Hq a multiple of Hkv, query head h reads key/value
  head h // (Hq // Hkv), as k.repeat_interleave(Hq // Hkv, dim=-3) would give.
- dropout_p: applied to the weights whenever > 0 (as PyTorch's function, not nn.Dropout,
  does). Its keep/drop decisions come from libattn's generator, a pure function of
  dropout_seed and the position: not the mask torch's RNG would draw. dropout_seed=None
  takes a seed from torch's default generator (so torch.manual_seed makes runs repeat); the
  backward uses the forward's seed.
A row whose every key is hidden gives zeros (PyTorch gives NaN), and zero gradients.

Keyword arguments attn adds (as attn.sdpa): window=(left, right) keeps keys j with
i' - left <= j <= i' + right (-1 = unbounded; i' = i with is_causal, else i + S - L);
softcap > 0 maps a scaled score s to softcap * tanh(s / softcap); alibi_slopes [Hq] subtracts
slope * |i' - j|; sinks [Hq] (differentiable) adds one logit per head to every row's softmax
denominator; return_lse=True also returns the float32 log-sum-exp [B, Hq, L] (no gradient);
ctx: an attn.Context (None: the library's default context).

Types: float32, and bfloat16 (q, k, v of one dtype; out in it). Inputs are not copied: a
float32 tensor reaches the C API as tensor.numpy(), a bfloat16 one as its 16-bit patterns
(tensor.view(torch.int16).numpy()); any strides with a contiguous last dimension are passed
as they are (e.g. heads sliced out of a packed QKV projection). A tensor whose last
dimension is not contiguous is made contiguous first (a copy). The gradients have the
layouts of q, k, v (bfloat16 widened to float32 for the backward: dense, in their order).
"""
import numpy as np
import torch

from . import _lib, _sdpa

__all__ = ["scaled_dot_product_attention", "typed_backward"]

_TYPES = (torch.float32, torch.bfloat16)


def typed_backward():
    """True if the loaded libattn exports the typed attn_sdpa_backward (bf16 gradients in C);
    otherwise the bf16 backward widens to float32 in torch (see _Attention.backward)."""
    return _lib.has("attn_sdpa_backward")


def _numpy(t):
    """A NumPy view of CPU tensor t: float32 as float32, bfloat16 as uint16 bit patterns."""
    t = t.detach()
    if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        t = t.contiguous()  # the API needs a contiguous last dimension: a copy
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _tensor(a, dtype):
    """The tensor over NumPy array a (no copy); uint16 arrays hold bfloat16 bit patterns."""
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    t = torch.from_numpy(a)
    return t if t.dtype == dtype else t.to(dtype)


class _Attention(torch.autograd.Function):
    """Forward through attn.sdpa (attn_sdpa_f32, or attn_sdpa for bfloat16); backward through
    attn.sdpa_backward with the forward's lse, options and dropout seed."""

    @staticmethod
    def forward(fctx, q, k, v, sinks, opts):
        sinks_np = None if sinks is None else _numpy(sinks.float())
        out, lse = _sdpa.sdpa(_numpy(q), _numpy(k), _numpy(v), return_lse=True,
                              sinks=sinks_np, **opts)
        out, lse = _tensor(out, q.dtype), torch.from_numpy(lse)
        fctx.save_for_backward(q, k, v, out, lse, sinks)
        fctx.opts = opts
        fctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(fctx, dout, _dlse):
        q, k, v, out, lse, sinks = fctx.saved_tensors
        tensors = (q, k, v, out, dout)
        if q.dtype == torch.bfloat16 and not typed_backward():
            # The loaded library has no typed attn_sdpa_backward: widen the stored bf16 values
            # to float32, run the float32 backward and round each gradient once to bf16 below
            # (what the typed call's reference path computes; the typed call replaces this
            # whenever the library exports it).
            tensors = tuple(t.float() for t in tensors)
        sinks_np = None if sinks is None else _numpy(sinks.float())
        grads = _sdpa.sdpa_backward(*(_numpy(t) for t in tensors), lse=lse.numpy(),
                                    sinks=sinks_np, **fctx.opts)
        dq, dk, dv = (_tensor(g, t.dtype) for g, t in zip(grads[:3], (q, k, v)))
        dsinks = None if sinks is None else torch.from_numpy(grads[3]).to(sinks.dtype)
        return dq, dk, dv, dsinks, None


def _check(query, key, value, enable_gqa):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            raise TypeError("%s must be a CPU torch.Tensor" % name)
        if t.dtype != query.dtype or t.dtype not in _TYPES:
            raise TypeError("query, key and value must all be float32 or all bfloat16; got "
                            "%s, %s, %s" % (query.dtype, key.dtype, value.dtype))
        if t.dim() != query.dim() or t.dim() not in (3, 4):
            raise ValueError("query, key and value must all be 4-D [B, H, L, D] or 3-D "
                             "[B, L, D]; got shapes %s, %s, %s" % (
                                 tuple(query.shape), tuple(key.shape), tuple(value.shape)))
    hq, hkv = (query.shape[1], key.shape[1]) if query.dim() == 4 else (1, 1)
    if hq != hkv and not enable_gqa:
        raise ValueError("query has %d heads and key %d: pass enable_gqa=True for grouped-query "
                         "attention" % (hq, hkv))
    if hq % hkv:
        raise ValueError("enable_gqa needs query's heads (%d) to be a multiple of key's (%d)"
                         % (hq, hkv))


def _mask(attn_mask, three_d):
    """attn_mask as a float32 NumPy array (additive; bool True -> 0, False -> -inf)."""
    if attn_mask is None:
        return None
    if attn_mask.requires_grad and torch.is_grad_enabled():
        raise ValueError("attn_mask requires grad: attn.torch computes no gradient for the mask")
    m = attn_mask.detach()
    if m.dtype == torch.bool:
        m = torch.zeros(m.shape, dtype=torch.float32).masked_fill_(~m, float("-inf"))
    elif m.dtype != torch.float32:
        m = m.float()
    if three_d and m.dim() == 3:
        m = m.unsqueeze(-3)  # [B, L, S] -> [B, 1, L, S]
    return _numpy(m)


def _per_head(name, t, heads):
    if t is None:
        return None
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != (heads,):
        raise ValueError("%s must be a tensor of shape [%d]" % (name, heads))
    return t


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                  is_causal=False, scale=None, enable_gqa=False, *,
                                  window=None, softcap=None, alibi_slopes=None, sinks=None,
                                  return_lse=False, dropout_seed=None, ctx=None):
    """out (and lse if return_lse) as torch.nn.functional.scaled_dot_product_attention of
    PyTorch 2, computed by libattn; see the module's documentation for every argument."""
    _check(query, key, value, enable_gqa)
    three_d = query.dim() == 3
    if three_d:  # [B, L, D] -> [B, 1, L, D] (views)
        query, key, value = (t.unsqueeze(1) for t in (query, key, value))
    heads = query.shape[1]
    if alibi_slopes is not None and alibi_slopes.requires_grad and torch.is_grad_enabled():
        raise ValueError("alibi_slopes requires grad: attn.torch computes no gradient for it")
    slopes = _per_head("alibi_slopes", alibi_slopes, heads)
    sinks = _per_head("sinks", sinks, heads)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError("dropout_p = %r, must be in [0, 1)" % (dropout_p,))
    if dropout_p > 0 and dropout_seed is None:
        dropout_seed = int(torch.randint(0, 2 ** 62, (1,)).item())
    opts = dict(causal="top_left" if is_causal else False, scale=scale,
                mask=_mask(attn_mask, three_d), dropout_p=float(dropout_p),
                dropout_seed=int(dropout_seed or 0), ctx=ctx,
                window=(-1, -1) if window is None else tuple(int(w) for w in window),
                softcap=float(softcap or 0.0),
                alibi_slopes=None if slopes is None else _numpy(slopes.detach().float()))
    out, lse = _Attention.apply(query, key, value, sinks, opts)
    if three_d:
        out, lse = out.squeeze(1), lse.squeeze(1)
    return (out, lse) if return_lse else out
