"""attn.quantize against NumPy: the rules of attn_quantize written with float32 NumPy
arithmetic (each step rounded as the library rounds it), compared bit for bit, and the
dequantized values against the float64 inputs within half a step of the type."""
import numpy as np
import pytest

import attn
from attn import _lib

pytestmark = pytest.mark.skipif(not _lib.has("attn_quantize"),
                                reason="the loaded libattn does not export attn_quantize")

F = np.float32
INT_RANGE = {"i8": (-128, 127), "u8": (0, 255), "i4": (-8, 7), "u4": (0, 15)}
FP8 = {"fp8_e4m3": (3, 7, 448.0), "fp8_e5m2": (2, 15, 57344.0)}


def fp8_values(name):
    """The values of the codes 0 .. 127 (NaN / inf where the format has them)."""
    m_bits, bias, _ = FP8[name]
    out = np.empty(128, np.float64)
    for c in range(128):
        e, m = c >> m_bits, c & ((1 << m_bits) - 1)
        if e == (1 << (7 - m_bits)) - 1 and (name == "fp8_e5m2" or m == (1 << m_bits) - 1):
            out[c] = np.nan if (m or name == "fp8_e4m3") else np.inf
        elif e == 0:
            out[c] = np.ldexp(m, 1 - bias - m_bits)
        else:
            out[c] = np.ldexp((1 << m_bits) + m, e - bias - m_bits)
    return out


def fp8_encode(v, name):
    """Nearest FP8 code of float32 v, ties to the even code, saturating; -0 keeps its sign."""
    vals = fp8_values(name)
    finite = vals[np.isfinite(vals)]
    a = np.abs(v).astype(np.float64)  # exact: the comparisons below need no rounding
    below = np.clip(np.searchsorted(finite, a, side="right") - 1, 0, len(finite) - 1)
    above = np.minimum(below + 1, len(finite) - 1)
    d_lo, d_hi = a - finite[below], finite[above] - a
    up = (d_hi < d_lo) | ((d_hi == d_lo) & (below % 2 == 1))
    code = np.where(up & (above != below), above, below)
    return (code | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


def numpy_quantize(x, name, group, zero_point):
    """(codes as ints [..., dim], scale, zero) by the rules, in float32."""
    x = x.astype(F)
    dim = x.shape[-1]
    g = dim if group == 0 else group
    xs = x.reshape(x.shape[:-1] + (dim // g, g))
    if name in FP8 or not zero_point:
        qmax = F(FP8[name][2]) if name in FP8 else F(INT_RANGE[name][1])
        scale = (np.max(np.abs(xs), axis=-1) / qmax).astype(F)
        zero = np.zeros_like(scale)
    else:
        qmin, qmax = F(INT_RANGE[name][0]), F(INT_RANGE[name][1])
        lo, hi = np.min(xs, axis=-1), np.max(xs, axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = ((hi - lo) / (qmax - qmin)).astype(F)
            zero = np.where(scale == 0, F(0), qmin - lo / scale).astype(F)
        equal = lo == hi
        scale = np.where(equal, np.abs(lo), scale).astype(F)
        zero = np.where(equal & (lo != 0), qmin - np.sign(lo), np.where(equal, F(0), zero)).astype(F)
    s, z = scale[..., None], zero[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        v = (xs / s).astype(F)
        if zero_point:
            v = (v + z).astype(F)
    if name in FP8:
        codes = fp8_encode(np.where(s == 0, F(0), v), name).astype(np.int64)
    else:
        lo_q = INT_RANGE[name][0] if zero_point else -INT_RANGE[name][1]
        codes = np.rint(np.clip(np.where(s == 0, F(0), v), lo_q, INT_RANGE[name][1]))
        codes = codes.astype(np.int64)
    return codes.reshape(x.shape), scale, zero


def unpack(q, name):
    """Codes as ints, whatever the storage."""
    if name in ("i4", "u4"):
        lo, hi = (q & 0xF).astype(np.int64), (q >> 4).astype(np.int64)
        codes = np.stack([lo, hi], axis=-1).reshape(q.shape[:-1] + (2 * q.shape[-1],))
        return np.where(codes >= 8, codes - 16, codes) if name == "i4" else codes
    return q.astype(np.int64)


CASES = [("i8", False), ("i8", True), ("u8", True), ("i4", False), ("i4", True), ("u4", True),
         ("fp8_e4m3", False), ("fp8_e5m2", False)]


@pytest.mark.parametrize("name,zero_point", CASES)
@pytest.mark.parametrize("group", [0, 2, 16])
def test_quantize_matches_numpy_bitwise(name, zero_point, group):
    rng = np.random.default_rng(len(name) + 10 * group + zero_point)
    x = (rng.standard_normal((3, 5, 48)) * np.array([1e-3, 1.0, 40.0])[:, None, None]).astype(F)
    x[0, 0, :16] = 0.0           # a zero group (or part of a row)
    x[1, 1, 16:32] = -2.5        # an all-equal group
    q, scale, zero = attn.quantize(x, name, group=group, zero_point=zero_point)
    want_codes, want_scale, want_zero = numpy_quantize(x, name, group, zero_point)
    if name in FP8:
        np.testing.assert_array_equal(q, want_codes.astype(np.uint8))
    else:
        np.testing.assert_array_equal(unpack(q, name), want_codes)
    np.testing.assert_array_equal(scale.view(np.uint32), want_scale.view(np.uint32))
    if zero_point:
        np.testing.assert_array_equal(zero.view(np.uint32), want_zero.view(np.uint32))
    else:
        assert zero is None


@pytest.mark.parametrize("name,zero_point", CASES)
def test_dequantized_values_within_half_a_step(name, zero_point):
    """In float64: |scale * (q - zero) - x| <= scale / 2 (integers; a little more for the
    f32 roundings of x / scale), or the FP8 half-ulp relative bound for normal values."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 2, (64, 32)).astype(F)
    q, scale, zero = attn.quantize(x, name, group=8, zero_point=zero_point)
    s = np.repeat(scale.astype(np.float64), 8, axis=-1)
    if name in FP8:
        vals = fp8_values(name)
        mags = vals[q & 0x7F]
        deq = s * np.where(q & 0x80, -mags, mags)
        m_bits = FP8[name][0]
        tol = np.abs(x) * 2.0 ** -(m_bits + 1) * (1 + 1e-6) + s * 2.0 ** -6
    else:
        z = np.repeat(zero.astype(np.float64), 8, axis=-1) if zero_point else 0.0
        deq = s * (unpack(q, name) - z)
        tol = s * 0.5 * (1 + 1e-4) + np.abs(x) * 1e-6
    assert np.all(np.abs(deq - x.astype(np.float64)) <= tol)


def test_sixteen_bit_inputs_and_errors():
    x = np.linspace(-4, 4, 64, dtype=F).reshape(2, 32)
    q16, s16, _ = attn.quantize(x.astype(np.float16), "i8")
    q32, s32, _ = attn.quantize(x.astype(np.float16).astype(F), "i8")
    np.testing.assert_array_equal(q16, q32)
    np.testing.assert_array_equal(s16, s32)
    bad = x.copy()
    bad[1, 7] = np.nan
    with pytest.raises(attn.AttnError, match="row 1, column 7"):
        attn.quantize(bad, "i8")
    with pytest.raises(attn.AttnError, match="zero"):
        attn.quantize(x, "u8")  # unsigned types need zero points
    with pytest.raises(attn.AttnError, match="group"):
        attn.quantize(x, "i8", group=5)
    with pytest.raises(ValueError):
        attn.quantize(x, "i3")
