#!/usr/bin/env bash
# toy quantize against llama-quantize (llama.cpp 0c1e570), type by type, on one F32 model
# (issue 45). For each file type, without and with an importance matrix:
#   - both tools write the file; bench/gguf-diff.py compares every tensor's type and bytes;
#   - the size, and the KL divergence against the F32 model and the perplexity on TEXT, from
#     `toy eval kld` and from llama-perplexity --kl-divergence, both on toy's file (so llama.cpp
#     loads every file toy writes);
# and the importance matrices: `toy imatrix` against llama-imatrix on CALIB (per-column
# relative difference, bench/imatrix-diff.py), and llama-quantize's files made with toy's
# matrix against those made with llama-imatrix's (bytes, KLD).
#
# Usage: bench/quantize-compare.sh MODEL-F32.gguf [TYPE...]
# Environment: KEEP=0 deletes each row's files once scored (large models); TEXT (../shared/golden/gpl-3.txt) to evaluate, CALIB (README.md and docs/*.md
# joined) for the importance matrices, CTX (512), CHUNKS (all) for the evaluation, IMATRIX_TYPES
# (the k-quants, legacy 4/5-bit and IQ4 types) for the imatrix half, OUT
# (target/quantize-compare/NAME), LLAMA_BIN (target/llama-cpp/build-gcc/bin: llama-quantize,
# llama-imatrix), LLAMA_PPL (target/llama-cpp/build-ppl/bin/llama-perplexity), TOY (a built toy).
# Needs llama.cpp's gguf-py (the sdist's) and numpy. Not run in CI. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/quantize-compare.sh MODEL-F32.gguf [TYPE...]}
shift
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL IQ4_XS F16 BF16)
read -r -a itypes <<<"${IMATRIX_TYPES:-Q2_K_S Q2_K Q3_K_M Q4_K_S Q4_K_M Q5_K_M Q6_K Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL IQ4_XS}"
text=${TEXT:-../shared/golden/gpl-3.txt}
ctx=${CTX:-512}
name=$(basename "$model" .gguf)
out=${OUT:-target/quantize-compare/$name}
bin=${LLAMA_BIN:-target/llama-cpp/build-gcc/bin}
ppl=${LLAMA_PPL:-target/llama-cpp/build-ppl/bin/llama-perplexity}
toy=${TOY:-target/release/toy}
export PYTHONPATH=${PYTHONPATH:-target/llama-cpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py}
export LD_LIBRARY_PATH="$bin:$(dirname "$ppl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
chunks=()
[ -n "${CHUNKS:-}" ] && chunks=(--chunks "$CHUNKS")
mkdir -p "$out"
calib=$out/calib.txt
if [ -n "${CALIB:-}" ]; then cp "$CALIB" "$calib"; else cat README.md docs/*.md >"$calib"; fi

echo "== importance matrices on $(wc -c <"$calib") bytes of calibration text" >&2
# (kept from an earlier run when present: delete them to recompute)
[ -f "$out/imatrix-toy.gguf" ] || "$toy" imatrix -m "$model" -f "$calib" -c "$ctx" -o "$out/imatrix-toy.gguf" 2>&1 | tail -1 >&2
[ -f "$out/imatrix-llama.gguf" ] || "$bin/llama-imatrix" -m "$model" -f "$calib" -c "$ctx" -o "$out/imatrix-llama.gguf" -t 2 --no-ppl >"$out/imatrix-llama.log" 2>&1
imdiff=$(python3 bench/imatrix-diff.py "$out/imatrix-llama.gguf" "$out/imatrix-toy.gguf" | tail -1)
echo "$imdiff" >&2

echo "== base: F32 log-probs on $text" >&2
"$toy" eval kld -m "$model" -f "$text" -c "$ctx" "${chunks[@]}" --save-base "$out/base.kld" 2>&1 | tail -1 >&2

size() { echo "scale=1; $(stat -c %s "$1") / 1048576" | bc; }
same() { python3 bench/gguf-diff.py "$1" "$2" | tail -1 | awk '{gsub(",", ""); printf "%s/%s identical", $2, $NF}'; }
toy_kld() { "$toy" eval kld -m "$1" --base "$out/base.kld" --json 2>/dev/null |
  python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.6f %.4f" % (j["kld_mean"]["value"], j["ppl_q"]["value"]))'; }
llama_kld() { "$ppl" -m "$1" -c "$ctx" "${chunks[@]}" --kl-divergence-base "$out/base.kld" --kl-divergence -t 2 >"$1.ppl.log" 2>&1 || { echo "fail fail"; return; }
  awk '/^Mean +KLD:/ {k=$3} /^Mean PPL\(Q\) +:/ {p=$4} END {printf "%s %s\n", k, p}' "$1.ppl.log"; }

# one row: type, imatrix file ("" for none), label
row() {
  local t=$1 im=$2 label=$3 iarg=() targ=()
  [ -n "$im" ] && iarg=(--imatrix "$im") && targ=(--imatrix "$im")
  local lq=$out/lq-$label-$t.gguf to=$out/to-$label-$t.gguf
  "$bin/llama-quantize" "${iarg[@]}" "$model" "$lq" "$t" >"$lq.log" 2>&1 || { echo "| $t | $label | llama-quantize failed ($lq.log) |"; return; }
  "$toy" quantize "$model" "$to" --type "$t" "${targ[@]}" 2>"$to.log" || { echo "| $t | $label | toy quantize failed ($to.log) |"; return; }
  read -r tk tp < <(toy_kld "$to")
  read -r lk lp < <(llama_kld "$to")
  echo "| $t | $label | $(size "$to") | $(size "$lq") | $(same "$lq" "$to") | $tk | $lk | $tp | $lp |"
  # large models: keep only what the last table needs (KEEP=1 keeps every file)
  if [ "${KEEP:-1}" = 0 ]; then rm -f "$to"; [ "$label" = llama-imatrix ] || rm -f "$lq"; fi
}

echo
echo "$name, $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) ($(grep -q avx512_vnni /proc/cpuinfo && echo AVX-512 VNNI || echo AVX2), $(nproc) threads); KLD against the F32 model on $(basename "$text"), ctx $ctx"
echo
echo "| type | imatrix | toy MiB | llama-quantize MiB | tensors | KLD (toy eval) | KLD (llama-perplexity) | PPL (toy) | PPL (llama.cpp) |"
echo "|---|---|---|---|---|---|---|---|---|"
for t in "${types[@]}"; do
  [ "$t" = Q2_K_S ] || row "$t" "" none
done
for t in "${itypes[@]}"; do
  row "$t" "$out/imatrix-llama.gguf" llama-imatrix
done
echo
echo "importance matrices, toy imatrix against llama-imatrix: $imdiff"
echo
echo "llama-quantize with toy's importance matrix against with llama-imatrix's:"
echo
echo "| type | tensors | KLD with toy's | KLD with llama's |"
echo "|---|---|---|---|"
for t in "${itypes[@]}"; do
  lt=$out/lq-toyim-$t.gguf
  "$bin/llama-quantize" --imatrix "$out/imatrix-toy.gguf" "$model" "$lt" "$t" >"$lt.log" 2>&1 || { echo "| $t | failed |"; continue; }
  read -r k1 _ < <(toy_kld "$lt")
  read -r k2 _ < <(toy_kld "$out/lq-llama-imatrix-$t.gguf")
  echo "| $t | $(same "$out/lq-llama-imatrix-$t.gguf" "$lt") | $k1 | $k2 |"
  if [ "${KEEP:-1}" = 0 ]; then rm -f "$lt" "$out/lq-llama-imatrix-$t.gguf"; fi
done
