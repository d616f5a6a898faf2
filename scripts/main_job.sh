#!/usr/bin/env bash
# The main job: build kiln, then schedule, lower and run a real workload on
# this machine. (The auto-scheduler will turn this into a tuning session.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${KILN_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD" -j "$(nproc)" --target kiln_demo
"$BUILD"/kiln_demo "$@"
