"""attn.torch.scaled_dot_product_attention (a torch.autograd.Function over libattn) against
PyTorch 2's meaning written out in torch (torch_reference.py): forward and backward() against
float64 autograd on the same stored inputs, with FlashAttention's rule (the error is at most
twice that of the same computation in torch in the same precision, plus a small floor; see
helpers.check_close), gradcheck in float32, every keyword, GQA, masks, causal, bfloat16."""
import warnings
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is needed for attn.torch "
                                            "(apt-get install python3-torch)")

import attn  # noqa: E402
import attn.torch as at  # noqa: E402
from attn import _tensors  # noqa: E402
from helpers import check_close  # noqa: E402
import torch_reference as ref  # noqa: E402

# bfloat16 has 8 significant bits: unit roundoff 2^-8, the floor of the bf16 rule (the output
# and each gradient are rounded once to bf16).
BF16_FLOOR = 2.0 ** -8


def _gen(seed):
    return torch.Generator().manual_seed(zlib.crc32(repr(seed).encode()))


def _inputs(case, dtype=torch.float32):
    B, Hq, Hkv, L, S, D, Dv = case[:7]
    g = _gen(case)
    q, k, v, dout = (torch.randn(*shape, generator=g).to(dtype) for shape in
                     ((B, Hq, L, D), (B, Hkv, S, D), (B, Hkv, S, Dv), (B, Hq, L, Dv)))
    return (q, k, v), dout, g


def _attn(inputs, dout, sinks=None, **kw):
    """attn.torch's (out, dq, dk, dv[, dsinks]) as float64 arrays, and its out tensor."""
    leaves = [t.clone().requires_grad_() for t in inputs]
    sk = None if sinks is None else sinks.clone().requires_grad_()
    out = at.scaled_dot_product_attention(*leaves, sinks=sk, **kw)
    assert out.dtype == inputs[0].dtype
    out.backward(dout)
    for t in leaves:
        assert t.grad.dtype == t.dtype and t.grad.shape == t.shape
    res = [out] + [t.grad for t in leaves] + ([sk.grad] if sk is not None else [])
    return [ref.as_numpy(r) for r in res], out


def _compare(inputs, dout, what, sinks=None, low=torch.float32, floor=2e-6, keep=None, **kw):
    """attn.torch against float64 autograd, with torch's own computation in `low` as yardstick
    (keep: the dropout keep mask for the reference)."""
    got, _ = _attn(inputs, dout, sinks=sinks, **kw)
    rkw = dict(kw, keep=keep)
    rkw.pop("dropout_seed", None)
    r64 = ref.run(inputs, dout, torch.float64, sinks=sinks, **rkw)
    rlow = ref.run(inputs, dout, low, sinks=sinks, **rkw)
    names = ("out", "dq", "dk", "dv", "dsinks")
    for name, a, b, c in zip(names, got, r64, rlow):
        assert a.shape == b.shape, (what, name)
        check_close(a, b, c, "%s %s" % (what, name), floor=floor)


CASES = [
    # B, Hq, Hkv, L, S, D, Dv, is_causal, attn_mask, scale
    (2, 4, 4, 7, 7, 16, 16, False, None, None),
    (1, 4, 2, 9, 13, 32, 16, True, None, 0.3),       # GQA, causal top-left with L < S
    (2, 6, 2, 11, 6, 16, 24, True, None, None),      # GQA, L > S
    (2, 2, 2, 6, 10, 8, 8, False, "bool", None),     # True takes part
    (1, 4, 1, 8, 8, 16, 16, False, "float", 1.0),    # MQA, additive [L, S] mask, no scaling
    (2, 3, 3, 5, 9, 8, 8, True, "float_b", None),    # [B, 1, L, S] mask with causal
]


def _mask(kind, case, g):
    B, Hq, _, L, S = case[:5]
    if kind == "bool":
        m = torch.rand(B, Hq, L, S, generator=g) > 0.4
        m[..., 0] = True  # every row keeps a key (PyTorch gives NaN for none)
        return m
    if kind == "float":
        return torch.randn(L, S, generator=g)
    if kind == "float_b":
        return torch.randn(B, 1, L, S, generator=g)
    return None


@pytest.mark.parametrize("case", CASES)
def test_forward_backward_vs_float64(case):
    inputs, dout, g = _inputs(case)
    _compare(inputs, dout, case, is_causal=case[7], attn_mask=_mask(case[8], case, g),
             scale=case[9], enable_gqa=case[1] != case[2])


KEYWORDS = [
    dict(window=(3, 1)),
    dict(window=(4, -1), is_causal=True, softcap=5.0),
    dict(alibi_slopes=True, window=(-1, 2)),
    dict(sinks=True, enable_gqa=True),
    dict(sinks=True, alibi_slopes=True, softcap=3.0, is_causal=True, attn_mask="float"),
]


def _keywords(kw, case, g):
    kw = dict(kw)
    H = case[1]
    if kw.get("alibi_slopes"):
        kw["alibi_slopes"] = 2.0 ** (-8.0 * torch.arange(1, H + 1) / H)
    if kw.get("sinks"):
        kw["sinks"] = torch.randn(H, generator=g) * 2
    if kw.get("attn_mask"):
        kw["attn_mask"] = _mask(kw["attn_mask"], case, g)
    return kw


@pytest.mark.parametrize("kw", KEYWORDS, ids=lambda kw: "-".join(sorted(kw)))
def test_keywords_vs_float64(kw):
    case = (2, 4, 2 if kw.get("enable_gqa") else 4, 10, 12, 16, 16)
    inputs, dout, g = _inputs(case + (repr(kw),))
    _compare(inputs, dout, kw, **_keywords(kw, case, g))


def test_gradcheck_float32():
    """torch.autograd.gradcheck on the float32 function itself: the backward is the derivative
    of attn's own forward, with every differentiable input (q, k, v, sinks) and the options
    that change the derivative. Central differences in float32 with eps = 1e-3 carry a
    rounding error near u * |out| / eps ~ 1e-4 (u = 6e-8, |out| < 3), hence atol = rtol = 2e-3
    (a wrong derivative is off by O(1))."""
    case = (1, 2, 1, 5, 6, 4, 4)
    inputs, _, g = _inputs(case)
    slopes = torch.tensor([0.5, 0.25])
    sinks = torch.randn(2, generator=g)
    mask = torch.randn(5, 6, generator=g)

    def fn(q, k, v, s):
        return at.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True,
                                               scale=0.7, softcap=4.0, alibi_slopes=slopes,
                                               sinks=s, window=(3, 2))

    args = [t.clone().requires_grad_() for t in inputs + (sinks,)]
    with warnings.catch_warnings():  # gradcheck warns about inputs that are not float64
        warnings.simplefilter("ignore", UserWarning)
        assert torch.autograd.gradcheck(fn, args, eps=1e-3, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[3]])
def test_bfloat16_vs_float64(case):
    """bfloat16 q, k, v through attn_sdpa (BF16 types) and its backward (the typed
    attn_sdpa_backward, or float32 widening): float64 on the same bf16 values is the oracle,
    torch's own bf16 computation the yardstick."""
    inputs, dout, g = _inputs(case, torch.bfloat16)
    _compare(inputs, dout, ("bf16",) + case, low=torch.bfloat16, floor=BF16_FLOOR,
             is_causal=case[7], attn_mask=_mask(case[8], case, g), scale=case[9],
             enable_gqa=case[1] != case[2])


def test_bfloat16_keywords_vs_float64():
    case = (1, 4, 4, 9, 9, 16, 16)
    inputs, dout, g = _inputs(case + ("bf16",), torch.bfloat16)
    kw = _keywords(KEYWORDS[4], case, g)
    _compare(inputs, dout, "bf16 keywords", low=torch.bfloat16, floor=BF16_FLOOR, **kw)


def test_bfloat16_backward_path():
    """Without the typed attn_sdpa_backward, the bf16 gradients are the float32 backward of
    the widened values rounded once; with it, they hold the same rule as that widening."""
    inputs, dout, _ = _inputs((1, 2, 2, 6, 6, 8, 8), torch.bfloat16)
    (_, dq, dk, dv), out = _attn(inputs, dout, is_causal=True)
    wide = attn.sdpa_backward(*(t.float().numpy() for t in inputs), out.detach().float().numpy(),
                              dout.float().numpy(), causal="top_left")
    for name, got, w in zip(("dq", "dk", "dv"), (dq, dk, dv), wide):
        rounded = torch.from_numpy(w).bfloat16().double().numpy()
        if not at.typed_backward():
            np.testing.assert_array_equal(got, rounded, err_msg=name)
        else:  # one rounding each: within a unit roundoff of the f32 result, normwise
            assert np.linalg.norm(got - w) <= 2 * BF16_FLOOR * np.linalg.norm(w), name


def test_dropout_matches_its_mask():
    """attn's dropout decisions (libattn's generator, not torch's): the same seed repeats,
    another differs; the keep mask, read through v = I, makes the float64 oracle."""
    case = (1, 2, 2, 6, 8, 8, 8)
    inputs, dout, _ = _inputs(case)
    p, seed = 0.3, 1234
    a = at.scaled_dot_product_attention(*inputs, dropout_p=p, dropout_seed=seed)
    assert torch.equal(a, at.scaled_dot_product_attention(*inputs, dropout_p=p,
                                                          dropout_seed=seed))
    assert not torch.equal(a, at.scaled_dot_product_attention(*inputs, dropout_p=p,
                                                              dropout_seed=seed + 1))
    torch.manual_seed(5)
    b = at.scaled_dot_product_attention(*inputs, dropout_p=p)
    torch.manual_seed(5)
    assert torch.equal(b, at.scaled_dot_product_attention(*inputs, dropout_p=p))
    eye = np.broadcast_to(np.eye(8, dtype=np.float32), (1, 2, 8, 8))
    weights = attn.sdpa(inputs[0].numpy(), inputs[1].numpy(), eye, dropout_p=p,
                        dropout_seed=seed)
    keep = torch.from_numpy(weights != 0)  # no weight is 0 before dropout here
    assert 0 < keep.float().mean() < 1
    _compare(inputs, dout, "dropout", dropout_p=p, dropout_seed=seed, keep=keep)


def test_return_lse_and_three_dims():
    inputs, _, _ = _inputs((2, 1, 1, 7, 9, 16, 16))
    out4, lse4 = at.scaled_dot_product_attention(*inputs, is_causal=True, return_lse=True)
    assert lse4.dtype == torch.float32 and lse4.shape == (2, 1, 7)
    _, l64 = ref.sdpa(*(t.double() for t in inputs), is_causal=True)
    _, l32 = ref.sdpa(*inputs, is_causal=True)
    check_close(lse4.numpy(), l64.numpy(), l32.numpy(), "lse")
    out3, lse3 = at.scaled_dot_product_attention(*(t[:, 0] for t in inputs), is_causal=True,
                                                 return_lse=True)
    assert torch.equal(out3, out4[:, 0]) and torch.equal(lse3, lse4[:, 0])


def test_gqa_is_repeat_interleave():
    (q, k, v), _, _ = _inputs((2, 6, 2, 5, 7, 8, 8))
    grouped = at.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    repeated = at.scaled_dot_product_attention(q, k.repeat_interleave(3, 1),
                                               v.repeat_interleave(3, 1))
    torch.testing.assert_close(grouped, repeated, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inputs_are_views_not_copies(dtype):
    """Contiguous tensors and heads sliced from a packed QKV projection reach the C API as
    NumPy views of their memory; gradients come in the layouts of q, k, v."""
    g = _gen("views")
    x = torch.randn(2, 9, 3, 4, 16, generator=g).to(dtype)  # [B, L, 3, H, D]
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, L, D] views into x
    for t in (x, q, k, v):
        assert at._numpy(t).ctypes.data == t.data_ptr()
    before = _tensors.copies
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = at.scaled_dot_product_attention(*leaves, is_causal=True)
    grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
    assert _tensors.copies == before
    if dtype == torch.float32 or at.typed_backward():  # (bf16 widening: dense copies)
        assert [d.stride() for d in grads] == [t.stride() for t in (q, k, v)]
    dense = [t.contiguous().requires_grad_() for t in (q, k, v)]
    out_dense = at.scaled_dot_product_attention(*dense, is_causal=True)
    assert torch.equal(out, out_dense)
    for a, b in zip(grads, torch.autograd.grad(out_dense, dense, torch.ones_like(out))):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    # A last dimension that is not contiguous is copied, and gives the same output.
    qt = q.contiguous().transpose(-1, -2).contiguous().transpose(-1, -2)
    assert qt.stride(-1) != 1 and at._numpy(qt).ctypes.data != qt.data_ptr()
    assert torch.equal(out, at.scaled_dot_product_attention(qt, k, v, is_causal=True))


def test_autocast_bfloat16():
    """Under torch.autocast("cpu", bfloat16) the projections give bf16 and attention follows."""
    g = _gen("autocast")
    lin = torch.nn.Linear(16, 48)
    x = torch.randn(2, 5, 16, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q, k, v = lin(x).view(2, 5, 3, 1, 16).unbind(2)
        out = at.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                                              is_causal=True)
    assert out.dtype == torch.bfloat16
    out.float().pow(2).sum().backward()
    assert lin.weight.grad is not None and torch.isfinite(lin.weight.grad).all()


def test_errors():
    (q, k, v), _, _ = _inputs((1, 4, 2, 3, 3, 8, 8))
    with pytest.raises(ValueError, match="enable_gqa"):
        at.scaled_dot_product_attention(q, k, v)
    with pytest.raises(TypeError, match="float32 or all bfloat16"):
        at.scaled_dot_product_attention(q, k.double(), v, enable_gqa=True)
    with pytest.raises(ValueError, match="attn_mask requires grad"):
        at.scaled_dot_product_attention(q, k, v, enable_gqa=True,
                                        attn_mask=torch.zeros(3, 3, requires_grad=True))
    with pytest.raises(ValueError, match="sinks must be"):
        at.scaled_dot_product_attention(q, k, v, enable_gqa=True, sinks=torch.zeros(3))
    with pytest.raises(ValueError, match="dropout_p"):
        at.scaled_dot_product_attention(q, k, v, enable_gqa=True, dropout_p=1.0)
