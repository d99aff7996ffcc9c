"""PyTorch 2's scaled_dot_product_attention written out in torch (PyTorch 1.13 has none), with
the keyword arguments attn adds, for the tests of attn.torch: autograd through it in float64
is the oracle, and in float32 or bfloat16 it is the plain same-precision computation whose
error sets the tolerance (helpers.check_close)."""
import numpy as np
import torch


def visible(L, S, is_causal, window):
    """[L, S] bool: the keys each query may see (top-left with is_causal, else bottom-right
    aligned windows: i' = i + S - L)."""
    i = torch.arange(L)[:, None] + (0 if is_causal else S - L)
    j = torch.arange(S)[None, :]
    keep = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        keep &= j <= i
    left, right = window if window is not None else (-1, -1)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    return keep, (i - j).abs()


def sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, window=None,
         softcap=None, alibi_slopes=None, sinks=None, keep=None, dropout_p=0.0):
    """softmax(q k^T * scale (softcap) + mask - ALiBi, hidden keys -inf, sinks in the
    denominator) [* keep / (1 - dropout_p)] @ v, in the dtype of q (autograd through it).
    keep: the dropout keep mask [B, Hq, L, S] (bool), when checking dropout. Returns (out, lse)."""
    B, Hq, L, D = q.shape
    S = k.shape[2]
    if enable_gqa:
        k = k.repeat_interleave(Hq // k.shape[1], dim=1)
        v = v.repeat_interleave(Hq // v.shape[1], dim=1)
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else D ** -0.5)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = s.masked_fill(~attn_mask, float("-inf"))
        else:
            s = s + attn_mask.to(s.dtype)
    seen, dist = visible(L, S, is_causal, window)
    if alibi_slopes is not None:
        s = s - alibi_slopes.to(s.dtype)[:, None, None] * dist.to(s.dtype)
    s = s.masked_fill(~seen, float("-inf"))
    if sinks is not None:  # one more logit per head, with no value
        col = sinks.to(s.dtype)[None, :, None, None].expand(B, Hq, L, 1)
        s = torch.cat([s, col], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1)
    if sinks is not None:
        p = p[..., :S]
    if keep is not None:
        p = p * keep.to(p.dtype) / (1.0 - dropout_p)
    return p @ v, lse


def run(inputs, dout, dtype, sinks=None, **kw):
    """(out, dq, dk, dv[, dsinks]) as float64 NumPy arrays, by autograd through sdpa in dtype
    on the given stored values (tensors of any dtype)."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in inputs]
    sk = None if sinks is None else sinks.detach().to(dtype).requires_grad_()
    out, _ = sdpa(*leaves, sinks=sk, **kw)
    out.backward(dout.to(dtype))
    res = [out] + [t.grad for t in leaves] + ([sk.grad] if sk is not None else [])
    return [r.detach().double().numpy() for r in res]


def as_numpy(t):
    return t.detach().double().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
