#!/usr/bin/env bash
# Runs every test of kiln on a fresh machine: installs the Debian packages,
# configures and builds with Ninja, runs the GoogleTest suite through CTest
# and, when present, the pytest suite and the tutorials.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${KILN_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD" -j "$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" --timeout 600
if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
  PYTHONPATH="$PWD/python:$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 -m pytest -q tests/python
fi
