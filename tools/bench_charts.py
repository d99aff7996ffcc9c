"""The charts of tools/bench_report.py: one function per PNG, each taking a Run (all
results of one attn_bench run) and returning the file written, or None when the run has
nothing to draw for it."""

import os
import re

import numpy as np

from bench_report import ISA_ORDER, REFERENCE, SIMD, shape_numbers


def save(plt, fig, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def series_label(r):
    if r.impl == SIMD:
        return f"attn simd {r.isa}"
    if r.impl == REFERENCE:
        return "attn reference"
    if r.op.startswith("sdpa"):  # attention composed from the peer's gemm and attn's softmax
        return f"{r.impl} gemm + softmax + gemm"
    return r.impl if r.isa in ("-", "") else f"{r.impl} {r.isa}"


def series_rank(label):
    """Legend order: the reference, the ISAs narrowest first, then the peers."""
    if "reference" in label:
        return (0, label)
    for k, isa in enumerate(ISA_ORDER):
        if label.endswith(" " + isa):
            return (1 + k, label)
    return (len(ISA_ORDER) + 1, label)


def chart_sdpa_seq_len(run, plt, out_dir, dim):
    """GFLOP/s against sequence length for each implementation, one head dimension, one
    thread (like for like with the reference, and least disturbed by a shared machine)."""
    points = {}
    for r in run.select(op="sdpa"):
        f = shape_numbers(r.shape)
        if f.get("D") != dim or "L" not in f or r.gflops is None:
            continue
        if r.threads != 1:
            continue
        variant = re.sub(r"L\d+", "L", r.shape)
        points.setdefault(variant, {}).setdefault(series_label(r), []).append((f["L"], r.gflops))
    if not points:
        return None
    # one variant per chart: the plain (non-causal) one when measured, else the fullest
    variant = max(points, key=lambda v: ("causal" not in v, sum(map(len, points[v].values()))))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, pts in sorted(points[variant].items(), key=lambda kv: series_rank(kv[0])):
        pts.sort()
        style = "--" if "reference" in label else "-"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length L (len_q = len_kv)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"sdpa forward, {variant.replace('_', ' ')}, 1 thread")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(plt, fig, out_dir, f"sdpa_seq_len_d{dim}.png")


def chart_gemm(run, plt, out_dir):
    """GFLOP/s per gemm shape: attn (best ISA) against OpenBLAS and oneDNN, 1 and N threads."""
    shapes = run.shapes("gemm")
    isa = run.best_isa("gemm")
    impls = [("simd", isa)] + [(p, None) for p in run.peers("gemm")]
    threads = sorted({1, max(run.thread_counts(), default=1)})
    if not shapes or isa is None:
        return None
    fig, axes = plt.subplots(1, len(threads), figsize=(6 * len(threads), 4.5), squeeze=False)
    width = 0.8 / len(impls)
    for ax, t in zip(axes[0], threads):
        x = np.arange(len(shapes))
        for k, (impl, i) in enumerate(impls):
            vals = []
            for s in shapes:
                r = run.one(op="gemm", impl=impl, isa=i, threads=t, shape=s)
                vals.append(r.gflops if r and r.gflops else 0.0)
            label = f"attn simd {isa}" if impl == "simd" else impl
            ax.bar(x + (k - (len(impls) - 1) / 2) * width, vals, width, label=label)
        ax.set_xticks(x)
        ax.set_xticklabels(shapes, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"gemm, {t} thread{'s' if t > 1 else ''}")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return save(plt, fig, out_dir, "gemm_gflops.png")


def chart_thread_scaling(run, plt, out_dir):
    """Speed-up t(1)/t(n) against threads, for the largest shape of each op (SIMD, best ISA)."""
    counts = run.thread_counts()
    if len(counts) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for op in run.ops():
        isa = run.best_isa(op)
        if isa is None:
            continue
        impls = [(SIMD, isa, f"attn {isa}")] + [(p, None, p) for p in run.peers(op)]
        for impl, i, label_impl in impls:
            timed = lambda t, s: run.one(op=op, impl=impl, isa=i, threads=t, shape=s)
            shapes = [s for s in run.shapes(op) if all(timed(t, s) for t in counts)]
            if not shapes:
                continue
            shape = max(shapes, key=lambda s: timed(counts[0], s).seconds)  # the most work
            ys = [timed(counts[0], shape).seconds / timed(t, shape).seconds for t in counts]
            ax.plot(counts, ys, marker="o", label=f"{op} {shape} ({label_impl})")
    ax.plot(counts, counts, "k:", label="linear")
    ax.set_xticks(counts)
    ax.set_xlabel("threads")
    ax.set_ylabel("speed-up over 1 thread")
    ax.set_title("thread scaling (the longest-running shape per op)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return save(plt, fig, out_dir, "thread_scaling.png")


def chart_peak_fraction(run, plt, out_dir):
    """Best GFLOP/s of each op as a fraction of the measured FMA peak, per ISA, 1 thread."""
    ops = [op for op in run.ops() if any(r.gflops for r in run.select(op=op, impl=SIMD))]
    isas = [i for i in ISA_ORDER if run.fma_peak(i, 1)]
    if not ops or not isas:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    width = 0.8 / len(isas)
    x = np.arange(len(ops))
    top = 1.0
    for k, isa in enumerate(isas):
        peak = run.fma_peak(isa, 1)
        vals = [max((r.gflops for r in run.select(op=op, impl=SIMD, isa=isa, threads=1)
                     if r.gflops), default=0.0) / peak for op in ops]
        bars = ax.bar(x + (k - (len(isas) - 1) / 2) * width, vals, width,
                      label=f"{isa} (peak {peak:.0f} GFLOP/s)")
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in vals], fontsize=7)
        top = max([top] + vals)
    ax.axhline(1.0, color="k", linewidth=0.8, linestyle=":")
    ax.set_xticks(x)
    ax.set_xticklabels(ops)
    ax.set_ylim(0, top * 1.15)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_ylabel("best GFLOP/s / measured FMA peak")
    ax.set_title("fraction of the measured FMA peak, 1 thread")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save(plt, fig, out_dir, "fma_peak_fraction.png")


def chart_decode_dtype(run, plt, out_dir):
    """Decode time against the KV length for each KV element type (bench_decode.cpp), with
    32 and with 8 KV heads, the widest f32 ISA, 1 and 2 threads: what a 16-bit cache saves."""
    rows = [r for r in run.select(op="decode", impl=SIMD) if r.isa == "avx512" or r.isa == run.best_isa("decode")]
    if not rows:
        return None
    isa = "avx512" if any(r.isa == "avx512" for r in rows) else rows[0].isa
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=False)
    for ax, threads in zip(axes, (1, 2)):
        series = {}
        for r in rows:
            if r.isa != isa or r.threads != threads:
                continue
            m = re.match(r"H(\d+)_KV(\d+)_Lk(\d+)_D(\d+)_(\w+)", r.shape)
            if not m:
                continue
            label = f"{m.group(5)} KV, {m.group(2)} KV heads"
            series.setdefault(label, []).append((int(m.group(3)), r.seconds * 1e3))
        for label, pts in sorted(series.items()):
            pts.sort()
            style = "-" if "32 KV" in label else "--"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("KV length (keys)")
        ax.set_ylabel("ms per decode step (H32, D128)")
        ax.set_title(f"decode, {isa}, {threads} thread{'s' if threads > 1 else ''}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return save(plt, fig, out_dir, "decode_dtype.png")


def chart_sdpa_dtype(run, plt, out_dir):
    """GFLOP/s against sequence length on a 16-bit level: f32 inputs (its AVX-512 kernels),
    bf16 inputs and f32 under ATTN_FPMATH_BF16, D64 and D128, 1 thread, beside the level's
    VDPBF16PS (or AMX) peak and the f32 FMA peak."""
    isas = [i for i in ("amx", "avx512_bf16") if run.select(op="sdpa", impl=SIMD, isa=i)]
    if not isas:
        return None
    isa = isas[0]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for dim, marker in ((64, "s"), (128, "o")):
        series = {}
        for r in run.select(op="sdpa", impl=SIMD, isa=isa, threads=1):
            f = shape_numbers(r.shape)
            if f.get("D") != dim or "causal" in r.shape or r.gflops is None:
                continue
            math = "bf16 inputs" if r.shape.endswith("_bf16") and "fpmath" not in r.shape else (
                "f32, fpmath bf16" if "fpmath" in r.shape else "f32")
            series.setdefault(math, []).append((f["L"], r.gflops))
        for math, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=f"{math}, D{dim}")
    peak = run.one(op="machine", impl="bf16_peak", isa=isa, threads=1)
    if peak and peak.gflops:
        ax.axhline(peak.gflops, color="gray", linestyle=":", label=f"{isa} bf16 peak")
    fma = run.fma_peak("avx512", 1)
    if fma:
        ax.axhline(fma, color="black", linestyle=":", label="f32 FMA peak")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length L (len_q = len_kv), H8")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"sdpa forward per input type, {isa}, 1 thread")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return save(plt, fig, out_dir, "sdpa_dtype.png")


def write_all(run, plt, out_dir):
    charts = [chart_sdpa_seq_len(run, plt, out_dir, 64), chart_sdpa_seq_len(run, plt, out_dir, 128),
              chart_gemm(run, plt, out_dir), chart_thread_scaling(run, plt, out_dir),
              chart_peak_fraction(run, plt, out_dir), chart_decode_dtype(run, plt, out_dir),
              chart_sdpa_dtype(run, plt, out_dir)]
    return [c for c in charts if c]
