#!/usr/bin/env bash
# Sweeps decode's software-prefetch distance (TOY_PREFETCH_BYTES; 0 turns it off) on
# SmolLM2-135M in each weight type given, alternating distances so drift on a shared machine
# spreads over all of them. Prints tg tok/s per type and distance. Not part of CI.
#
# Usage: bench/prefetch.sh [TYPE...]     (default Q8_0 Q4_1)   Environment: THREADS (2), ROUNDS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}
rounds=${ROUNDS:-2}
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Q8_0 Q4_1)
work=target/hybrid-bench
mkdir -p "$work"
bash scripts/fetch-model.sh >/dev/null
cargo build --release --quiet --bin toy
smol=models/SmolLM2-135M-Instruct.Q4_1.gguf
for ty in "${types[@]}"; do
  f="$work/smollm2-135m.$ty.gguf"
  [ -f "$f" ] || target/release/toy quantize "$smol" "$f" --type "$ty" >/dev/null
  for r in $(seq "$rounds"); do
    for d in 0 1024 2048 3072 4096 6144; do  # the L1 distance (TOY_PREFETCH_L2_BYTES, the L2 one, left at its default)
      tg=$(TOY_PREFETCH_BYTES=$d target/release/toy -t "$threads" bench -m "$f" -p 1 -n 256 -r 3 | awk '/^tg/ {print $2}')
      echo "$ty round $r prefetch $d: tg256 $tg tok/s"
    done
  done
done
