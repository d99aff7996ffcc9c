#!/usr/bin/env bash
# Installs the Debian packages attn needs to build, test, benchmark and plot, when missing.
# Idempotent and quiet when everything is already installed.
set -euo pipefail

packages=(
  build-essential cmake pkg-config         # compiler and build
  libxsimd-dev libtbb-dev                  # the library: SIMD kernels, thread pool
  libgtest-dev libbenchmark-dev            # tests and benchmarks
  libopenblas-dev libdnnl-dev              # peers the benchmarks compare against
  ocl-icd-opencl-dev                       # Debian's dnnl-config.cmake requires OpenCL (only a
                                           # Recommends of libdnnl-dev, so name it)
  python3 python3-numpy python3-matplotlib # tools/bench_report.py and its charts
  python3-pytest python3-torch python3-pip # the Python package, its tests against PyTorch
  python3-setuptools python3-wheel         # pip install ./python, offline
  libopenmpi-dev openmpi-bin               # the ring-attention example over MPI
  clang libclang-rt-14-dev                 # the libFuzzer target (its runtime is only recommended)
  git ca-certificates                      # a clone of the repository, as the README says
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install_deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install_deps: not root and no sudo; please install: ${missing[*]}" >&2
  exit 1
fi
# Quiet on success; on failure show what apt said. Wait for a dpkg lock held by another apt.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
if ! { "${apt[@]}" update -qq && "${apt[@]}" install -y -qq --no-install-recommends \
         "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "install_deps: apt-get failed" >&2
  exit 1
fi
echo "install_deps: done"
