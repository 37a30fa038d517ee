#!/usr/bin/env bash
# The ViT trained in toy, PyTorch eager and torch.compile, side by side (issue 15).
#
# Usage: bench/vit-pytorch.sh [RECIPE...]   (default: recipes/vit-fashion.toml recipes/vit-tiny.toml)
#
# For each image recipe: STEPS steps of `toy train` (with --checkpoint-start), then of
# bench/pytorch/train_vit_torch.py in eager mode and with torch.compile (a plain-torch ViT of
# the same shape, started from toy's initial weights, on the same shards in the same order,
# AdamW with decay on matrices, the same schedule and label smoothing), each in its own
# process at THREADS threads, all without augmentation (toy draws it from its own generator).
# Prints images/s (median of steady-state steps), the ratios toy/eager and toy/compile, peak
# RSS, and the loss ratio after the same steps (mean of the last 10 step losses; must be within
# 2%). Needs Fashion-MNIST shards in data/fashion-mnist (`toy data images`; the package
# dataset-fashion-mnist). Results: target/bench-vit/*.json. Not part of CI.
#
# Environment: PRECISIONS (f32,bf16: toy's runs), MODES (eager,compile,compile-bf16: PyTorch's,
# the last under torch.autocast(bfloat16)), THREADS (2), STEPS_FASHION (200), STEPS_TINY (30), TORCH_VENV (a venv with torch;
# default target/pytorch-venv, made here), TORCH_VERSION (2.15.0), OMP_WAIT_POLICY (passive).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

THREADS=${THREADS:-2}
STEPS_FASHION=${STEPS_FASHION:-200}
STEPS_TINY=${STEPS_TINY:-30}
TORCH_VERSION=${TORCH_VERSION:-2.15.0}
venv="${TORCH_VENV:-$root/target/pytorch-venv}"
py="$venv/bin/python"
work="$root/target/bench-vit"
toy="$root/target/release/toy"
data="$root/data/fashion-mnist"
recipes=("$@")
[ ${#recipes[@]} -eq 0 ] && recipes=(recipes/vit-fashion.toml recipes/vit-tiny.toml)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

mkdir -p "$work/logs"
. "$root/bench/pytorch/venv.sh"

log "building toy"
cargo build --release -p toy-cli >&2
if [ ! -f "$data/meta.json" ]; then
    log "writing Fashion-MNIST shards into $data"
    "$toy" data images --out "$data" >&2 || die "no Fashion-MNIST (apt-get install dataset-fashion-mnist)"
fi

status=0
for recipe in "${recipes[@]}"; do
    name=$(basename "$recipe" .toml)
    case $name in vit-tiny) steps=$STEPS_TINY ;; *) steps=$STEPS_FASHION ;; esac
    runs="$work/runs-$name"
    rm -rf "$runs"
    log "$name: $steps steps each of toy, torch eager, torch.compile at $THREADS threads"
    "$py" bench/pytorch/compare.py "$recipe" --kind vit --toy "$toy" --python "$py" \
        --data "$data" --steps "$steps" --threads "$THREADS" --warmup-steps 5 \
        --precisions "${PRECISIONS:-f32,bf16}" --modes "${MODES:-eager,compile,compile-bf16}" \
        --runs-dir "$runs" --out "$work/compare-$name.json" || status=1
done
exit $status
