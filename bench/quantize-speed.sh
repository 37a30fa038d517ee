#!/usr/bin/env bash
# Speed of each file type toy quantize writes (issue 45's table): for every TYPE, `toy
# quantize MODEL` writes the file (llama-quantize's mix; the same bytes, bench/quantize-compare.sh),
# then `toy bench` and llama-bench (llama.cpp 0c1e570, GCC build) run it in turn, REPS rounds
# of one repetition each, alternating which goes first, and the median of each side is kept.
# Prints a markdown table: size, prefill and decode tok/s of both engines and their ratios.
#
# Usage: bench/quantize-speed.sh MODEL-F32.gguf [TYPE...]
# Environment: THREADS (2), N_PROMPT (128), N_GEN (32), REPS (3), OUT
# (target/quantize-speed/NAME), LLAMA_BIN (target/llama-cpp/build-gcc/bin), TOY
# (target/release/toy), IMATRIX (an importance matrix for the types that need one). Not run in
# CI; run nothing else beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/quantize-speed.sh MODEL-F32.gguf [TYPE...]}
shift
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL IQ4_XS IQ3_S F16 BF16)
threads=${THREADS:-2}
np=${N_PROMPT:-128}
ng=${N_GEN:-32}
reps=${REPS:-3}
name=$(basename "$model" .gguf)
out=${OUT:-target/quantize-speed/$name}
bin=${LLAMA_BIN:-target/llama-cpp/build-gcc/bin}
toy=${TOY:-target/release/toy}
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$out"

toy_run() { "$toy" bench -m "$1" -p "$np" -n "$ng" -r 1 -t "$threads" --json 2>/dev/null |
  python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["prefill_tok_s"]["mean"], j["decode_tok_s"]["mean"])'; }
llama_run() { "$bin/llama-bench" -m "$1" -p "$np" -n "$ng" -r 1 -t "$threads" -o json 2>/dev/null |
  python3 -c 'import json,sys; j=json.load(sys.stdin); print(*[r["avg_ts"] for r in j])'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "$name, $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) ($(grep -q avx512_vnni /proc/cpuinfo && echo AVX-512 VNNI || echo AVX2)), $threads threads, pp$np / tg$ng, median of $reps alternating rounds"
echo
echo "| type | MiB | toy pp | llama.cpp pp | ratio | toy tg | llama.cpp tg | ratio |"
echo "|---|---|---|---|---|---|---|---|"
for t in "${types[@]}"; do
  f=$out/$t.gguf
  iarg=()
  [ -n "${IMATRIX:-}" ] && iarg=(--imatrix "$IMATRIX")
  [ -f "$f" ] || "$toy" quantize "$model" "$f" --type "$t" "${iarg[@]}" 2>"$f.log" || { echo "| $t | quantize failed ($f.log) |"; continue; }
  tp=() tg=() lp=() lg=()
  for r in $(seq "$reps"); do
    if [ $((r % 2)) = 1 ]; then
      read -r a b < <(toy_run "$f"); read -r c d < <(llama_run "$f")
    else
      read -r c d < <(llama_run "$f"); read -r a b < <(toy_run "$f")
    fi
    tp+=("$a") tg+=("$b") lp+=("$c") lg+=("$d")
  done
  python3 - "$t" "$(stat -c %s "$f")" "$(median "${tp[@]}")" "$(median "${lp[@]}")" "$(median "${tg[@]}")" "$(median "${lg[@]}")" <<'EOF'
import sys
t, size, tp, lp, tg, lg = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:])
print(f"| {t} | {size / 1048576:.1f} | {tp:.0f} | {lp:.0f} | {tp / lp:.2f}x | {tg:.1f} | {lg:.1f} | {tg / lg:.2f}x |")
EOF
done
