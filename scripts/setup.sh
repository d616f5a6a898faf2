#!/usr/bin/env bash
# Installs every Debian package kiln's build, tests, benchmarks and main job
# need. Idempotent: packages already present are skipped by apt, and apt-get
# update runs only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  llvm-19-dev libzstd-dev zlib1g-dev libedit-dev libxml2-dev libcurl4-openssl-dev
  libsleef-dev
  libxgboost-dev libsqlite3-dev sqlite3 nlohmann-json3-dev libxxhash-dev
  libgtest-dev libgmock-dev
  pybind11-dev python3-dev python3-numpy python3-pytest python3-matplotlib
  libdlpack-dev
  libopenmpi-dev openmpi-bin
  python3-torch libdnnl-dev python3-threadpoolctl
  libopenblas0-pthread libopenblas-dev
  libonnx-dev libprotobuf-dev python3-onnx python3-torchvision
  gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static
)
# node and npm run ONNX Runtime, the whole-model peer (below); a machine may
# already have its own node (e.g. a newer one), which serves as well.
command -v node >/dev/null && command -v npm >/dev/null || PACKAGES+=(nodejs npm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ONNX Runtime for the model benchmarks: npm's onnxruntime-node carries the
# Linux x64 CPU build; --ignore-scripts skips its install script, which only
# fetches GPU extras from elsewhere. Pinned by third_party/onnxruntime-node/package.json.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ORT_DIR="$ROOT/third_party/onnxruntime-node"
want=$(sed -n 's/.*"onnxruntime-node": *"\([^"]*\)".*/\1/p' "$ORT_DIR/package.json")
have=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$ORT_DIR/node_modules/onnxruntime-node/package.json" 2>/dev/null | head -1 || true)
if [ "$have" != "$want" ]; then
  echo "setup: installing onnxruntime-node $want into $ORT_DIR"
  (cd "$ORT_DIR" && npm install --ignore-scripts --no-audit --no-fund --no-save --loglevel=error >/dev/null) ||
    echo "setup: npm could not install onnxruntime-node; the ONNX Runtime peer will be skipped" >&2
fi
