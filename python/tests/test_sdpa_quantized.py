"""attn.sdpa_quantized against NumPy in float64: K and V quantized by attn.quantize (every type,
per row, per group of 16, per channel as a broadcast [1, 1, 1, D] scale, with and without zero
points), dequantized in float64 from the codes, attention computed in float64; the library's
output within 1e-5 (relative to 1 + |want|: f32 sums over a few dozen keys of values of order 1)."""
import numpy as np
import pytest

import attn
from attn import _lib

pytestmark = pytest.mark.skipif(not _lib.has("attn_quantize") or not _lib.has("attn_sdpa"),
                                reason="the loaded libattn has no attn_quantize or attn_sdpa")

FP8 = {"fp8_e4m3": (3, 7), "fp8_e5m2": (2, 15)}
RANGES = {"i8": (-128, 127), "u8": (0, 255), "i4": (-8, 7), "u4": (0, 15)}


def codes_to_values(q, dtype):
    """The raw values (before scale and zero point) of the codes, float64 [..., dim]."""
    q = np.asarray(q)
    if dtype in ("i4", "u4"):
        b = q.astype(np.uint8)
        n = np.stack([b & 15, b >> 4], axis=-1).reshape(b.shape[:-1] + (2 * b.shape[-1],)).astype(np.int64)
        return np.where(n >= 8, n - 16, n).astype(np.float64) if dtype == "i4" else n.astype(np.float64)
    if dtype in FP8:
        m_bits, bias = FP8[dtype]
        c = q.astype(np.uint8).astype(np.int64)
        sign = np.where(c & 0x80, -1.0, 1.0)
        e, m = (c & 0x7f) >> m_bits, c & ((1 << m_bits) - 1)
        normal = np.ldexp(((1 << m_bits) + m).astype(np.float64), (e - bias - m_bits).astype(np.int64))
        sub = np.ldexp(m.astype(np.float64), 1 - bias - m_bits)
        return sign * np.where(e == 0, sub, normal)
    return q.astype(np.float64)


def dequantized(q, scale, zero, dtype, dim):
    x = codes_to_values(q, dtype)
    groups = scale.shape[-1]
    s = np.repeat(scale.astype(np.float64), dim // groups, axis=-1)
    z = 0.0 if zero is None else np.repeat(zero.astype(np.float64), dim // groups, axis=-1)
    return s * (x - z)


def attention64(q, k, v, group):
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("dtype", ["i8", "u8", "i4", "u4", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("granularity", ["row", "group16", "channel"])
@pytest.mark.parametrize("len_q", [1, 7])
def test_sdpa_quantized_matches_numpy(dtype, granularity, len_q):
    rng = np.random.default_rng(5)
    B, Hq, Hkv, Lk, D = 2, 4, 2, 37, 32
    q = rng.uniform(-1, 1, (B, Hq, len_q, D)).astype(np.float32)
    kf = rng.uniform(-1, 1, (B, Hkv, Lk, D)).astype(np.float32)
    vf = rng.uniform(-1, 1, (B, Hkv, Lk, D)).astype(np.float32)
    zero_point = dtype in ("u8", "u4")  # (they need them; the signed types go without)
    if granularity == "channel":  # random codes, a scale (and zero) per channel, broadcast
        pair = 2 if dtype in ("i4", "u4") else 1
        lo, hi = RANGES.get(dtype, (0, 255))
        codes = rng.integers(lo, hi + 1, (B, Hkv, Lk, D))
        if dtype in FP8:  # finite codes: clear the top exponent bit
            codes &= 0xbf
        codes = (codes & 0xff).astype(np.uint8)
        kq = (codes[..., 0::2] & 15 | (codes[..., 1::2] & 15) << 4).astype(np.uint8) if pair == 2 \
            else codes.view(np.int8) if dtype == "i8" else codes
        k_scale_arg = rng.uniform(0.5, 1.5, (1, 1, 1, D // pair)).astype(np.float32) / max(hi, 8)
        k_zero_arg = (rng.uniform(lo, hi, (1, 1, 1, D // pair)).astype(np.float32)
                      if zero_point else None)
        k_scale_full = np.broadcast_to(k_scale_arg, (B, Hkv, Lk, D // pair))
        k_zero_full = None if k_zero_arg is None else np.broadcast_to(k_zero_arg, k_scale_full.shape)
    else:
        group = 0 if granularity == "row" else 16
        kq, k_scale_full, k_zero_full = attn.quantize(kf, dtype, group=group, zero_point=zero_point)
        k_scale_arg, k_zero_arg = k_scale_full, k_zero_full
    vq, v_scale, v_zero = attn.quantize(vf, dtype, group=0 if granularity != "group16" else 16,
                                        zero_point=zero_point)
    got = attn.sdpa_quantized(q, kq, vq, dtype, k_scale_arg, v_scale, k_zero_arg, v_zero)
    k64 = dequantized(kq, np.asarray(k_scale_full),
                      None if k_zero_full is None else np.asarray(k_zero_full), dtype, D)
    v64 = dequantized(vq, v_scale, v_zero, dtype, D)
    want = attention64(q, k64, v64, Hq // Hkv)
    assert got.shape == want.shape
    err = np.max(np.abs(got - want) / (1 + np.abs(want)))
    assert err <= 1e-5, err
