#!/usr/bin/env bash
# The README's test command (scripts/test.sh) on a busy machine: one CPU-bound process per
# core competes with it the whole time, three runs in a row; every run must pass. Not run by
# CI. Run it before stopping on any change that touches the server or threads.
#
# Usage: scripts/test-busy.sh [RUNS]     (RUNS defaults to 3)
# Environment: BUSY_LIMIT (seconds, default 3600): the busy processes end by themselves after
# this long even if the script is killed; the script stops them when each run ends.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
limit=${BUSY_LIMIT:-3600}
cores=$(nproc)
busy=()
stop_busy() {
  local p
  for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${busy[@]}"; do wait "$p" 2>/dev/null || true; done
  busy=()
}
trap stop_busy EXIT
log() { printf '[test-busy %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# build first, quietly: the runs then measure the tests, not the compiler
bash scripts/fetch-model.sh >/dev/null
bash scripts/build.sh
total_start=$(date +%s)
for run in $(seq 1 "$runs"); do
  for _ in $(seq 1 "$cores"); do
    timeout "$limit" bash -c 'while :; do :; done' &
    busy+=("$!")
  done
  log "run $run/$runs: scripts/test.sh beside $cores busy processes"
  start=$(date +%s)
  status=0
  bash scripts/test.sh >"target/test-busy-$run.log" 2>&1 || status=$?
  stop_busy
  took=$(($(date +%s) - start))
  if [ "$status" != 0 ]; then
    tail -n 60 "target/test-busy-$run.log" >&2
    log "run $run FAILED after ${took}s (exit $status); full log: target/test-busy-$run.log"
    exit 1
  fi
  log "run $run passed in ${took}s (log: target/test-busy-$run.log)"
done
log "all $runs runs passed in $(($(date +%s) - total_start))s"
echo "$runs passed, 0 failed"
