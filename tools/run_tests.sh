#!/usr/bin/env bash
# Command 2: build attn (Release, in build/) and run the whole test suite, then build the
# same suite with AddressSanitizer + UndefinedBehaviorSanitizer (clang, RelWithDebInfo at -O1,
# in build-asan/, the library instrumented for libFuzzer as well) and run it again, then the
# ThreadSanitizer stress test (tools/run_tsan.sh) and 60 s of fuzzing of the C API
# (tools/run_fuzz.sh, on the library build-asan/ already holds). Exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/install_deps.sh || exit 1
jobs=$(nproc)
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

summary=()
failed=0

# run_suite NAME BUILD_DIR CMAKE_ARGS...: configure, build, ctest; appends to summary.
run_suite() {
  local name=$1 dir=$2
  shift 2
  echo "== $name: configure and build in $dir/"
  if ! cmake -S . -B "$dir" --log-level=WARNING "$@" || ! cmake --build "$dir" -j"$jobs"; then
    summary+=("$name: BUILD FAILED")
    failed=1
    return
  fi
  echo "== $name: ctest"
  local log="$dir/ctest-summary.log"
  ctest --test-dir "$dir" --output-on-failure -j"$jobs" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  # ctest ends with "NN% tests passed, F tests failed out of T".
  local line passed total
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  if [ -n "$line" ]; then
    total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
    passed=$((total - $(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")))
    summary+=("$name: $passed/$total passed")
  else
    summary+=("$name: no test results (ctest exit $rc)")
    rc=1
  fi
  report_skips "$name" "$dir"
  [ "$rc" -eq 0 ] || failed=1
}

# report_skips NAME BUILD_DIR: every test the machine could not run, by name, with the reason
# it gave (GoogleTest's GTEST_SKIP message, pytest's skip reason), from the full output ctest
# keeps in Testing/Temporary/LastTest.log; appends the count to summary.
report_skips() {
  local name=$1 log="$2/Testing/Temporary/LastTest.log" skips count
  [ -f "$log" ] || return
  # lines "NAME: REASON"; pytest's "SKIPPED [N] FILE:LINE: REASON" stands for N tests
  skips=$(awk '
    / Skipped$/ && /:[0-9]+: / { getline reason; next }
    /^\[  SKIPPED \] [^ ]+ \([0-9]+ ms\)$/ { print $4 ": " reason; reason = ""; next }
    /^SKIPPED \[[0-9]+\] / {
      n = substr($2, 2, length($2) - 2); where = $3; sub(/:$/, "", where)
      reason = $0; sub(/^SKIPPED \[[0-9]+\] [^ ]+ /, "", reason)
      print "python " where " (" n " tests): " reason
    }
  ' "$log")
  count=$(awk -F': ' 'NF { if (match($1, /\(([0-9]+) tests\)$/)) n += substr($1, RSTART + 1) + 0; else n += 1 }
                      END { print n + 0 }' <<<"$skips")
  echo "== $name: $count tests skipped on this machine"
  if [ "$count" -gt 0 ]; then
    # how many give each reason, then every skipped test by name
    sed -E 's/^[^ ]+( [^ ]+ \([0-9]+ tests\))?: //' <<<"$skips" | sort | uniq -c | sort -rn | sed 's/^/   /'
    sed 's/^/     - /' <<<"$skips"
  fi
  summary+=("$name: $count skipped")
}

run_suite "Release" build -DCMAKE_BUILD_TYPE=Release
# One instrumented build serves the sanitized suite and the fuzzer: the library, the longest
# part of a sanitizer build, is compiled once for both.
run_suite "ASan+UBSan" build-asan -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_SANITIZE=ON -DATTN_FUZZ=ON -DATTN_BUILD_BENCH=OFF
tools/run_tsan.sh && summary+=("TSan stress: passed") || { summary+=("TSan stress: FAILED"); failed=1; }
ATTN_FUZZ_BUILD=build-asan tools/run_fuzz.sh 60 && summary+=("fuzz 60 s: no findings") \
  || { summary+=("fuzz: FAILED"); failed=1; }

echo
if [ "$failed" -eq 0 ]; then verdict="ALL PASSED"; else verdict="FAILED"; fi
echo "run_tests: $verdict - $(IFS=';'; echo "${summary[*]}" | sed 's/;/; /g')"
exit "$failed"
