"""attn.sdpa over packed sequences (cu_seqlens_q / cu_seqlens_k): each sequence's rows equal,
bit for bit, the same sequence in a call of its own (the library's batch invariance), and
match torch's float64 attention of that sequence (tolerance rule of helpers.check_close)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is needed for the comparisons "
                                            "(apt-get install python3-torch)")

import attn  # noqa: E402
from helpers import check_close, torch_sdpa  # noqa: E402

# (queries, keys) per sequence: a prefill, a decoding token, an empty sequence, a short one
LENGTHS = [(17, 40), (1, 300), (0, 5), (6, 6)]


@pytest.mark.parametrize("causal", [False, "bottom_right", "top_left"])
def test_packed_matches_per_sequence_and_torch(causal):
    rng = np.random.default_rng(7)
    Hq, Hkv, D = 4, 2, 16
    cu_q = np.cumsum([0] + [n for n, _ in LENGTHS]).astype(np.int32)
    cu_k = np.cumsum([0] + [m for _, m in LENGTHS]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], Hq, D)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], Hkv, D)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], Hkv, D)).astype(np.float32)
    out, lse = attn.sdpa(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                         return_lse=True)
    assert out.shape == (cu_q[-1], Hq, D) and lse.shape == (cu_q[-1], Hq)
    for b, (n, m) in enumerate(LENGTHS):
        if n == 0:
            continue
        qb, kb, vb = q[cu_q[b]:cu_q[b + 1]], k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]]
        alone, lse1 = attn.sdpa(qb[None], kb[None], vb[None], causal=causal, layout="bshd",
                                return_lse=True)
        assert np.array_equal(out[cu_q[b]:cu_q[b + 1]], alone[0]), "sequence %d" % b
        assert np.array_equal(lse[cu_q[b]:cu_q[b + 1]], lse1[0].T), "lse of sequence %d" % b
        args = [a.transpose(1, 0, 2)[None].astype(np.float64) for a in (qb, kb, vb)]
        ref64, _ = torch_sdpa(torch, *args, torch.float64, causal=causal or None)
        ref32, _ = torch_sdpa(torch, *[a.astype(np.float32) for a in args], torch.float32,
                              causal=causal or None)
        check_close(out[cu_q[b]:cu_q[b + 1]].transpose(1, 0, 2)[None], ref64.detach().numpy(),
                    ref32.detach().numpy(), "sequence %d" % b)


def test_packed_rejects_a_decreasing_start():
    q = np.zeros((3, 1, 4), np.float32)
    with pytest.raises(Exception, match="cu|q_start"):
        attn.sdpa(q, q, q, cu_seqlens_q=[0, 2, 1], cu_seqlens_k=[0, 2, 3])
