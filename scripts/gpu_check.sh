#!/bin/bash
# The checks that need an NVIDIA GPU, for a GPU machine (e.g. one lent by the
# device tool), run from the repository root after `bash scripts/test.sh` or
# a build into $BUILD (default build/): the CUDA kernels on the device against
# numpy and the simulator, NCCL over one rank, then the simulator/NVRTC tests.
# Exits 2 when there is no GPU, so a caller can tell "no GPU" from a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi lists none); nothing to check" >&2
  exit 2
fi
export PYTHONPATH="$PWD/python:$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
/usr/bin/python3 - <<'PY'
import kiln
ok, why = kiln.gpu.driver_available()
if not ok:
    raise SystemExit(f"gpu_check: a GPU is listed but kiln cannot use it: {why}")
print("gpu_check: CUDA driver and GPU found; NVRTC:", kiln.gpu.nvrtc_available())
PY
# -rs lists skips: on a GPU machine none of the device tests may skip.
out=$(/usr/bin/python3 -m pytest -q -rs tests/python/test_gpu_device.py tests/python/test_gpu_cuda.py tests/python/test_gpu_shuffle.py tests/python/test_gpu_tensor_core.py tests/python/test_gpu_default_schedules.py tests/python/test_gpu_models.py 2>&1) || { echo "$out"; exit 1; }
echo "$out"
if echo "$out" | grep -q "SKIPPED.*\(test_gpu_device\|needs a GPU\)"; then
  echo "gpu_check: device tests were skipped on a GPU machine" >&2
  exit 1
fi
# The benchmark table: kiln's GPU kernels beside cuBLAS (and cuDNN through a
# CUDA PyTorch, when there is one); exits 1 on a wrong result.
/usr/bin/python3 bench/gpu_bench.py
