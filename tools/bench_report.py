#!/usr/bin/python3
"""Runs attn_bench and turns its Google Benchmark JSON into tables and charts.

  bench_report.py summary BUILD/bench/attn_bench
      A short run over a few shapes per op; prints reference vs SIMD (best ISA),
      1 thread vs N threads, and attn vs oneDNN (the strongest peer) and OpenBLAS where
      present, at 1 and N threads; decoding per KV cache type (f32, bf16, I8, I4) against
      the machine's read bandwidth; the best GEMM and prefill attention against the FMA peak.
  bench_report.py charts BUILD/bench/attn_bench --out docs/charts [--json FILE]
      The full benchmark set (or a saved JSON run); writes PNG charts next to
      docs/performance.md with the tables of that one run.

Benchmark names follow op/<impl>/<isa>/threads:<n>/<shape>, e.g.
  sdpa/simd/avx512/threads:2/H8_L2048_D64_causal
  gemm/openblas/-/threads:1/2048x2048x2048
  machine/fma_peak/avx512/threads:1
Every ratio printed comes from one run, so it survives a noisy machine better than the
absolute times do.
"""

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile

ISA_ORDER = ["sse4", "avx2", "avx512", "avx512_bf16", "amx"]  # best last
REFERENCE, SIMD = "ref", "simd"
# The peers, strongest first: oneDNN (f32 and bf16 GEMM near the FMA peak), then OpenBLAS.
PEER_ORDER = ["onednn", "onednn_bf16", "openblas"]
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# The summary's decode table: one decoding step per KV cache type, as (type, op, shape) of
# bench_decode.cpp and bench_decode_quantized.cpp: H32 over 8 KV heads, 4096 keys, D128 (each K
# and V vector serves 4 query heads), and over 32 KV heads, 16384 keys (one query head a KV
# head, the cache read from memory: 256 MiB in bf16), each type against bf16 of its shape
# (f32 queries, but for the bf16 cache with bf16 queries: its pair products on the bf16 levels),
# each on the best level that ran it (the bf16 cache's P V on pairs at 8 KV heads there); the
# _pages2M shapes (the cache in 2 MiB pages) against bf16 in 2 MiB pages.
DECODE_PER_TYPE = [("f32", "decode", "H32_KV8_Lk4096_D128_f32"),
                   ("bf16", "decode_quantized", "H32_KV8_Lk4096_D128_bf16"),
                   ("bf16, bf16 queries", "decode_quantized", "H32_KV8_Lk4096_D128_bf16q"),
                   ("I8, scale per row", "decode_quantized", "H32_KV8_Lk4096_D128_I8_row"),
                   ("I4, scale per 32", "decode_quantized", "H32_KV8_Lk4096_D128_I4_g32"),
                   ("bf16", "decode_quantized", "H32_KV32_Lk16384_D128_bf16"),
                   ("I8, scale per row", "decode_quantized", "H32_KV32_Lk16384_D128_I8_row"),
                   ("I4, scale per 32", "decode_quantized", "H32_KV32_Lk16384_D128_I4_g32"),
                   ("bf16, 2 MiB pages", "decode_quantized", "H32_KV32_Lk16384_D128_bf16_pages2M"),
                   ("I8, scale per row, 2 MiB pages", "decode_quantized", "H32_KV32_Lk16384_D128_I8_row_pages2M")]
# Ops whose summary shapes are named rather than picked from the middle of the sweep: prefill
# over an I8 cache (a scale per row, the codes' pairs) against the bf16 cache it replaces; 8
# query rows a head on the decode entry against the packed tiles, over bf16 and I8 caches.
PINNED_SHAPES = {"prefill_quantized": ["H8_L2048_D128_bf16", "H8_L2048_D128_I8_row"],
                 "few_rows": ["H8_KV8_Lq8_Lk4096_D128_bf16", "H8_KV8_Lq8_Lk4096_D128_I8_row"]}
# Suffixes Google Benchmark appends to a name (UseRealTime(), MinTime(), ...).
NAME_SUFFIX = re.compile(r"^(real_time|process_time|manual_time|min_time:.*|iterations:.*|"
                         r"repeats:.*|min_warmup_time:.*)$")


# ----------------------------------------------------------------------------------------
# Reading a run

# Counters shown beside the rates in the other rows (bench/bench_machine.cpp).
SHARE_COUNTERS = ("ceiling", "ceiling_apart", "exp_in_dp", "exp_alone_in_dp")


class Result:
    """One benchmark: its name split into fields, its wall time and its GFLOP/s."""

    def __init__(self, entry):
        self.name = entry.get("run_name") or entry["name"]
        parts = [p for p in self.name.split("/") if not NAME_SUFFIX.match(p)]
        self.op = parts[0] if parts else self.name
        self.impl = parts[1] if len(parts) > 1 else "-"
        self.isa = parts[2] if len(parts) > 2 else "-"
        self.threads = 1
        rest = parts[3:]
        if rest and rest[0].startswith("threads:"):
            self.threads = int(rest[0].split(":", 1)[1])
            rest = rest[1:]
        self.shape = "/".join(rest)
        unit = TIME_UNITS.get(entry.get("time_unit", "ns"), 1e-9)
        self.seconds = float(entry["real_time"]) * unit
        # rate counters (bench_common.hpp), already per second of wall time
        self.gflops = float(entry["GFLOP/s"]) if "GFLOP/s" in entry else None
        self.gbps = float(entry["GB/s"]) if "GB/s" in entry else None
        self.rates = {k: float(v) for k, v in entry.items() if k.endswith("/s") or "/s_" in k}
        # decoding: the fraction of the rate of reading its own bytes, alternated with the
        # calls (bench/bench_paired_read.hpp)
        self.of_read = float(entry["of_read"]) if "of_read" in entry else None
        # and of reading them with K and V in step (a faster order on some machines)
        self.of_read_in_step = float(entry["of_read_in_step"]) if "of_read_in_step" in entry else None
        # machine/bf16_softmax_ceiling: fractions and costs, not rates
        self.shares = {k: float(entry[k]) for k in SHARE_COUNTERS if k in entry}
        self.error = entry.get("error_occurred", False)

    def better_than(self, other):
        return other is None or self.seconds < other.seconds


class Run:
    """All results of one benchmark run, indexed by (op, impl, isa, threads, shape)."""

    def __init__(self, doc):
        self.context = doc.get("context", {})
        self.results = {}
        for entry in doc.get("benchmarks", []):
            if entry.get("run_type") == "aggregate" and entry.get("aggregate_name") != "min":
                continue
            r = Result(entry)
            if r.error:
                continue
            key = (r.op, r.impl, r.isa, r.threads, r.shape)
            if r.better_than(self.results.get(key)):
                self.results[key] = r

    def select(self, **want):
        """Results whose fields equal every given (non-None) value."""
        return [r for r in self.results.values()
                if all(v is None or getattr(r, k) == v for k, v in want.items())]

    def ops(self):
        """The library's ops: those measured on the reference or the SIMD kernels."""
        return sorted({r.op for r in self.results.values() if r.impl in (REFERENCE, SIMD)})

    def shapes(self, op):
        return sorted({r.shape for r in self.select(op=op)}, key=shape_size)

    def thread_counts(self):
        return sorted({r.threads for r in self.results.values()})

    def best_isa(self, op=None, shape=None):
        isas = {r.isa for r in self.select(op=op, impl=SIMD)
                if shape is None or r.shape == shape}
        ranked = [i for i in ISA_ORDER if i in isas]
        return ranked[-1] if ranked else None

    def peers(self, op):
        found = {r.impl for r in self.select(op=op)} - {REFERENCE, SIMD}
        return sorted(found, key=lambda p: PEER_ORDER.index(p) if p in PEER_ORDER else 99)

    def one(self, **kw):
        """The fastest matching result, or None."""
        best = None
        for r in self.select(**kw):
            if r.better_than(best):
                best = r
        return best

    def fma_peak(self, isa, threads):
        r = self.one(op="machine", impl="fma_peak", isa=isa, threads=threads)
        return r.gflops if r else None


def shape_size(shape):
    """Orders shapes by the product of the numbers in them (then by name)."""
    size = 1
    for n in re.findall(r"\d+", shape):
        size *= int(n)
    return (size, shape)


def is_prefill(shape):
    """An attention shape with more than one query row (not a decoding step)."""
    fields = shape_numbers(shape)
    return not shape.startswith("decode") and fields.get("Lq", fields.get("L", 2)) > 1


def shape_numbers(shape):
    """L and D of an attention shape such as H8_L2048_D64_causal (None when absent)."""
    fields = dict(re.findall(r"(?:^|_)([A-Za-z]+)(\d+)", shape))
    return {k: int(v) for k, v in fields.items()}


# ----------------------------------------------------------------------------------------
# Running the benchmark binary

def run_bench(binary, filter_regex, min_time, json_out):
    if not os.access(binary, os.X_OK):
        sys.exit(f"bench_report: {binary} is not an executable benchmark binary")
    cmd = [binary, f"--benchmark_min_time={min_time}", f"--benchmark_out={json_out}",
           "--benchmark_out_format=json"]
    if filter_regex:
        cmd.append(f"--benchmark_filter={filter_regex}")
    print("running: " + " ".join(cmd), file=sys.stderr)
    load_before = os.getloadavg()[0]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_report: {binary} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    with open(json_out) as f:
        doc = json.load(f)
    # What else ran on the machine, and how attn was built: context for every figure.
    ctx = doc.setdefault("context", {})
    ctx["load_average_before"], ctx["load_average_after"] = load_before, os.getloadavg()[0]
    ctx["attn_build_type"] = cmake_build_type(binary)
    ctx["cpu_model"], ctx["os"] = cpu_model(), f"{platform.system()} {platform.release()}"
    ctx["attn_bench_command"] = shlex.join(c for c in cmd if not c.startswith("--benchmark_out"))
    return doc


def cmake_build_type(binary):
    """CMAKE_BUILD_TYPE from the CMakeCache.txt of the build tree holding the binary."""
    d = os.path.dirname(os.path.abspath(binary))
    for _ in range(4):
        cache = os.path.join(d, "CMakeCache.txt")
        if os.path.exists(cache):
            with open(cache) as f:
                for line in f:
                    if line.startswith("CMAKE_BUILD_TYPE:"):
                        return line.split("=", 1)[1].strip() or "(none)"
        d = os.path.dirname(d)
    return "unknown"


def list_benchmarks(binary):
    done = subprocess.run([binary, "--benchmark_list_tests=true"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_report: {binary} --benchmark_list_tests failed:\n{done.stderr[-2000:]}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def summary_filter(names, per_op):
    """A regex selecting a few shapes per op, plus the machine's yardsticks: the largest
    prefill shape that has a reference run (so simd/ref is measured), then shapes from the
    middle of the sweep (big enough to be representative, small enough to finish quickly);
    for the decode ops, the shapes of DECODE_PER_TYPE on their best ISA only; PINNED_SHAPES's
    ops, their named shapes."""
    by_op = {}
    for name in names:
        fake = Result({"name": name, "real_time": 0})
        by_op.setdefault(fake.op, {}).setdefault(fake.shape, set()).add(fake.impl)
    chosen = []
    decode = {}  # op -> the decode table's shapes
    for _, op, shape in DECODE_PER_TYPE:
        decode.setdefault(op, []).append(shape)
    for op, shapes in sorted(by_op.items()):
        if op == "machine":
            chosen.append(re.escape(op) + "/")
            continue
        if op in decode:  # only the decode table's shapes, on the best ISA that ran them
            for shape in decode[op]:
                isas = {r.isa for r in (Result({"name": n, "real_time": 0}) for n in names)
                        if r.op == op and r.impl == SIMD and r.shape == shape}
                ranked = [i for i in ISA_ORDER if i in isas]
                if ranked:
                    chosen.append(re.escape(f"{op}/{SIMD}/{ranked[-1]}/") + "threads:[0-9]+/" +
                                  re.escape(shape) + "(/|$)")
            continue
        if op in PINNED_SHAPES:
            for shape in PINNED_SHAPES[op]:
                chosen.append(re.escape(op) + "/[^/]+/[^/]+/threads:[0-9]+/" + re.escape(shape) + "(/|$)")
            continue
        ordered = sorted(shapes, key=shape_size)
        # a decoding step is no yardstick of the compute kernels: the peak table needs a prefill
        with_ref = [s for s in ordered if REFERENCE in shapes[s] and is_prefill(s)]
        picks = with_ref[-1:]
        mid = len(ordered) // 2
        for s in ordered[mid:] + ordered[:mid][::-1]:
            if len(picks) >= per_op:
                break
            if s not in picks:
                picks.append(s)
        for s in picks:
            chosen.append(re.escape(op) + "/[^/]+/[^/]+/threads:[0-9]+/" + re.escape(s) + "(/|$)")
    return "|".join(f"({c})" for c in chosen)


# ----------------------------------------------------------------------------------------
# Tables

def fmt_ms(r):
    return "n/a" if r is None else f"{r.seconds * 1e3:.3g}"


def fmt_ratio(num, den):
    if num is None or den is None or num.seconds <= 0:
        return "n/a"
    return f"{den.seconds / num.seconds:.2f}x"


def fmt_rate(r):
    """GFLOP/s for compute-bound ops, GB/s for the memory-bound ones that report only bytes."""
    if r is not None and r.gflops is not None:
        return f"{r.gflops:.1f} GFLOP/s"
    if r is not None and r.gbps is not None:
        return f"{r.gbps:.1f} GB/s"
    return "n/a"


def summary_rows(run):
    """One row per (op, shape): reference, SIMD on the best ISA at 1 and N threads, and the
    peers measured for that shape, strongest first (PEER_ORDER), each on its own threads at 1
    and N: the first peer at both counts, the next beside it at N."""
    n = max(run.thread_counts(), default=1)
    header = ["op/shape", "ref ms", "simd 1t ms", "isa", "simd/ref", f"simd {n}t ms",
              f"simd {n}t rate", f"{n}t/1t", "peer", "peer 1t ms", "attn/peer 1t",
              f"peer {n}t ms", f"attn/peer {n}t", "next peer", f"attn/next {n}t"]
    rows = []
    for op in run.ops():
        for shape in run.shapes(op):
            isa = run.best_isa(op, shape) or run.best_isa(op)  # the shape's own levels first
            ref = run.one(op=op, impl=REFERENCE, shape=shape)
            s1 = run.one(op=op, impl=SIMD, isa=isa, threads=1, shape=shape) if isa else None
            sn = run.one(op=op, impl=SIMD, isa=isa, threads=n, shape=shape) if isa else None
            found = [p for p in run.peers(op)
                     if run.one(op=op, impl=p, threads=1, shape=shape)
                     or run.one(op=op, impl=p, threads=n, shape=shape)]
            row = [f"{op}/{shape}", fmt_ms(ref), fmt_ms(s1), isa or "n/a", fmt_ratio(s1, ref),
                   fmt_ms(sn), fmt_rate(sn), fmt_ratio(sn, s1)]
            if found:
                p1 = run.one(op=op, impl=found[0], threads=1, shape=shape)
                pn = run.one(op=op, impl=found[0], threads=n, shape=shape)
                row += [found[0], fmt_ms(p1), fmt_ratio(s1, p1), fmt_ms(pn), fmt_ratio(sn, pn)]
            else:
                row += ["n/a", "n/a", "n/a", "n/a", "n/a"]
            if len(found) > 1:
                qn = run.one(op=op, impl=found[1], threads=n, shape=shape)
                row += [found[1], fmt_ratio(sn, qn)]
            else:
                row += ["n/a", "n/a"]
            rows.append(row)
    return header, rows


def peer_losses(run):
    """The summary's cells where the peer beat attn: 'op/shape peer Nt 0.92x'."""
    header, rows = summary_rows(run)
    out = []
    for r in rows:
        for col in ("attn/peer 1t", [h for h in header if h.startswith("attn/peer ") and h != "attn/peer 1t"][0]):
            cell = r[header.index(col)]
            if cell.endswith("x") and float(cell[:-1]) < 1.0:
                out.append(f"{r[0]} vs {r[header.index('peer')]} at {col.split()[-1]} {cell}")
    return out


def decode_rows(run):
    """Decoding per KV cache type (DECODE_PER_TYPE): time, bytes read (values and scales), GB/s,
    its fraction of the read bandwidth measured in the same run at 128 MiB
    (machine/read_bw_decode, same ISA and threads), the fraction of the rate of reading the
    same bytes alternated with the calls (of_read), the same with K and V read in step
    (of_read_in_step), and the speed over the bf16 cache's of the same shape."""
    header = ["KV cache", "shape", "isa", "threads", "ms", "MiB read", "GB/s",
              "read_bw_decode GB/s", "of read bw", "of paired read", "of in-step read", "speed vs bf16"]
    rows = []

    def heads_keys_pages(shape):  # H.._KV.._Lk.., and whether in 2 MiB pages
        return "_".join(shape.split("_")[:3]), shape.endswith("_pages2M")

    for t in run.thread_counts():
        for name, op, shape in DECODE_PER_TYPE:
            bf16 = next((run.one(op=o, impl=SIMD, threads=t, shape=s)
                         for n, o, s in DECODE_PER_TYPE
                         if s.split("_")[4] == "bf16"  # (not bf16q: bf16 queries)
                         and heads_keys_pages(s) == heads_keys_pages(shape)), None)
            r = run.one(op=op, impl=SIMD, threads=t, shape=shape)
            if r is None or not r.gbps:
                continue
            # (the bf16 levels read memory with the avx512 level's code: its read_bw_decode)
            bw_isa = "avx512" if r.isa in ("avx512_bf16", "amx") else r.isa
            bw = run.one(op="machine", impl="read_bw_decode", isa=bw_isa, threads=t)
            rows.append([name, "_".join(shape.split("_")[:4]), r.isa, str(t),
                         fmt_ms(r), f"{r.gbps * 1e9 * r.seconds / 2 ** 20:.0f}", f"{r.gbps:.1f}",
                         f"{bw.gbps:.1f}" if bw and bw.gbps else "n/a",
                         f"{r.gbps / bw.gbps:.2f}" if bw and bw.gbps else "n/a",
                         f"{r.of_read:.2f}" if r.of_read else "n/a",
                         f"{r.of_read_in_step:.2f}" if r.of_read_in_step else "n/a",
                         fmt_ratio(r, bf16) if bf16 else "n/a"])
    return header, rows


def peak_rows(run):
    """Measured FMA peak per ISA and thread count, and the best SIMD op's fraction of it: the
    best GEMM, and the best attention over prefill shapes only (a decoding step is bound by
    memory, not by the FMA units: decode_rows judges it against the read bandwidth)."""
    header = ["isa", "threads", "FMA peak GFLOP/s", "1 GiB read GB/s", "1 GiB vs L3",
              "best gemm GFLOP/s", "gemm/peak", "best sdpa prefill GFLOP/s", "sdpa/peak"]
    rows = []
    for isa in ISA_ORDER:
        for t in run.thread_counts():
            peak = run.fma_peak(isa, t)
            if peak is None:
                continue
            bw = run.one(op="machine", impl="read_bw", isa=isa, threads=t)
            # the benchmark's name says where 1 GiB sits against the machine's L3
            where = bw.shape.split("_", 1)[1].replace("_", " ") if bw and "_" in bw.shape else "n/a"
            row = [isa, str(t), f"{peak:.1f}", f"{bw.gbps:.1f}" if bw and bw.gbps else "n/a", where]
            for op in ("gemm", "sdpa"):
                best = max((r.gflops for r in run.select(op=op, impl=SIMD, isa=isa, threads=t)
                            if r.gflops and (op != "sdpa" or is_prefill(r.shape))), default=None)
                row += ["n/a", "n/a"] if best is None else [f"{best:.1f}", f"{best / peak:.0%}"]
            rows.append(row)
    return header, rows


def other_rows(run):
    """Everything else measured (machine yardsticks, exp), with all its rate counters."""
    header = ["benchmark", "ms", "rates"]
    rows = []
    for r in sorted(run.results.values(), key=lambda r: r.name):
        if r.op in run.ops():
            continue
        rates = ", ".join([f"{v:.3g} {k}" for k, v in sorted(r.rates.items())] +
                          [f"{k} {v:.3g}" for k, v in r.shares.items()])
        rows.append([r.name.replace("/real_time", ""), f"{r.seconds * 1e3:.3g}", rates or "-"])
    return header, rows


def text_table(header, rows):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def markdown_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def cpu_model():
    """This machine's CPU model name, from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def machine_description(run):
    """The machine of the run, from the run's own record (never the machine reading it)."""
    ctx = run.context
    model = ctx.get("cpu_model", "CPU model not recorded in the run")
    caches = ", ".join(f"L{c['level']} {c['type'].lower()} {c['size'] // 1024} KiB"
                       for c in ctx.get("caches", [])) or "caches not reported by the system"
    text = (f"{model}; {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz; "
            f"{caches}; {ctx.get('os', 'OS not recorded')}; attn built "
            f"{ctx.get('attn_build_type', '?')}; run {ctx.get('date', '?')}")
    if "load_average_before" in ctx:
        text += (f"; 1-minute load average {ctx['load_average_before']:.1f} before the run, "
                 f"{ctx['load_average_after']:.1f} after")
    return text


# ----------------------------------------------------------------------------------------
# Commands

def load_or_run(args, filter_regex):
    if args.json:
        with open(args.json) as f:
            doc = json.load(f)
        saved = doc.get("context", {}).get("attn_bench_command", f"(saved in {args.json})")
        return Run(doc), saved
    fd, path = tempfile.mkstemp(suffix=".json", prefix="attn_bench_")
    os.close(fd)
    try:
        doc = run_bench(args.binary, filter_regex, args.min_time, path)
        if args.save_json:
            with open(args.save_json, "w") as f:
                json.dump(doc, f)
    finally:
        os.unlink(path)
    return Run(doc), doc["context"]["attn_bench_command"]


def cmd_summary(args):
    regex = args.filter
    if regex is None and not args.json:
        regex = summary_filter(list_benchmarks(args.binary), args.shapes_per_op)
    run, _ = load_or_run(args, regex)
    if not run.results:
        sys.exit("bench_report: the run produced no benchmark results")
    print(text_table(*summary_rows(run)))
    for header, rows in (decode_rows(run), peak_rows(run), other_rows(run)):
        if rows:
            print()
            print(text_table(header, rows))
    print("\nsimd/ref: reference time / SIMD time on one thread; Nt/1t and attn/peer likewise "
          "(higher is better for attn). n/a: not measured in this run.")


def cmd_charts(args):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # A python3 earlier on PATH (pyenv, a venv) may lack Debian's python3-matplotlib.
        system = "/usr/bin/python3"
        if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system):
            os.execv(system, [system] + sys.argv)
        sys.exit("bench_report: charts need matplotlib and numpy "
                 "(Debian: python3-matplotlib python3-numpy)")
    import bench_charts  # beside this script
    run, bench_cmd = load_or_run(args, args.filter)
    if not run.results:
        sys.exit("bench_report: the run produced no benchmark results")
    os.makedirs(args.out, exist_ok=True)
    charts = bench_charts.write_all(run, plt, args.out)
    for c in charts:
        print("wrote " + c)
    md = args.md or os.path.join(os.path.dirname(os.path.abspath(args.out)), "performance.md")
    write_performance_md(run, md, charts, bench_cmd, args.source)
    print("wrote " + md)


def write_performance_md(run, md_path, charts, bench_cmd, source=None):
    here = os.path.dirname(os.path.abspath(md_path))
    this = shlex.join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    lines = [
        "# attn performance",
        "",
        "Generated by `tools/bench_report.py` from one run of the Google Benchmark binary "
        "`attn_bench`; every ratio below compares two measurements of that same run.",
        "",
        f"- Machine: {machine_description(run)}",
    ] + ([f"- Measured: {source}"] if source else []) + [
        f"- Command: `{this}`",
        f"- Benchmark run: `{bench_cmd}`",
        "",
        "Times are wall-clock per call (ms); GFLOP/s counts 2 flops per multiply-add. "
        "`simd/ref` is the reference's time over the SIMD kernels' time on one thread (best "
        "ISA); `Nt/1t` is the SIMD speed-up from 1 to N threads; `peer` is the strongest peer "
        "measured for that shape (oneDNN before OpenBLAS), each on its own threads; "
        "`attn/peer 1t` and `attn/peer Nt` are the peer's time over attn's at 1 and N threads "
        "(above 1: attn is faster, below 1: the peer is); `next peer` is the next one, at N "
        "threads. `n/a`: not measured.",
        "",
        "## Every op and shape",
        "",
        markdown_table(*summary_rows(run)),
        "",
    ]
    losses = peer_losses(run)
    if losses:
        lines += ["Where the strongest peer is faster than attn in this run (`attn/peer` below "
                  "1): " + "; ".join(losses) + ".", ""]
    header, rows = decode_rows(run)
    if rows:
        lines += ["## Decoding per KV cache type", "",
                  "One decoding step per KV cache type; `MiB read` counts the stored values "
                  "and their scales, `of read bw` divides the GB/s by "
                  "`machine/read_bw_decode` (a 128 MiB array summed, same ISA and threads); "
                  "`of paired read` is the call's speed over that of reading its own bytes, "
                  "the two alternated within the benchmark (the steadier of the two on a "
                  "shared machine); `of in-step read` the same against reading K and V "
                  "together, chunk by chunk, the faster order on some machines "
                  "(bench/bench_paired_read.hpp).", "",
                  markdown_table(header, rows), ""]
    header, rows = peak_rows(run)
    if rows:
        lines += ["## Against the measured FMA peak", "",
                  "`machine/fma_peak` runs independent FMA chains on registers only: the most "
                  "this core can do, measured rather than taken from a datasheet.", "",
                  markdown_table(header, rows), ""]
        if any(c.endswith("%") and int(c[:-1]) > 100 for r in rows for c in r):
            lines += ["A fraction above 100% means the kernels beat the FMA-chain measurement "
                      "of that ISA: that measurement is then a lower bound of the peak, not "
                      "its ceiling (or the machine was busier while it ran).", ""]
    header, rows = other_rows(run)
    if rows:
        lines += ["## The machine's yardsticks and the rest", "",
                  "`GB/s_cpu` divides by the CPU time of the reading threads rather than wall "
                  "time, so it is the one that does not fall with the machine's load.", "",
                  markdown_table(header, rows), ""]
    lines += ["## Reading these numbers", "",
              "The machine is shared: absolute times move from run to run, and a thread count "
              "above the number of idle cores measures contention, not scaling. The ratios "
              "within one run (simd/ref, attn/peer) are the figures to trust. Speed is only "
              "claimed for results that are right: `attn-compare` runs the same ops on the "
              "reference and on every ISA and checks each SIMD result against the reference "
              "and a double-precision computation, and 1 thread against all threads bitwise.",
              ""]
    if charts:
        lines += ["## Charts", ""]
        for c in charts:
            name = os.path.splitext(os.path.basename(c))[0].replace("_", " ")
            lines += [f"![{name}]({os.path.relpath(os.path.abspath(c), here)})", ""]
    with open(md_path, "w") as f:
        f.write("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("summary", "charts"):
        s = sub.add_parser(name)
        s.add_argument("binary", nargs="?", default=None, help="path to attn_bench")
        s.add_argument("--json", help="reuse a saved Google Benchmark JSON run instead of running")
        s.add_argument("--save-json", help="keep the run's JSON in this file")
        s.add_argument("--filter", help="override the benchmark filter (a regex)")
        s.add_argument("--min-time", type=float, default=0.1 if name == "summary" else 0.2,
                       help="--benchmark_min_time in seconds")
        if name == "summary":
            s.add_argument("--shapes-per-op", type=int, default=2)
        else:
            s.add_argument("--out", default="docs/charts", help="directory for the PNG charts")
            s.add_argument("--md", help="performance page to write (default: next to --out)")
            s.add_argument("--source", help="what was measured, e.g. 'attn at commit abc1234'")
    args = p.parse_args()
    if not args.json and not args.binary:
        p.error("give the attn_bench binary or --json FILE")
    (cmd_summary if args.command == "summary" else cmd_charts)(args)


if __name__ == "__main__":
    main()
