#!/usr/bin/env bash
# Command 1: build attn (Release, in build/), run the worked example of the source document
# (build/tools/attn-demo) and a quick training run (build/tools/attn-train --quick), then print a short benchmark summary: scalar vs SIMD and
# 1 thread vs all threads, decoding per KV cache type (f32, bf16, I8, I4) against the read
# bandwidth, the best GEMM and prefill attention against the FMA peak, measured now on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release --log-level=WARNING
cmake --build build -j"$(nproc)"

echo
build/tools/attn-demo

echo
build/tools/attn-train --quick --out build/tools

echo
if [ -f tools/bench_report.py ] && [ -x build/bench/attn_bench ]; then
  python3 tools/bench_report.py summary build/bench/attn_bench
else
  echo "run_main: benchmark summary skipped (tools/bench_report.py or build/bench/attn_bench" \
       "is not there yet)"
fi
