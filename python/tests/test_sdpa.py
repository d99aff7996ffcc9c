"""attn.sdpa and attn.sdpa_backward against torch autograd of softmax(Q K^T * scale + mask) V
(float64 reference; torch's float32 run sets the tolerance, see helpers.check_close)."""
import zlib

import numpy as np
import pytest

try:
    import torch
except ImportError:  # only the comparisons with torch need it: they skip, the rest run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is needed for the comparisons "
                                                       "(apt-get install python3-torch)")

import attn  # noqa: E402
from attn import _tensors  # noqa: E402
from helpers import check_close, rand, torch_sdpa  # noqa: E402

CASES = [
    # B, Hq, Hkv, Lq, Lk, D, Dv, causal, with mask, with kv_len
    (2, 4, 4, 7, 7, 16, 16, None, False, False),
    (1, 4, 2, 5, 11, 8, 12, "bottom_right", False, False),    # GQA, Lq < Lk
    (2, 6, 2, 9, 6, 16, 8, "top_left", False, False),         # GQA, Lq > Lk
    (1, 2, 1, 8, 13, 32, 32, "top_left", False, False),       # MQA, Lq != Lk
    (2, 2, 2, 6, 10, 8, 8, None, True, False),                # additive mask
    (3, 2, 2, 4, 9, 8, 8, "bottom_right", True, True),        # everything, kv_len
]


def _run(case, layout="bhsd"):
    B, Hq, Hkv, Lq, Lk, D, Dv, causal, with_mask, with_kv = case
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
    q, k, v = rand(rng, B, Hq, Lq, D), rand(rng, B, Hkv, Lk, D), rand(rng, B, Hkv, Lk, Dv)
    dout = rand(rng, B, Hq, Lq, Dv)
    mask = rand(rng, 1, Hq, Lq, Lk) if with_mask else None
    kv_len = rng.integers(1, Lk + 1, size=B).astype(np.int32) if with_kv else None
    opts = dict(causal=causal or False, mask=mask, kv_len=kv_len)
    if layout == "bshd":  # BSHD arrays, passed as such
        args = [np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in (q, k, v)]
        out, lse = attn.sdpa(*args, return_lse=True, layout="bshd", **opts)
        grads = attn.sdpa_backward(*args, out, np.ascontiguousarray(dout.transpose(0, 2, 1, 3)),
                                   lse=lse, layout="bshd", **opts)
        out = out.transpose(0, 2, 1, 3)
        grads = [g.transpose(0, 2, 1, 3) for g in grads]
    else:
        out, lse = attn.sdpa(q, k, v, return_lse=True, **opts)
        grads = attn.sdpa_backward(q, k, v, out, dout, lse=lse, **opts)
    refs = {}
    for dt in (torch.float64, torch.float32):
        o, leaves = torch_sdpa(torch, q, k, v, dt, causal, mask, kv_len)
        o.backward(torch.tensor(dout, dtype=dt))
        refs[dt] = [o.detach().numpy()] + [t.grad.numpy() for t in leaves]
    for name, got, r64, r32 in zip(("out", "dq", "dk", "dv"), [out] + list(grads),
                                   refs[torch.float64], refs[torch.float32]):
        assert got.shape == r64.shape
        check_close(got, r64, r32, "%s %s %s" % (layout, case, name))
    return out, lse


@needs_torch
@pytest.mark.parametrize("case", CASES)
def test_forward_backward_vs_torch(case):
    _run(case)


@needs_torch
@pytest.mark.parametrize("case", CASES[1:3])
def test_bshd_layout_vs_torch(case):
    _run(case, layout="bshd")


def test_transposed_views_are_not_copied():
    rng = np.random.default_rng(7)
    B, L, H, D = 2, 9, 4, 16
    x = rand(rng, B, L, 3, H, D)  # a packed QKV projection, [B, L, 3, H, D]
    q, k, v = (x[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # BHSD views into x
    dout = rand(rng, B, H, L, D)
    before = _tensors.copies
    out, lse = attn.sdpa(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = attn.sdpa_backward(q, k, v, out, dout, lse=lse, causal=True)
    assert _tensors.copies == before  # every input was used in place
    assert dq.strides == q.strides  # gradients come in the layout of their inputs
    dense = [np.ascontiguousarray(a) for a in (q, k, v)]
    np.testing.assert_array_equal(out, attn.sdpa(*dense, causal=True))
    for g, r in zip((dq, dk, dv), attn.sdpa_backward(*dense, out, dout, causal=True)):
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-6)
    # A last dimension that is not contiguous is copied (and still right).
    qs = np.asfortranarray(np.ascontiguousarray(q))
    assert qs.strides[-1] != 4
    np.testing.assert_array_equal(attn.sdpa(qs, k, v, causal=True), out)
    assert _tensors.copies == before + 1


@needs_torch
def test_transposed_views_vs_torch():
    rng = np.random.default_rng(7)
    B, L, H, D = 2, 9, 4, 16
    x = rand(rng, B, L, 3, H, D)  # a packed QKV projection, [B, L, 3, H, D]
    q, k, v = (x[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # BHSD views into x
    out = attn.sdpa(q, k, v, causal=True)
    dense = [np.ascontiguousarray(a) for a in (q, k, v)]
    o64, _ = torch_sdpa(torch, *dense, torch.float64, "top_left")
    o32, _ = torch_sdpa(torch, *dense, torch.float32, "top_left")
    check_close(out, o64.detach().numpy(), o32.detach().numpy(), "views")


def test_boolean_mask_and_weights():
    rng = np.random.default_rng(3)
    q, k, v = rand(rng, 1, 2, 4, 8), rand(rng, 1, 2, 6, 8), rand(rng, 1, 2, 6, 8)
    keep = rng.random((4, 6)) > 0.3
    keep[:, 0] = True
    out, w = attn.sdpa(q, k, v, mask=keep, return_weights=True)
    assert np.all(w[:, :, ~keep] == 0)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-6)
    add = np.where(keep, 0, -np.inf).astype(np.float32)
    np.testing.assert_array_equal(out, attn.sdpa(q, k, v, mask=add))
    np.testing.assert_allclose(out, w @ v, rtol=1e-5, atol=1e-6)


def test_dropout_is_deterministic():
    rng = np.random.default_rng(4)
    q, k, v = rand(rng, 1, 2, 8, 8), rand(rng, 1, 2, 8, 8), rand(rng, 1, 2, 8, 8)
    a = attn.sdpa(q, k, v, dropout_p=0.5, dropout_seed=11)
    np.testing.assert_array_equal(a, attn.sdpa(q, k, v, dropout_p=0.5, dropout_seed=11))
    assert not np.array_equal(a, attn.sdpa(q, k, v, dropout_p=0.5, dropout_seed=12))
    assert not np.array_equal(a, attn.sdpa(q, k, v))


def test_shape_errors():
    q = np.zeros((1, 2, 4, 8), np.float32)
    with pytest.raises(ValueError, match="k must be"):
        attn.sdpa(q, np.zeros((1, 2, 4, 4), np.float32), q)
    with pytest.raises(attn.AttnError, match="len_q"):
        attn.sdpa(np.zeros((1, 2, 0, 8), np.float32), q, q)


def test_typed_inputs_if_exported():
    """float16 q, k, v through the typed attn_sdpa, when the loaded library exports it."""
    if not attn.has_typed():
        pytest.skip("the loaded libattn does not export the typed attn_sdpa")
    rng = np.random.default_rng(8)
    q, k, v = (rand(rng, 1, 2, 6, 16).astype(np.float16) for _ in range(3))
    out = attn.sdpa(q, k, v, causal=True)
    assert out.dtype == np.float16
    ref = attn.sdpa(*(a.astype(np.float32) for a in (q, k, v)), causal=True)
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=2e-3, atol=2e-3)
