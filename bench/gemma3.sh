#!/usr/bin/env bash
# Gemma 3 270M (base, Q4_K_M mix; scripts/fetch-gemma.sh) beside llama.cpp 0c1e570, as issue 42
# asks: greedy generation for 64 tokens on 3 prompts (how long the engines agree, on the Q4_K_M
# file and on the F32 model, and how long each quantized run follows the F32 one),
# perplexity on ../shared/golden/gpl-3.txt at ctx 256, KL divergence against the F32-dequantized
# model (run by llama-perplexity; first $CHUNKS chunks), and llama-bench's pp512 / tg128 beside
# `toy bench`, rounds alternating. Usage: LLAMA_BIN=target/llama-cpp/build-gcc/bin \
# PPL_BIN=target/llama-cpp/build-ppl/bin bench/gemma3.sh. Environment: CHUNKS (6), ROUNDS (2),
# OUT (target/bench-gemma3). Needs llama-simple, llama-bench (LLAMA_BIN), llama-perplexity (PPL_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${LLAMA_BIN:?set LLAMA_BIN to the folder holding llama-simple and llama-bench}
ppl=${PPL_BIN:-$bin}
out=${OUT:-target/bench-gemma3}; mkdir -p "$out"
bash scripts/fetch-gemma.sh
Q=models/gemma-3-270m-q4_k_m.gguf; F=models/gemma-3-270m-q4_k_m.f32.gguf
text=../shared/golden/gpl-3.txt; toy=${TOY:-target/release/toy}
[ -x "$toy" ] || bash scripts/build.sh
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

log "greedy, 64 tokens, 3 prompts: the Q4_K_M file and the F32 model, each engine"
[ -f "$F" ] || "$toy" -t 2 quantize --type F32 "$Q" "$F"
i=0
for p in "Once upon a time, in a small village nestled between rolling hills, there lived" \
         "def fibonacci(n):" \
         "The three most important inventions of the twentieth century are"; do
  i=$((i + 1))
  for m in q:"$Q" f:"$F"; do
    LD_LIBRARY_PATH=$bin "$bin/llama-simple" -m "${m#*:}" -n 64 "$p" 2>/dev/null > "$out/llama-${m%%:*}-$i.txt" || true
    "$toy" -t 2 generate -m "${m#*:}" -p "$p" -n 64 --temp 0 2>/dev/null | sed '/^\[/d' > "$out/toy-${m%%:*}-$i.txt"
  done
  python3 - "$out" "$i" "$p" <<'PY'
import sys
out, i, p = sys.argv[1], sys.argv[2], sys.argv[3]
r = lambda n: open(f"{out}/{n}-{i}.txt").read().replace("<bos>", "", 1).rstrip("\n")[len(p):]
lq, lf, tq, tf = r("llama-q"), r("llama-f"), r("toy-q"), r("toy-f")
def same(a, b):
    return next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
# the F32 model's greedy text is the reference the quantized runs are held to
print(f"prompt {p[:40]!r}: characters equal after the prompt: Q4_K_M toy~llama.cpp {same(tq, lq)} "
      f"(of {len(tq)} / {len(lq)}); F32 toy~llama.cpp {same(tf, lf)}; Q4_K_M against F32: "
      f"toy {same(tq, tf)}, llama.cpp {same(lq, lf)}")
PY
done | tee "$out/greedy.txt"

log "perplexity, ctx 256"
LD_LIBRARY_PATH=$ppl "$ppl/llama-perplexity" -m "$Q" -f "$text" -c 256 -t 2 2>&1 | grep "Final estimate" | tee "$out/ppl.txt"
"$toy" -t 2 eval ppl -m "$Q" -f "$text" -c 256 | tee -a "$out/ppl.txt"

log "KL divergence against the F32 model (first ${CHUNKS:-6} chunks of 256)"
LD_LIBRARY_PATH=$ppl "$ppl/llama-perplexity" -m "$F" -f "$text" -c 256 -t 2 --chunks "${CHUNKS:-6}" \
  --kl-divergence-base "$out/f32.kld" > "$out/llama-f32.out" 2>&1
LD_LIBRARY_PATH=$ppl "$ppl/llama-perplexity" -m "$Q" -t 2 --chunks "${CHUNKS:-6}" \
  --kl-divergence-base "$out/f32.kld" --kl-divergence > "$out/llama-q.out" 2>&1
grep -E "^Mean    KLD|^Same top p" "$out/llama-q.out" | sed 's/^/llama.cpp /' | tee "$out/kld.txt"
"$toy" -t 2 eval kld -m "$Q" --base "$out/f32.kld" --chunks "${CHUNKS:-6}" | grep -iE "kl|top" | sed 's/^/toy /' | tee -a "$out/kld.txt"
rm -f "$out/f32.kld"

log "speed, ${ROUNDS:-2} rounds alternating"
for r in $(seq "${ROUNDS:-2}"); do
  LD_LIBRARY_PATH=$bin "$bin/llama-bench" -m "$Q" -p 512 -n 128 -t 2 -r 2 2>/dev/null | grep -E "pp512|tg128" | sed "s/^/round $r llama.cpp /"
  "$toy" -t 2 bench -m "$Q" -p 512 -n 128 2>/dev/null | grep -E "^(pp512|tg128)" | sed "s/^/round $r toy /"
done | tee "$out/speed.txt"
