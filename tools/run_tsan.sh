#!/usr/bin/env bash
# Builds the library and the concurrency stress test (tests/stress/stress.cpp) with
# ThreadSanitizer in build-tsan/ and runs it: several threads share one SIMD context, one
# reference context and the default context, and every result must equal a serial run bit
# for bit. Fails on any data race report or mismatch.
#
# Usage: tools/run_tsan.sh [extra attn_stress arguments, e.g. --threads 8 --rounds 50]
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build-tsan
echo "== TSan: configure and build in $dir/"
cmake -S . -B "$dir" --log-level=WARNING -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_TSAN=ON \
  -DATTN_BUILD_TESTS=ON -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_TOOLS=OFF
cmake --build "$dir" -j2 --target attn_stress

# oneTBB is not built with TSan: its internal synchronisation is invisible to the
# sanitizer, so tests/stress/tsan.supp silences reports whose every racing frame is in
# libtbb. halt_on_error makes the first real report fatal.
export TSAN_OPTIONS="halt_on_error=1 history_size=7 second_deadlock_stack=1 suppressions=$PWD/tests/stress/tsan.supp ${TSAN_OPTIONS:-}"
echo "== TSan: attn_stress $*"
"$dir/tests/stress/attn_stress" "$@"
echo "run_tsan: PASSED"
