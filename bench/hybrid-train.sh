#!/usr/bin/env bash
# Training speed of recipes/hybrid-small.toml (8 layers, 3 GDN : 1 gated attention, 9.3M
# parameters) in toy against PyTorch in the same run: transformers' Qwen3_5ForCausalLM of the
# same shape with its pure-torch Gated DeltaNet (bench/pytorch/train_hybrid_torch.py; f32,
# AdamW, batches of 8 x 256), in the venv of scripts/qwen35-reference.sh (made when missing).
# Prints both tokens/s and their ratio. Not part of CI.
# Environment: THREADS (2), STEPS (12).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}
steps=${STEPS:-12}
py=target/qwen35-venv/bin/python
[ -x "$py" ] || bash scripts/qwen35-reference.sh >&2
cargo build --release --quiet --bin toy
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
target/release/toy -t "$threads" train recipes/hybrid-small.toml --set train.steps="$steps" \
  --set eval.interval=100000 --set checkpoint.interval=100000 --runs-dir "$runs" >&2
toy=$(python3 -c '
import glob, json, sys
ev = [json.loads(l) for l in open(glob.glob(sys.argv[1] + "/*/events.jsonl")[0])]
t = sorted(e["tok_s"] for e in ev if e["type"] == "step" and e["step"] > 2)
print(t[len(t) // 2])' "$runs")
torch=$("$py" bench/pytorch/train_hybrid_torch.py --steps 4 --warmup 1 --threads "$threads" 2>/dev/null |
  python3 -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["tok_s"])')
python3 -c 'import sys; t, p = map(float, sys.argv[1:]); print(f"hybrid-small training: toy {t:.0f} tok/s, PyTorch (pure-torch GDN, eager) {p:.0f} tok/s, ratio {t / p:.2f}x")' "$toy" "$torch"
