#!/usr/bin/env bash
# Issue 14's agreement check, taken to the truth the brief names: fidelity to the exact model. The
# reference is Qwen2.5-Coder-1.5B's Q4_K_M weights dequantized to F32 (`toy quantize --type F32`), run
# by llama-perplexity itself (f32 weights: f32 activations, no Q8_K rounding), whose log-probs it
# writes as a --kl-divergence-base. Against that one base, on ../shared/golden/gpl-3.txt (ctx $CTX):
#  - llama-perplexity on the Q4_K_M file (its CPU kernels round activations to Q8_K);
#  - `toy eval kld` on the Q4_K_M file, default path (AMX bf16 prefill where the CPU has it);
#  - the same on toy's integer kernels (TOY_NO_AMX=1: activations rounded to Q8_K as llama.cpp's);
#  - `toy eval kld` on the F32 file (toy's exact arithmetic against llama.cpp's: near zero).
# Each prints ppl, mean KL divergence to the reference and how often the top token agrees.
# Usage: LLAMA_BIN=path/to/llama.cpp/build/bin bench/coder-fidelity.sh. Environment: CTX (512),
# CHUNKS (all), OUT (target/bench-coder-fidelity). Needs ~7 GB of disk for the F32 file and the base.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${LLAMA_BIN:?set LLAMA_BIN to the folder holding llama-perplexity}
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ctx=${CTX:-512}; out=${OUT:-target/bench-coder-fidelity}; mkdir -p "$out"
chunks=(); [ -z "${CHUNKS:-}" ] || chunks=(--chunks "$CHUNKS")
bash scripts/fetch-coder.sh
Q=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
F=models/qwen2.5-coder-1.5b-instruct-q4_k_m.f32.gguf
text=../shared/golden/gpl-3.txt
toy=${TOY:-target/release/toy}
[ -x "$toy" ] || bash scripts/build.sh
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

[ -f "$F" ] || { log "dequantize to F32"; "$toy" -t 2 quantize --type F32 "$Q" "$F"; }
log "reference: llama-perplexity on the F32 file"
"$bin/llama-perplexity" -m "$F" -f "$text" -c "$ctx" -t 2 "${chunks[@]}" \
  --kl-divergence-base "$out/f32.kld" > "$out/llama-f32.out" 2>&1
log "llama-perplexity on Q4_K_M against it"
"$bin/llama-perplexity" -m "$Q" -t 2 "${chunks[@]}" --kl-divergence-base "$out/f32.kld" \
  --kl-divergence > "$out/llama-q.out" 2>&1
log "toy on Q4_K_M (default path, then integer kernels), and on F32"
"$toy" -t 2 eval kld -m "$Q" --base "$out/f32.kld" "${chunks[@]}" --json > "$out/toy-q.json"
TOY_NO_AMX=1 "$toy" -t 2 eval kld -m "$Q" --base "$out/f32.kld" "${chunks[@]}" --json > "$out/toy-q-int8.json"
"$toy" -t 2 eval kld -m "$F" --base "$out/f32.kld" "${chunks[@]}" --json > "$out/toy-f32.json"
python3 bench/coder/fidelity.py "$out"
