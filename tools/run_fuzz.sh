#!/usr/bin/env bash
# Builds the libFuzzer target tests/fuzz/fuzz_api with clang (the library with
# -fsanitize=address,undefined,fuzzer-no-link) in build-fuzz/ and fuzzes the C API for a
# bounded time, starting from the committed corpus tests/fuzz/corpus. Any finding (a
# sanitizer report, a broken contract check, a crash, a leak, a timeout) fails the script
# and leaves the input in <build dir>/findings/ (new inputs go to <build dir>/corpus/).
#
# Usage: tools/run_fuzz.sh [seconds (default 60)] [extra libFuzzer flags]
# ATTN_FUZZ_BUILD=DIR: build the target in DIR, a tree already configured with clang and
# -DATTN_FUZZ=ON (tools/run_tests.sh's build-asan/), instead of configuring build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
dir=${ATTN_FUZZ_BUILD:-build-fuzz}
if ! command -v clang++ >/dev/null; then
  echo "run_fuzz: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
if [ -z "${ATTN_FUZZ_BUILD:-}" ]; then
  echo "== fuzz: configure in $dir/"
  CC=clang CXX=clang++ cmake -S . -B "$dir" --log-level=WARNING -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DATTN_FUZZ=ON -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_BENCH=OFF -DATTN_BUILD_TOOLS=OFF
fi
echo "== fuzz: build fuzz_api in $dir/"
cmake --build "$dir" -j2 --target fuzz_api

# New inputs go to $dir/corpus; the committed corpus is only read.
mkdir -p "$dir/corpus" "$dir/findings"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export ATTN_FUZZ_STATS=1
echo "== fuzz: $seconds s"
"$dir/tests/fuzz/fuzz_api" -max_total_time="$seconds" -timeout=20 -max_len=1024 \
  -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$dir/findings/" "$@" \
  "$dir/corpus" tests/fuzz/corpus
echo "run_fuzz: PASSED ($seconds s, no findings)"
