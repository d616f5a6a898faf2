#!/usr/bin/env bash
# The main job: build kiln, then run a real tuning session on this machine
# and compare with the peer libraries in the same run:
#  1. the auto-scheduler tunes an fp32 GEMM (512^3) and a ResNet conv2d layer
#     (64 -> 64 channels, 56x56, 3x3) with a modest budget each; every
#     measurement goes into a local SQLite tuning database (./kiln_tuning.db,
#     kept between runs: a later run resumes and never re-measures a schedule);
#     each tuned kernel is then timed interleaved with its peers (OpenBLAS
#     through numpy and torch.matmul; PyTorch conv2d in NCHW, channels_last
#     and oneDNN's blocked layout), the fastest peer counting;
#  2. the hand-scheduled GEMM (ops/src/cpu_gemm.cpp) against the same GEMM
#     peers, on 1 and 2 threads;
#  3. a whole model: torchvision's ResNet-18 (random weights, 64x64 images),
#     exported to ONNX, tuned as a model (kiln-tune model.onnx: one task per
#     distinct fused group, one budget, the same database, so a later run
#     resumes), then compiled with the records and timed against PyTorch's
#     best setup (bench/model_bench.py).
# Every peer runs through bench/peers/launcher.py: a clean environment (no
# KILN_* settings, no OMP_WAIT_POLICY), the same thread count, OpenBLAS with
# the core type that is fastest and correct on this CPU (chosen once per
# machine and cached in ~/.cache/kiln), warmed up. For every benchmark in
# one table, see bench/scoreboard.
# Environment: KILN_TUNE_TRIALS (default 64 per workload), KILN_MODEL_TRIALS
# (default 200 for the model), KILN_TUNING_DB
# (default kiln_tuning.db), KILN_BUILD_DIR (default build). Extra arguments go
# to gemm_bench (e.g. --shapes 1024x1024x1024 --repeat 9).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${KILN_BUILD_DIR:-build}
TRIALS=${KILN_TUNE_TRIALS:-64}
DB=${KILN_TUNING_DB:-kiln_tuning.db}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD" -j "$(nproc)" --target gemm_bench kiln-tune _kiln
# kiln-tune runs its own XGBoost with OMP_WAIT_POLICY=passive (it sets that
# for itself); the peers never see it.
mkdir -p "$BUILD/tune_curves"

echo "== 1. tuning session: records in $DB, $TRIALS trials per workload =="
"$BUILD"/tuner/kiln-tune matmul 512 512 512 --trials "$TRIALS" --db "$DB" --threads 2 \
  --curve "$BUILD/tune_curves/matmul_512.png"
echo
"$BUILD"/tuner/kiln-tune conv2d 1 64 56 56 64 3 3 1 1 --trials "$TRIALS" --db "$DB" --threads 2 \
  --curve "$BUILD/tune_curves/conv2d_64_56_3x3.png"

echo
echo "== 2. hand-scheduled GEMM vs OpenBLAS =="
for threads in 1 2; do
  "$BUILD"/bench/gemm_bench --threads "$threads" "$@"
done

echo
MODEL_TRIALS=${KILN_MODEL_TRIALS:-200}
echo "== 3. a whole model: ResNet-18 (64x64) tuned with $MODEL_TRIALS trials into $DB, then against PyTorch =="
export PYTHONPATH="$PWD/python:$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
/usr/bin/python3 - "$BUILD/resnet18_64.onnx" <<'PY'
import sys, torch, torchvision
torch.manual_seed(0)
net = torchvision.models.resnet18(weights=None).eval()
torch.onnx.export(net, torch.randn(1, 3, 64, 64), sys.argv[1], input_names=["input"], opset_version=13)
PY
"$BUILD"/tuner/kiln-tune "$BUILD/resnet18_64.onnx" --trials "$MODEL_TRIALS" --batch 8 --db "$DB" --threads 2 --quiet
/usr/bin/python3 bench/model_bench.py --models resnet18 --image-size 64 --threads 2 --repeat 5 --db "$DB"
