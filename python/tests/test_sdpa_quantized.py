"""attn.sdpa (and its alias attn.sdpa_quantized) over quantized K/V caches against NumPy in
float64: K and V quantized by attn.quantize (every type, per row, per group of 16) or random codes
with scales per channel, per head or per tensor, with and without zero points, dequantized in
float64 from the codes, attention computed in float64; the library's output within 1e-5
(relative to 1 + |want|: f32 sums over a few dozen keys of values of order 1)."""
import numpy as np
import pytest

import attn
from attn import _lib, _tensors

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


def random_cache(rng, dtype, shape, granularity, zero_point):
    """A quantized K or V [B, H, L, D] at `granularity` (row, group16: attn.quantize of uniform
    values; channel, head, tensor: random codes with random scales and zero points). Returns
    (codes, scale, zero) as sdpa takes them and the values dequantized in float64."""
    B, H, L, D = shape
    pair = 2 if dtype in ("i4", "u4") else 1
    if granularity in ("row", "group16"):
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        q, s, z = attn.quantize(x, dtype, group=0 if granularity == "row" else 16, zero_point=zero_point)
        return q, s, z, dequantized(q, s, z, dtype, D)
    lo, hi = RANGES.get(dtype, (0, 255))
    codes = rng.integers(lo, hi + 1, shape)
    if dtype in FP8:  # finite codes: clear the top exponent bit
        codes &= 0xbf
    codes = (codes & 0xff).astype(np.uint8)
    q = (codes[..., 0::2] & 15 | (codes[..., 1::2] & 15) << 4).astype(np.uint8) if pair == 2 \
        else codes.view(np.int8) if dtype == "i8" else codes
    sshape = {"channel": (1, 1, 1, D // pair), "head": (1, H, 1, 1), "tensor": ()}[granularity]
    s = rng.uniform(0.5, 1.5, sshape).astype(np.float32) / max(hi, 8)
    z = rng.uniform(lo, hi, sshape).astype(np.float32) if zero_point else None
    full = lambda a: np.broadcast_to(np.asarray(a).reshape(np.shape(a) or (1, 1, 1, 1)),
                                     (B, H, L, np.shape(a)[-1] if np.ndim(a) else 1))
    return q, s, z, dequantized(q, full(s), None if z is None else full(z), dtype, D)


@pytest.mark.parametrize("dtype", ["i8", "u8", "i4", "u4", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("k_gran,v_gran", [("row", "row"), ("group16", "group16"),
                                           ("channel", "row"), ("head", "group16"),
                                           ("tensor", "channel")])
def test_sdpa_reads_quantized_cache(dtype, k_gran, v_gran):
    """attn.sdpa itself over a quantized cache, keys and values at granularities of their own,
    GQA, causal prefill (Lq 5 of Lk 37), against float64 attention on the dequantized values;
    within 1e-5 of max |want| + 1 as above. Also: attn.sdpa_quantized gives the same bits."""
    rng = np.random.default_rng(11)
    B, Hq, Hkv, Lq, Lk, D = 2, 4, 2, 5, 37, 32
    zero_point = dtype in ("u8", "u4") or (dtype == "i8" and k_gran == "row")
    kq, ks, kz, k64 = random_cache(rng, dtype, (B, Hkv, Lk, D), k_gran, zero_point)
    vq, vs, vz, v64 = random_cache(rng, dtype, (B, Hkv, Lk, D), v_gran, zero_point)
    q = rng.uniform(-1, 1, (B, Hq, Lq, D)).astype(np.float32)
    got, lse = attn.sdpa(q, kq, vq, causal="bottom_right", kv_dtype=dtype, k_scale=ks,
                         v_scale=vs, k_zero=kz, v_zero=vz, return_lse=True)
    rep = Hq // Hkv
    s = q.astype(np.float64) @ np.swapaxes(np.repeat(k64, rep, axis=1), -1, -2) / np.sqrt(D)
    s = np.where(np.arange(Lk)[None, :] <= np.arange(Lq)[:, None] + Lk - Lq, s, -np.inf)
    m = s.max(-1, keepdims=True)
    want = (np.exp(s - m) / np.exp(s - m).sum(-1, keepdims=True)) @ np.repeat(v64, rep, axis=1)
    want_lse = (m + np.log(np.exp(s - m).sum(-1, keepdims=True)))[..., 0]
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.max(np.abs(got - want) / (1 + np.abs(want))) <= 1e-5
    assert np.max(np.abs(lse - want_lse) / (1 + np.abs(want_lse))) <= 1e-5
    if k_gran == v_gran:
        again = attn.sdpa_quantized(q, kq, vq, dtype, ks, vs, kz, vz, causal="bottom_right")
        assert np.array_equal(again, got)


@pytest.mark.parametrize("dtype", ["i8", "i4"])
def test_sdpa_quantized_cache_bshd_view(dtype):
    """A BSHD cache of capacity 48 holding 29 keys, passed as the slice k[:, :29] (strided, not
    copied: the strides reach the library) with its scales sliced alike, bf16 queries (as uint16
    bit patterns) and a bf16 output; against float64 on the dequantized values and the bf16
    queries' values, within 2^-8 relative (the output rounded once to bf16) + 1e-5."""
    rng = np.random.default_rng(12)
    B, H, cap, Lk, D = 1, 2, 48, 29, 64
    x = rng.uniform(-1, 1, (B, cap, H, D)).astype(np.float32)
    kq, ks, _ = attn.quantize(x, dtype, group=32)
    vq, vs, _ = attn.quantize(x[..., ::-1].copy(), dtype, group=0)
    qf = rng.uniform(-1, 1, (B, 3, H, D)).astype(np.float32)
    qb = (qf.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16: exact in float64
    q64 = (qb.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    copies = _tensors.copies
    got = attn.sdpa(qb, kq[:, :Lk], vq[:, :Lk], layout="bshd", kv_dtype=dtype,
                    k_scale=ks[:, :Lk], v_scale=vs[:, :Lk])
    assert _tensors.copies == copies
    assert got.dtype == np.uint16 and got.shape == (B, 3, H, D)
    k64 = dequantized(kq[:, :Lk], ks[:, :Lk], None, dtype, D).transpose(0, 2, 1, 3)
    v64 = dequantized(vq[:, :Lk], vs[:, :Lk], None, dtype, D).transpose(0, 2, 1, 3)
    want = attention64(q64.transpose(0, 2, 1, 3), k64, v64, 1).transpose(0, 2, 1, 3)
    out = (got.astype(np.uint32) << 16).view(np.float32)
    assert np.all(np.abs(out - want) <= 2 ** -8 * np.abs(want) + 1e-5)


def test_sdpa_quantized_cache_rejections():
    """What sdpa refuses before calling the library, and what the library refuses."""
    rng = np.random.default_rng(13)
    q = rng.uniform(-1, 1, (1, 1, 2, 16)).astype(np.float32)
    kq, ks, _ = attn.quantize(q, "i8")
    with pytest.raises(ValueError, match="kv_dtype"):  # uint8 codes could be any type
        attn.sdpa(q, kq.view(np.uint8), kq.view(np.uint8), k_scale=ks, v_scale=ks)
    with pytest.raises(ValueError, match="quantized"):  # scales with a float cache
        attn.sdpa(q, q, q, k_scale=ks)
    with pytest.raises(ValueError, match="kv_dtype"):
        attn.sdpa(q, kq, kq, kv_dtype="q8_0", k_scale=ks, v_scale=ks)
    with pytest.raises(attn.AttnError, match="k_scale"):  # integer codes need their scales
        attn.sdpa(q, kq, kq, v_scale=ks)
    assert np.array_equal(attn.sdpa(q, kq, kq, k_scale=ks, v_scale=ks),  # int8: "i8"
                          attn.sdpa(q, kq, kq, kv_dtype="i8", k_scale=ks, v_scale=ks))


def test_sdpa_quantized_cache_with_mask_and_kv_len():
    """The float cache's options reach the call with a quantized one: an additive mask
    broadcast over heads and kv_len per sequence, over an I8 cache with zero points per group
    of 16 (keys) and per row (values); float64 oracle on the dequantized values, 1e-5."""
    rng = np.random.default_rng(14)
    B, H, Lq, Lk, D = 2, 2, 4, 23, 32
    kq, ks, kz, k64 = random_cache(rng, "i8", (B, H, Lk, D), "group16", True)
    vq, vs, vz, v64 = random_cache(rng, "i8", (B, H, Lk, D), "row", True)
    q = rng.uniform(-1, 1, (B, H, Lq, D)).astype(np.float32)
    mask = rng.uniform(-2, 2, (B, 1, Lq, Lk)).astype(np.float32)
    kv_len = np.array([17, 23], np.int32)
    got = attn.sdpa(q, kq, vq, mask=mask, kv_len=kv_len, k_scale=ks, v_scale=vs, k_zero=kz,
                    v_zero=vz)
    s = q.astype(np.float64) @ np.swapaxes(k64, -1, -2) / np.sqrt(D) + mask
    s = np.where(np.arange(Lk)[None, None, None, :] < kv_len[:, None, None, None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = p / p.sum(-1, keepdims=True) @ v64
    assert np.max(np.abs(got - want) / (1 + np.abs(want))) <= 1e-5


@pytest.mark.parametrize("dtype,group,zero_point", [("i8", 0, True), ("i4", 16, False),
                                                    ("fp8_e4m3", 0, False)])
def test_packed_sequences_over_a_quantized_cache(dtype, group, zero_point):
    """cu_seqlens with a quantized cache: each sequence's rows bit for bit the same sequence
    alone (the library's batch invariance), and float64 on the dequantized values within 1e-5."""
    rng = np.random.default_rng(11)
    lengths = [(5, 40), (1, 90), (0, 7), (3, 3)]  # (queries, keys) per sequence
    Hq, Hkv, D = 4, 2, 32
    cu_q = np.cumsum([0] + [n for n, _ in lengths]).astype(np.int32)
    cu_k = np.cumsum([0] + [m for _, m in lengths]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], Hq, D)).astype(np.float32)
    kf = rng.standard_normal((cu_k[-1], Hkv, D)).astype(np.float32)
    vf = rng.standard_normal((cu_k[-1], Hkv, D)).astype(np.float32)
    kq, ks, kz = attn.quantize(kf, dtype, group=group, zero_point=zero_point)
    vq, vs, vz = attn.quantize(vf, dtype, group=group, zero_point=zero_point)
    out, lse = attn.sdpa(q, kq, vq, causal="bottom_right", cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                         kv_dtype=dtype, k_scale=ks, v_scale=vs, k_zero=kz, v_zero=vz,
                         return_lse=True)
    kd, vd = dequantized(kq, ks, kz, dtype, D), dequantized(vq, vs, vz, dtype, D)
    for b, (n, m) in enumerate(lengths):
        if n == 0:
            continue
        rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        sl = lambda x: None if x is None else x[rk][None]  # noqa: E731
        alone, lse1 = attn.sdpa(q[rq][None], kq[rk][None], vq[rk][None], causal="bottom_right",
                                layout="bshd", kv_dtype=dtype, k_scale=sl(ks), v_scale=sl(vs),
                                k_zero=sl(kz), v_zero=sl(vz), return_lse=True)
        assert np.array_equal(out[rq], alone[0]), "sequence %d" % b
        assert np.array_equal(lse[rq], lse1[0].T), "lse of sequence %d" % b
        # float64: s = q k^T / sqrt(D), key j visible to query i when j <= i + m - n
        s = np.einsum("ihd,jhd->hij", q[rq].astype(np.float64),
                      np.repeat(kd[rk], Hq // Hkv, axis=1)) / np.sqrt(D)
        s = np.where(np.arange(m)[None, None, :] <= np.arange(n)[None, :, None] + m - n, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        want = np.einsum("hij,jhd->ihd", p / p.sum(-1, keepdims=True),
                         np.repeat(vd[rk], Hq // Hkv, axis=1))
        assert np.max(np.abs(out[rq] - want) / (1 + np.abs(want))) <= 1e-5, "sequence %d" % b
