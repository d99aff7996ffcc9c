#!/usr/bin/env python3
"""One training step (forward, loss, backward, Adam) of a small causal transformer (2 layers,
d_model 256, 8 heads: tiny_transformer.py) with PyTorch's attention and with attn.torch, in
float32 and under torch.autocast("cpu", bfloat16); prints the best time of each and the ratio
(torch time / attn time: above 1, attn's step is faster).

PyTorch's attention is torch.nn.functional.scaled_dot_product_attention where it exists
(PyTorch 2), else softmax(q k^T / sqrt(D), causal) v written out (PyTorch 1.13, as
nn.MultiheadAttention computes it). Under autocast attn.torch receives bf16 q, k, v: the
forward runs attn_sdpa with BF16 types, the backward attn_sdpa_backward (or, when the library
lacks it, the f32 backward on widened values).
Run: ATTN_LIBRARY=build/src/libattn.so PYTHONPATH=python /usr/bin/python3 python/examples/train_step.py
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_transformer as tt  # noqa: E402

import attn  # noqa: E402
import attn.torch  # noqa: E402,F401


def fused_torch_attention(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def step_time(attention, args, autocast):
    torch.manual_seed(0)
    model = tt.TinyTransformer(16, args.len, attention=attention)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    tokens = tt.copy_batch(gen, args.batch, args.len // 2, 16)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = tt.copy_loss(model, tokens, args.len // 2)
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()  # warm up
    best = float("inf")
    for _ in range(args.reps):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--len", type=int, default=1024, help="tokens per sequence (even)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0,
                    help="threads of both torch and attn; 0 = all hardware threads")
    a = ap.parse_args()
    ctx = attn.Context(threads=a.threads)
    torch.set_num_threads(ctx.num_threads)  # the same number of threads for both

    def ours(q, k, v):
        return attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True, ctx=ctx)

    fused = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    theirs = fused_torch_attention if fused else tt.torch_attention
    print("attn %s (%s) vs torch %s (%s attention), %d threads; batch %d, len %d, d_model 256, "
          "8 heads, 2 layers" % (attn.version(), ctx.isa, torch.__version__,
                                 "fused" if fused else "written-out", torch.get_num_threads(),
                                 a.batch, a.len))
    print("%-16s %12s %12s %8s" % ("step", "torch ms", "attn ms", "ratio"))
    for name, autocast in (("float32", False), ("bf16 autocast", True)):
        try:
            t_torch = step_time(theirs, a, autocast)
        except RuntimeError as e:  # an op torch lacks in bf16 on this CPU
            print("%-16s torch fails: %s" % (name, str(e).splitlines()[0]))
            continue
        t_attn = step_time(ours, a, autocast)
        print("%-16s %12.1f %12.1f %8.2f" % (name, t_torch * 1e3, t_attn * 1e3, t_torch / t_attn))


if __name__ == "__main__":
    main()
