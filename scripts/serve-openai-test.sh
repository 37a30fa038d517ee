#!/usr/bin/env bash
# The official `openai` Python client against a live `toy serve` (scripts/serve-openai-test.py):
# then its structured outputs and tool calls (scripts/serve-structured-test.py); makes the venv, builds (scripts/build.sh: a no-op after the tests built), starts the server
# on a free loopback port with a throwaway runs dir, runs the checks, stops the server.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "serve-openai: model $model is missing (scripts/fetch-model.sh)" >&2; exit 2; }
PY=$(bash scripts/serve-pyenv.sh)
bash scripts/build.sh
runs=$(mktemp -d)
source scripts/serve-lib.sh
trap 'serve_stop; rm -rf "$runs"' EXIT
serve_start -m "$model" --runs-dir "$runs"
status=0
"$PY" scripts/serve-openai-test.py --base-url "$serve_url" || status=$?
"$PY" scripts/serve-structured-test.py --base-url "$serve_url" || status=$?
exit "$status"
