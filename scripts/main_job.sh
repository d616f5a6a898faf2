#!/usr/bin/env bash
# The main job: build kiln, then compile a hand-scheduled fp32 GEMM with
# kiln on this machine, check it, and time it against OpenBLAS (numpy) in
# the same run, on 1 and 2 threads. Extra arguments go to gemm_bench
# (e.g. --shapes 1024x1024x1024 --repeat 9).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${KILN_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD" -j "$(nproc)" --target gemm_bench
for threads in 1 2; do
  "$BUILD"/bench/gemm_bench --threads "$threads" "$@"
done
