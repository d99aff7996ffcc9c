"""attn.sdpa's keyword arguments for today's models (window, softcap, alibi_slopes, sinks,
causal="bottom_right_kv_len") against a float64 NumPy computation written from attn.h's rules."""
import numpy as np
import pytest

import attn


def _reference(q, k, v, window, softcap, slopes, sinks, causal):
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(D)
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    at = np.arange(Lq)[:, None] + (Lk - Lq)            # i' (bottom-right alignment)
    j = np.arange(Lk)[None, :]
    s = s - slopes[None, :, None, None] * np.abs(at - j)[None, None]
    visible = np.ones((Lq, Lk), bool)
    if causal:
        visible &= j <= at
    if window[0] >= 0:
        visible &= j >= at - window[0]
    if window[1] >= 0:
        visible &= j <= at + window[1]
    s = np.where(visible[None, None], s, -np.inf)
    m = np.maximum(s.max(-1, keepdims=True), sinks[None, :, None, None])
    e = np.exp(s - m)
    denom = e.sum(-1, keepdims=True) + np.exp(sinks[None, :, None, None] - m)
    return np.einsum("bhij,bhjd->bhid", e / denom, v.astype(np.float64)), (m + np.log(denom))[..., 0]


def test_window_softcap_alibi_sinks_match_numpy():
    rng = np.random.default_rng(7)
    B, H, Lq, Lk, D = 2, 4, 9, 40, 16
    q = rng.uniform(-3, 3, (B, H, Lq, D)).astype(np.float32)
    k = rng.uniform(-1, 1, (B, H, Lk, D)).astype(np.float32)
    v = rng.uniform(-1, 1, (B, H, Lk, D)).astype(np.float32)
    slopes = (2.0 ** (-8.0 * np.arange(1, H + 1) / H)).astype(np.float32)
    sinks = np.array([1.0, -1.0, 10.0, -10.0], np.float32)
    for causal, window in (("bottom_right", (6, -1)), (False, (5, 2))):
        out, lse = attn.sdpa(q, k, v, causal=causal, window=window, softcap=4.0,
                             alibi_slopes=slopes, sinks=sinks, return_lse=True)
        want, want_lse = _reference(q, k, v, window, 4.0, slopes.astype(np.float64),
                                    sinks.astype(np.float64), bool(causal))
        np.testing.assert_allclose(out, want, rtol=0, atol=3e-5)
        np.testing.assert_allclose(lse, want_lse, rtol=0, atol=3e-5)


def test_dsinks_match_finite_differences():
    rng = np.random.default_rng(8)
    B, H, L, D = 1, 2, 6, 8
    q, k, v = (rng.uniform(-1, 1, (B, H, L, D)).astype(np.float32) for _ in range(3))
    dout = rng.uniform(-1, 1, (B, H, L, D))
    sinks = np.array([0.5, -0.25], np.float32)
    zeros = np.zeros(H)
    out = attn.sdpa(q, k, v, causal=True, sinks=sinks)
    _, _, _, dsinks = attn.sdpa_backward(q, k, v, out, dout.astype(np.float32), causal=True,
                                         sinks=sinks)
    for h in range(H):
        step = np.zeros(H)
        step[h] = 1e-6
        up = _reference(q, k, v, (-1, -1), 0.0, zeros, sinks + step, True)[0]
        down = _reference(q, k, v, (-1, -1), 0.0, zeros, sinks - step, True)[0]
        assert abs(dsinks[h] - ((up - down) * dout).sum() / 2e-6) < 1e-4


def test_kv_len_alignment_keyword():
    rng = np.random.default_rng(9)
    q = rng.uniform(-1, 1, (2, 2, 3, 8)).astype(np.float32)
    k = rng.uniform(-1, 1, (2, 2, 10, 8)).astype(np.float32)
    v = rng.uniform(-1, 1, (2, 2, 10, 8)).astype(np.float32)
    out = attn.sdpa(q, k, v, causal="bottom_right_kv_len", kv_len=[10, 6])
    # sequence 1 on its own 6 keys, its 3 queries the last 3 positions
    alone = attn.sdpa(q[1:], k[1:, :, :6], v[1:, :, :6], causal="bottom_right")
    np.testing.assert_array_equal(out[1:], alone)


def test_sdpa_backward_16_bit():
    """float16 arrays: gradients in float16 through the typed attn_sdpa_backward when the
    library exports it (within a float16 rounding of the float32 backward of the same values:
    each gradient is rounded once), else a ValueError naming the missing call."""
    rng = np.random.default_rng(11)
    q, k, v, dout = (rng.standard_normal((1, 2, 6, 16)).astype(np.float16) for _ in range(4))
    out = attn.sdpa(q, k, v, causal=True)
    if not attn._has("attn_sdpa_backward"):
        with pytest.raises(ValueError, match="attn_sdpa_backward"):
            attn.sdpa_backward(q, k, v, out, dout, causal=True)
        return
    grads = attn.sdpa_backward(q, k, v, out, dout, causal=True)
    wide = attn.sdpa_backward(*(a.astype(np.float32) for a in (q, k, v, out, dout)), causal=True)
    for g, w in zip(grads, wide):
        assert g.dtype == np.float16
        # float16 unit roundoff 2^-11; twice it allows the typed path's own f32 rounding order
        assert np.linalg.norm(g.astype(np.float32) - w) <= 2 ** -10 * np.linalg.norm(w)
