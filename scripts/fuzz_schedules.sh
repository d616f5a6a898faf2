#!/usr/bin/env bash
# The nightly-size run of the schedule fuzzer (tests/cpp/schedule_fuzz_test.cpp):
# N random schedules (default 20000) split into JOBS shards run side by side,
# each built, run through the interpreter and the LLVM JIT, and checked
# against a naive reference. CI runs the same test with its default of 300.
#
#   bash scripts/fuzz_schedules.sh [N] [FIRST_SEED]
#   JOBS=4 KILN_BUILD_DIR=build bash scripts/fuzz_schedules.sh 20000
#   KILN_FUZZ_BIN=/path/to/schedule_fuzz_test bash scripts/fuzz_schedules.sh
#
# Logs go to $LOG_DIR (default $BUILD/fuzz_logs), one per shard; the summary
# line of each shard and every failure class are printed at the end. Exits
# non-zero when any schedule hit an internal error, failed to run or
# computed a wrong result. A failure names its seed; rerun it alone with
#   KILN_FUZZ_FIRST_SEED=<seed> KILN_FUZZ_SCHEDULES=1 $BUILD/tests/cpp/schedule_fuzz_test
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
FIRST=${2:-0}
BUILD=${KILN_BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
LOG_DIR=${LOG_DIR:-$BUILD/fuzz_logs}
# KILN_FUZZ_BIN: a test binary built earlier (then nothing is built).
BIN=${KILN_FUZZ_BIN:-$BUILD/tests/cpp/schedule_fuzz_test}
if [ -z "${KILN_FUZZ_BIN:-}" ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  cmake --build "$BUILD" --target schedule_fuzz_test
fi
mkdir -p "$LOG_DIR"
start=$(date +%s)
per=$(( (N + JOBS - 1) / JOBS ))
pids=()
for ((k = 0; k < JOBS; ++k)); do
  lo=$(( FIRST + k * per ))
  n=$(( N - k * per < per ? N - k * per : per ))
  (( n > 0 )) || break
  KILN_FUZZ_FIRST_SEED=$lo KILN_FUZZ_SCHEDULES=$n KILN_FUZZ_PROGRESS=500 KILN_FUZZ_VERBOSE=1 \
    OMP_WAIT_POLICY=passive "$BIN" >"$LOG_DIR/shard_$k.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
echo "schedule fuzz: $N schedules (seeds $FIRST..$(( FIRST + N - 1 ))) on $JOBS shards in $(( $(date +%s) - start )) s wall; logs in $LOG_DIR"
grep -h "^schedule fuzz: seeds" "$LOG_DIR"/shard_*.log || true
grep -h "^  failure x" "$LOG_DIR"/shard_*.log | sort | uniq -c || true
exit $status
