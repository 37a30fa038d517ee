#!/usr/bin/env bash
# What constrained decoding costs in `toy serve` (bench/constrained-cost.py): starts the server with
# --parallel 8 on a free port (MODEL=path for another model), compares JSON-schema-constrained decode
# tok/s with the same requests unconstrained at 1 and 8 clients. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "constrained-cost: model $model is missing (scripts/fetch-model.sh)" >&2; exit 2; }
PY=$(bash scripts/serve-pyenv.sh)
cargo build --release --quiet -p toy-cli
runs=$(mktemp -d)
source scripts/serve-lib.sh
trap 'serve_stop; rm -rf "$runs"' EXIT
serve_start -m "$model" --parallel 8 --runs-dir "$runs"
"$PY" bench/constrained-cost.py --base-url "$serve_url" "$@"
