#!/bin/sh
# The CMake package end to end: install kiln twice into temporary prefixes
# (runtime only; runtime + dev), build a consumer project against each, make a
# kernel library with the dev install and run it with the runtime-only one,
# and check that the runtime-only program pulls in no LLVM or Python library.
# Usage: run.sh KILN_BUILD_DIR WORK_DIR
set -eu
build=$1; work=$2; here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"; mkdir -p "$work"
cmake --install "$build" --prefix "$work/rt" --component runtime > /dev/null
cmake --install "$build" --prefix "$work/dev" --component runtime > /dev/null
cmake --install "$build" --prefix "$work/dev" --component dev > /dev/null
test ! -e "$work/rt/lib/libkiln.so" || { echo "the runtime component installed the compiler"; exit 1; }
cmake -S "$here" -B "$work/b-dev" -G Ninja -DCMAKE_PREFIX_PATH="$work/dev" > /dev/null
cmake --build "$work/b-dev" | tail -20
cmake -S "$here" -B "$work/b-rt" -G Ninja -DCMAKE_PREFIX_PATH="$work/rt" > /dev/null
cmake --build "$work/b-rt" | tail -20
test ! -e "$work/b-rt/make_kernel" || { echo "make_kernel built against the runtime-only install"; exit 1; }
LD_LIBRARY_PATH="$work/dev/lib" "$work/b-dev/make_kernel" "$work/affine.so"
LD_LIBRARY_PATH="$work/rt/lib" "$work/b-rt/run_kernel" "$work/affine.so"
if LD_LIBRARY_PATH="$work/rt/lib" ldd "$work/b-rt/run_kernel" | grep -E "LLVM|python|libkiln\.so|libkiln_graph"; then
  echo "run_kernel depends on more than kiln_runtime"; exit 1
fi
echo "cmake package: ok"
