"""The package without torch: loading, Context, errors, gemm, softmax, merge, convert, the
seed's worked example, and that the ctypes structures match attn.h field for field."""
import os
import re

import numpy as np
import pytest

import attn
from attn import _lib, _tensors
from helpers import rand

Q = np.array([[1, 0], [0, 1], [1, 1]], np.float32)[None, None]
V = np.array([[1, 0], [0, 2], [3, 1]], np.float32)[None, None]


def test_version_and_library():
    assert attn.version() == "0.3.0" == attn.__version__
    assert os.path.basename(attn.library_path()).startswith("libattn")


def test_seed_worked_example():
    out, w = attn.sdpa(Q, Q, V, return_weights=True)
    np.testing.assert_allclose(out[0, 0], [[1.6044, 0.7967], [1.4011, 1.2033], [1.7587, 1.0]],
                               atol=5e-5)
    np.testing.assert_allclose(w[0, 0], [[0.4011, 0.1978, 0.4011], [0.1978, 0.4011, 0.4011],
                                         [0.2483, 0.2483, 0.5035]], atol=5e-5)
    _, wc = attn.sdpa(Q, Q, V, causal=True, return_weights=True)
    np.testing.assert_allclose(wc[0, 0, 1], [0.3302, 0.6698, 0.0], atol=5e-5)
    np.testing.assert_array_equal(wc[0, 0, 0], [1.0, 0.0, 0.0])


@pytest.mark.parametrize("impl", ["reference", "simd", "auto"])
def test_context(impl):
    with attn.Context(impl=impl, threads=1) as c:
        assert c.num_threads == 1
        assert (c.isa == "scalar") == (impl == "reference")
        out = attn.sdpa(Q, Q, V, ctx=c)
        np.testing.assert_allclose(out[0, 0, 0], [1.6044, 0.7967], atol=5e-5)
    with pytest.raises(ValueError, match="closed"):
        attn.sdpa(Q, Q, V, ctx=c)
    with pytest.raises(ValueError, match="impl"):
        attn.Context(impl="fast")


def test_errors_carry_status_and_message():
    q = np.zeros((1, 3, 4, 8), np.float32)
    k = np.zeros((1, 2, 4, 8), np.float32)
    with pytest.raises(attn.AttnError) as e:
        attn.sdpa(q, k, k)
    assert isinstance(e.value, RuntimeError)
    assert e.value.status_name == "ATTN_INVALID_ARGUMENT" and e.value.status == 1
    assert "heads_q = 3" in e.value.message and "heads_kv = 2" in e.value.message
    assert e.value.function == "attn_sdpa_f32"
    with pytest.raises(attn.AttnError, match="dropout_p"):
        attn.sdpa(q, q, q, dropout_p=1.5)
    if os.uname().machine == "x86_64":
        try:
            attn.Context(isa="amx").close()
        except attn.AttnError as err:
            assert err.status_name == "ATTN_UNSUPPORTED"


def test_gemm_layouts_without_copies():
    rng = np.random.default_rng(1)
    a, b = rand(rng, 5, 7), rand(rng, 7, 3)
    ref = a.astype(np.float64) @ b
    before = _tensors.copies
    np.testing.assert_allclose(attn.gemm(a, b), ref, rtol=1e-5, atol=1e-5)
    at = np.ascontiguousarray(a.T).T  # column-major view of the same values
    np.testing.assert_allclose(attn.gemm(at, b), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(attn.gemm(a.T, b, trans_a=True), ref, rtol=1e-5, atol=1e-5)
    big = rand(rng, 9, 11)
    sub = big[1:6, 2:9]  # leading dim 11, a strided block
    np.testing.assert_allclose(attn.gemm(sub, b), sub.astype(np.float64) @ b, rtol=1e-5,
                               atol=1e-5)
    assert _tensors.copies == before
    c = np.ones((5, 3), np.float32)
    r = attn.gemm(a, b, alpha=2.0, beta=-1.0, c=c)
    assert r is c
    np.testing.assert_allclose(c, 2 * ref - 1, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        attn.gemm(a, a)


def test_softmax_and_merge():
    rng = np.random.default_rng(2)
    x = rand(rng, 4, 6)
    e = np.exp(0.5 * x.astype(np.float64))
    np.testing.assert_allclose(attn.softmax(x, scale=0.5), e / e.sum(1, keepdims=True),
                               rtol=1e-6, atol=1e-7)
    y = x.copy()
    assert attn.softmax(y, out=y) is y
    np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)
    # Split the keys in two, merge the parts: equals attention over all keys.
    q, k, v = rand(rng, 1, 2, 5, 4), rand(rng, 1, 2, 9, 4), rand(rng, 1, 2, 9, 3)
    full, lse = attn.sdpa(q, k, v, return_lse=True)
    parts = [attn.sdpa(q, k[:, :, s], v[:, :, s], return_lse=True)
             for s in (slice(0, 4), slice(4, 9))]
    out, lse2 = attn.merge([p[0] for p in parts], [p[1] for p in parts])
    np.testing.assert_allclose(out, full, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse2, lse, rtol=1e-5, atol=1e-6)


def test_convert_if_exported():
    if not _lib.has("attn_convert"):
        assert not hasattr(attn, "convert")
        pytest.skip("the loaded libattn does not export attn_convert")
    x = np.array([1.0, 3.14159265, -2.5, 65504.0, 1e-8], np.float32)
    np.testing.assert_array_equal(attn.convert(x, "f16"), x.astype(np.float16))
    bf = attn.convert(x, "bf16")
    assert bf.dtype == np.uint16 and bf[0] == 0x3F80 and bf[2] == 0xC020
    assert bf[1] == 0x4049  # pi rounds to nearest even: 0x40490FDB -> 0x4049
    np.testing.assert_array_equal(attn.convert(bf, "f32")[:3], [1.0, 3.140625, -2.5])


def _header_fields(header, struct):
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), header, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        type_and_first, *rest = decl.split(",")
        names.append(re.findall(r"\w+", type_and_first)[-1])
        names += [re.findall(r"\w+", r)[-1] for r in rest]
    return names


@pytest.mark.parametrize("struct", ["attn_config", "attn_layout", "attn_sdpa_desc",
                                    "attn_mha_desc", "attn_mha_grads"])
def test_structures_match_attn_h(struct):
    path = os.path.join(os.path.dirname(__file__), "..", "..", "include", "attn", "attn.h")
    if not os.path.exists(path):
        pytest.skip("attn.h is not beside this source tree")
    with open(path) as f:
        header = f.read()
    assert [n for n, _ in getattr(_lib, struct)._fields_] == _header_fields(header, struct)


def test_gemm_typed_bf16_f16_against_float64():
    """attn_gemm through attn.gemm: bf16 (uint16 bits) and f16 inputs, f32 and f16 outputs,
    against float64 on the stored values (products of 16-bit values summed in f32)."""
    rng = np.random.default_rng(5)
    a32 = rng.standard_normal((17, 33)).astype(np.float32)
    b32 = rng.standard_normal((33, 9)).astype(np.float32)
    a16 = attn.convert(a32, "bf16")
    b16 = b32.astype(np.float16)
    a_vals = attn.convert(a16, "f32").astype(np.float64)
    want = a_vals @ b16.astype(np.float64)
    got = attn.gemm(a16, b16)
    assert got.dtype == np.float32
    assert np.max(np.abs(got - want)) <= 1e-5 * (1 + np.max(np.abs(want)))
    half = attn.gemm(a16, b16, c_dtype=np.float16)
    assert half.dtype == np.float16
    assert np.max(np.abs(half.astype(np.float64) - want)) <= 2 ** -10 * (1 + np.max(np.abs(want)))
    with pytest.raises(ValueError):
        attn.gemm(a16, b16[:5])
