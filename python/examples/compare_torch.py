#!/usr/bin/env python3
"""attn against PyTorch: max abs error (against a float64 torch computation) and time.

SDPA: softmax(Q K^T / sqrt(D)) V in torch float32 (explicit formula: torch 1.13 has no fused
SDPA) against attn.sdpa; MHA: nn.MultiheadAttention(batch_first=True) against attn.mha_forward
with the same weights. Times are the best of a few runs; ratio = attn time / torch time.
Run: ATTN_LIBRARY=build/src/libattn.so PYTHONPATH=python /usr/bin/python3 python/examples/compare_torch.py
"""
import argparse
import time

import numpy as np
import torch

import attn


def best(fn, reps):
    fn()
    t = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def torch_sdpa(q, k, v, causal):
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        L, S = q.shape[-2], k.shape[-2]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def row(kind, shape, err, t_attn, t_torch):
    print("%-5s %-28s %10.2e %10.3f %10.3f %7.2f" % (kind, shape, err, t_attn * 1e3,
                                                      t_torch * 1e3, t_attn / t_torch))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="0 = all hardware threads (both)")
    a = ap.parse_args()
    ctx = attn.Context(threads=a.threads)
    torch.set_num_threads(ctx.num_threads)  # the same number of threads for both
    rng = np.random.default_rng(0)
    print("attn %s (%s, %d threads) vs torch %s (%d threads)" % (
        attn.version(), ctx.isa, ctx.num_threads, torch.__version__, torch.get_num_threads()))
    print("%-5s %-28s %10s %10s %10s %7s" % ("op", "shape", "max|err|", "attn ms", "torch ms",
                                             "ratio"))
    with torch.no_grad():
        for B, H, L, D, causal in [(1, 8, 128, 64, False), (2, 8, 256, 64, True),
                                   (1, 16, 512, 64, True), (4, 8, 64, 128, False)]:
            q, k, v = (rng.standard_normal((B, H, L, D)).astype(np.float32) for _ in range(3))
            tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
            ref = torch_sdpa(tq.double(), tk.double(), tv.double(), causal).numpy()
            out = attn.sdpa(q, k, v, causal=causal, ctx=ctx)
            t_a = best(lambda: attn.sdpa(q, k, v, causal=causal, ctx=ctx), a.reps)
            t_t = best(lambda: torch_sdpa(tq, tk, tv, causal), a.reps)
            row("sdpa", "B%d H%d L%d D%d%s" % (B, H, L, D, " causal" if causal else ""),
                np.abs(out - ref).max(), t_a, t_t)
        for B, L, E, H in [(2, 128, 256, 8), (4, 256, 512, 8)]:
            torch.manual_seed(0)
            m = torch.nn.MultiheadAttention(E, H, batch_first=True)
            x = rng.standard_normal((B, L, E)).astype(np.float32)
            tx = torch.from_numpy(x)
            w = m.in_proj_weight.detach().numpy()
            b = m.in_proj_bias.detach().numpy()
            args = dict(w_q=w[:E], w_k=w[E:2 * E], w_v=w[2 * E:],
                        w_o=m.out_proj.weight.detach().numpy(), b_q=b[:E], b_k=b[E:2 * E],
                        b_v=b[2 * E:], b_o=m.out_proj.bias.detach().numpy(), heads=H, ctx=ctx)
            m64 = torch.nn.MultiheadAttention(E, H, batch_first=True).double()
            m64.load_state_dict(m.state_dict())
            ref = m64(tx.double(), tx.double(), tx.double(), need_weights=False)[0].numpy()
            y = attn.mha_forward(x, None, **args)
            t_a = best(lambda: attn.mha_forward(x, None, **args), a.reps)
            t_t = best(lambda: m(tx, tx, tx, need_weights=False), a.reps)
            row("mha", "B%d L%d E%d H%d" % (B, L, E, H), np.abs(y - ref).max(), t_a, t_t)
    ctx.close()


if __name__ == "__main__":
    main()
