#!/usr/bin/env bash
# Load bench of `toy serve` (bench/serve-load.py): builds the release binary, starts the server on a
# free loopback port with --parallel 8 (PARALLEL=n to change; MODEL=path for another model), runs the
# bench with the given arguments, stops the server. Not part of CI (minutes, and noisy on a busy box).
#   bash bench/serve-load.sh                          # 1 vs 8 clients: tok/s ratio, TTFT, equal outputs
#   bash bench/serve-load.sh --soak 120 --clients 64  # 64 clients for 2 minutes: no 5xx, bounded RSS
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "serve-load: model $model is missing (scripts/fetch-model.sh)" >&2; exit 2; }
PY=$(bash scripts/serve-pyenv.sh)
cargo build --release --quiet -p toy-cli
runs=$(mktemp -d)
source scripts/serve-lib.sh
trap 'serve_stop; rm -rf "$runs"' EXIT
serve_start -m "$model" --parallel "${PARALLEL:-8}" --runs-dir "$runs" ${SERVE_ARGS:-}
status=0
"$PY" bench/serve-load.py --base-url "$serve_url" --pid "$serve_pid" "$@" || status=$?
exit "$status"
