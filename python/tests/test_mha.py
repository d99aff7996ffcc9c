"""attn.mha_forward / attn.mha_backward against torch.nn.MultiheadAttention(batch_first=True)
with the same weights: float64 module as the reference, float32 module for the tolerance."""
import numpy as np
import pytest

try:
    import torch
except ImportError:  # only the comparisons with torch need it: they skip, the rest run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is needed for the comparisons "
                                                       "(apt-get install python3-torch)")

import attn  # noqa: E402
from helpers import check_close, rand  # noqa: E402

NAMES = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")


def _weights(m):
    """attn's arguments from an nn.MultiheadAttention: in_proj splits into w_q, w_k, w_v."""
    w = m.in_proj_weight.detach().numpy().astype(np.float32)
    E = m.embed_dim
    out = {"w_q": w[:E], "w_k": w[E:2 * E], "w_v": w[2 * E:],
           "w_o": m.out_proj.weight.detach().numpy().astype(np.float32)}
    if m.in_proj_bias is not None:
        b = m.in_proj_bias.detach().numpy().astype(np.float32)
        out.update(b_q=b[:E], b_k=b[E:2 * E], b_v=b[2 * E:],
                   b_o=m.out_proj.bias.detach().numpy().astype(np.float32))
    return out


def _torch_grads(m, x_q, x_kv, dy, dtype, attn_mask, kpm):
    m = m.to(dtype)
    m.zero_grad()
    tq = torch.tensor(x_q, dtype=dtype, requires_grad=True)
    tkv = tq if x_kv is None else torch.tensor(x_kv, dtype=dtype, requires_grad=True)
    mask = None if attn_mask is None else torch.tensor(attn_mask, dtype=dtype)
    y, _ = m(tq, tkv, tkv, attn_mask=mask, key_padding_mask=kpm, need_weights=False)
    y.backward(torch.tensor(dy, dtype=dtype))
    E = m.embed_dim
    gw, res = m.in_proj_weight.grad.numpy(), {"y": y.detach().numpy(), "dx_q": tq.grad.numpy()}
    res.update(dw_q=gw[:E], dw_k=gw[E:2 * E], dw_v=gw[2 * E:],
               dw_o=m.out_proj.weight.grad.numpy())
    if x_kv is not None:
        res["dx_kv"] = tkv.grad.numpy()
    if m.in_proj_bias is not None:
        gb = m.in_proj_bias.grad.numpy()
        res.update(db_q=gb[:E], db_k=gb[E:2 * E], db_v=gb[2 * E:],
                   db_o=m.out_proj.bias.grad.numpy())
    return res


@needs_torch
@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("masking", [None, "causal", "padding"])
def test_mha_vs_torch(cross, bias, masking):
    B, Lq, Lk, E, H = 2, 6, (9 if cross else 6), 16, 4
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=True)
    if bias:  # PyTorch initialises its biases to 0: make them count
        with torch.no_grad():
            m.in_proj_bias.normal_()
            m.out_proj.bias.normal_()
    rng = np.random.default_rng(5)
    x_q, dy = rand(rng, B, Lq, E), rand(rng, B, Lq, E)
    x_kv = rand(rng, B, Lk, E) if cross else None
    attn_mask = kpm = kv_len = None
    causal = masking == "causal"
    if causal:  # top-left, as attn's causal=True
        attn_mask = np.triu(np.full((Lq, Lk), -np.inf), 1)
    if masking == "padding":
        kv_len = np.array([Lk, Lk - 3], np.int32)
        kpm = torch.tensor(np.arange(Lk)[None, :] >= kv_len[:, None])
    w = _weights(m)
    opts = dict(heads=H, causal=causal, kv_len=kv_len)
    y = attn.mha_forward(x_q, x_kv, **w, **opts)
    g = attn.mha_backward(x_q, x_kv, **w, dy=dy, **opts)
    r64 = _torch_grads(m, x_q, x_kv, dy, torch.float64, attn_mask, kpm)
    r32 = _torch_grads(m, x_q, x_kv, dy, torch.float32, attn_mask, kpm)
    got = dict(g, y=y)
    assert sorted(got) == sorted(r64)
    for name in r64:
        # db_k is 0 in exact arithmetic (a bias on every key shifts a softmax row by a
        # constant): its rounding noise is measured against the size of db_v.
        scale = np.linalg.norm(r64["db_v"]) if name == "db_k" else 0.0
        check_close(got[name], r64[name], r32[name], name, scale)
    assert np.linalg.norm(got["dx_q"]) > 0.1 and np.linalg.norm(got["dw_o"]) > 0.1


def test_mha_gqa_matches_sdpa_composition():
    """heads_kv < heads: equals projecting by hand and calling attn.sdpa (checked there)."""
    rng = np.random.default_rng(6)
    B, L, E, H, Hkv = 2, 5, 16, 4, 2
    hd = E // H
    x = rand(rng, B, L, E)
    w = dict(w_q=rand(rng, H * hd, E), w_k=rand(rng, Hkv * hd, E), w_v=rand(rng, Hkv * hd, E),
             w_o=rand(rng, E, H * hd))
    y = attn.mha_forward(x, None, **w, heads=H, heads_kv=Hkv, causal=True)
    q = (x @ w["w_q"].T).reshape(B, L, H, hd)
    k = (x @ w["w_k"].T).reshape(B, L, Hkv, hd)
    v = (x @ w["w_v"].T).reshape(B, L, Hkv, hd)
    o = attn.sdpa(q, k, v, causal=True, layout="bshd").reshape(B, L, E)
    np.testing.assert_allclose(y, o @ w["w_o"].T, rtol=1e-4, atol=1e-5)


def test_mha_bad_arguments():
    x = np.zeros((1, 3, 8), np.float32)
    w = np.zeros((8, 8), np.float32)
    with pytest.raises(attn.AttnError) as e:
        attn.mha_forward(x, None, w, w, w, w, heads=3)  # 3 does not divide d_model = 8
    assert "head_dim" in e.value.message
    wkv = np.zeros((6, 8), np.float32)
    with pytest.raises(attn.AttnError, match="heads = 4, must be a multiple of "
                                             "desc->heads_kv = 3"):
        attn.mha_forward(x, None, w, wkv, wkv, w, heads=4, heads_kv=3)
    with pytest.raises(ValueError, match="w_k must be"):
        attn.mha_forward(x, None, w, wkv, wkv, w, heads=4)
