#!/usr/bin/env bash
# The page in headless Chromium (scripts/browser-test.py): makes the venv, installs Debian's
# chromium when it is missing (CI runs as root), builds (scripts/build.sh) and runs the test,
# which starts its own `toy serve` with a fake runs dir. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "browser: model $model is missing (scripts/fetch-model.sh)" >&2; exit 2; }
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "browser: chromium is missing; install it with: sudo apt-get install -y chromium" >&2
    exit 2
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
PY=$(bash scripts/serve-pyenv.sh)
bash scripts/build.sh
"$PY" scripts/browser-test.py --toy target/release/toy --model "$model"
