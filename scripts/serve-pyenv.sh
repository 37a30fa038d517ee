#!/usr/bin/env bash
# Make (or refresh) the Python venv for the serve tests and load bench at target/pyenv with the pinned
# packages of scripts/serve-requirements.txt, then print its python's path. Fails loudly when it can't.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/target/pyenv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$root/scripts/serve-requirements.txt" >&2
echo "$venv/bin/python"
