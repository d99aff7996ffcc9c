"""Shared by the tests: random data, the tolerance rule, the explicit SDPA formula in torch."""
import numpy as np


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def normwise(x, ref, scale=0.0):
    """||x - ref|| / max(||ref||, scale) (scale: for a ref that is zero in exact arithmetic)."""
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    den = max(np.linalg.norm(ref), scale)
    return np.linalg.norm(x - ref) / (den if den > 0 else 1.0)


def check_close(got, ref64, torch32, what="", scale=0.0, floor=2e-6):
    """The tolerance rule: the normwise error of attn against the float64 reference is at most
    twice that of torch's own computation in the same precision (torch32), or floor (2e-6 for
    float32, a few units roundoff), whichever is larger."""
    err, base = normwise(got, ref64, scale), normwise(torch32, ref64, scale)
    bound = max(2.0 * base, floor)
    assert err <= bound, "%s: normwise error %.3g > bound %.3g (torch: %.3g)" % (
        what, err, bound, base)
    return err


def torch_sdpa(torch, q, k, v, dtype, causal=None, mask=None, kv_len=None, scale=None):
    """softmax(q k^T * scale + mask) v with autograd, BHSD numpy inputs; GQA by repeating kv
    heads; causal 'top_left' / 'bottom_right'. Returns (out, (q, k, v) leaf tensors)."""
    tq, tk, tv = (torch.tensor(a, dtype=dtype, requires_grad=True) for a in (q, k, v))
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    rep = Hq // Hkv
    kk, vv = tk.repeat_interleave(rep, dim=1), tv.repeat_interleave(rep, dim=1)
    s = (tq @ kk.transpose(-1, -2)) * (scale if scale is not None else D ** -0.5)
    if mask is not None:
        s = s + torch.tensor(np.broadcast_to(mask, (B, Hq, Lq, Lk)).copy(), dtype=dtype)
    hidden = np.zeros((B, 1, Lq, Lk), bool)
    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    if causal == "top_left":
        hidden |= j > i
    elif causal == "bottom_right":
        hidden |= j > i + Lk - Lq
    if kv_len is not None:
        hidden |= (j[None, None] >= np.asarray(kv_len)[:, None, None, None])
    s = s.masked_fill(torch.tensor(hidden), float("-inf"))
    return torch.softmax(s, dim=-1) @ vv, (tq, tk, tv)
