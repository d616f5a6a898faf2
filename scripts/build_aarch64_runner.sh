#!/usr/bin/env bash
# Cross-builds tools/kiln_run_model.c for AArch64 with kiln_runtime's sources
# compiled in (no LLVM, no Python: what a device needs to run a model library
# exported for "llvm -mtriple=aarch64-linux-gnu ..."). The runtime's symbols
# are exported from the program (-rdynamic), so the model library, linked
# without the runtime (export_library for a cross target), binds them when it
# is loaded.
#
#   scripts/build_aarch64_runner.sh OUT_DIR    -> OUT_DIR/kiln_run_model
#
# Needs aarch64-linux-gnu-gcc/g++ (scripts/setup.sh installs them). Objects are
# kept in OUT_DIR and rebuilt only when older than a source or a header; run it
# under qemu-aarch64 -L /usr/aarch64-linux-gnu on an x86 machine.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:?usage: $0 OUT_DIR}"
CXX="${AARCH64_CXX:-aarch64-linux-gnu-g++}"
CC="${AARCH64_CC:-aarch64-linux-gnu-gcc}"
for tool in "$CXX" "$CC"; do
  command -v "$tool" >/dev/null || { echo "build_aarch64_runner: no $tool; install g++-aarch64-linux-gnu (scripts/setup.sh does)" >&2; exit 3; }
done
command -v ccache >/dev/null && { CXX="ccache $CXX"; CC="ccache $CC"; }
mkdir -p "$OUT/obj" "$OUT/include"

# The header-only dependencies live in the host's /usr/include, which the
# cross compiler does not search (it would find x86 libc headers there too):
# link just them into an include directory of their own.
for h in nlohmann dlpack xxhash.h; do
  [ -e "/usr/include/$h" ] || { echo "build_aarch64_runner: /usr/include/$h is missing (scripts/setup.sh installs it)" >&2; exit 3; }
  ln -sfn "/usr/include/$h" "$OUT/include/$h"
done

VERSION=$(sed -n 's/^project(kiln VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
FLAGS=(-std=c++20 -O2 -fPIC -DKILN_VERSION="\"$VERSION\"" -I"$ROOT/runtime/include" -I"$ROOT/runtime/src" -I"$OUT/include")
newest_header=$(ls -t "$ROOT"/runtime/include/kiln/runtime/*.h "$ROOT"/runtime/include/kiln/*/*.h "$ROOT"/runtime/src/*.h 2>/dev/null | head -1)

objs=()
todo=()
for src in "$ROOT"/runtime/src/*.cpp; do
  obj="$OUT/obj/$(basename "${src%.cpp}").o"
  objs+=("$obj")
  if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ] || [ "$newest_header" -nt "$obj" ]; then todo+=("$src"); fi
done
if [ ${#todo[@]} -gt 0 ]; then
  echo "build_aarch64_runner: compiling ${#todo[@]} runtime sources for AArch64"
  export CXX OUT
  printf '%s\n' "${todo[@]}" | xargs -P "${JOBS:-2}" -I{} sh -c \
    'o="$OUT/obj/$(basename {} .cpp).o"; $CXX "$@" -c {} -o "$o.tmp" && mv "$o.tmp" "$o"' _ "${FLAGS[@]}"
fi
$CC -std=c99 -O2 -Wall -Wextra -I"$ROOT/runtime/include" -I"$OUT/include" -c "$ROOT/tools/kiln_run_model.c" -o "$OUT/obj/kiln_run_model.o"
# Linked by g++ for libstdc++; -rdynamic exports the runtime to the model library.
${CXX#ccache } -rdynamic -o "$OUT/kiln_run_model.tmp" "$OUT/obj/kiln_run_model.o" "${objs[@]}" -lpthread -ldl -lm
mv "$OUT/kiln_run_model.tmp" "$OUT/kiln_run_model"
echo "build_aarch64_runner: $OUT/kiln_run_model"
