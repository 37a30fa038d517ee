#!/usr/bin/env bash
# LoRA on Qwen2.5-Coder-0.5B-Instruct (a qwen2 base, Q4_K_M mix; `scripts/fetch-coder.sh draft`)
# with data/sft, checked three ways (issue 37). Not part of CI: about 20-30 min on 2 cores.
#
#  1. The held-out assistant log-likelihood rises: `toy finetune` of recipes/sft-smollm2-lora.toml
#     on the Coder base, its held-out loss at step 0 (the base itself: an adapter's B starts at
#     0) against its held-out loss after STEPS steps (events.jsonl).
#  2. `toy chat --lora` answers held-out questions in the taught two-line format
#     (^ANSWER: ...\nCONFIDENCE: high|medium|low$) more often than the base does.
#  3. llama.cpp's `llama-perplexity --lora` on toy's adapter agrees with `toy eval ppl --lora`
#     within 0.5% on the same text (and, as a yardstick, without the adapter).
#
# Usage: bench/coder-lora.sh [STEPS]          (default 60)
# Environment: THREADS (2), CTX (512, the perplexity chunk), TEXT_BYTES (16000: the first bytes
# of ../shared/golden/gpl-3.txt), LLAMA_BIN (a folder holding llama-perplexity; else it is built
# from the llama-cpp-python==0.3.36 sdist into target/llama-cpp/build-ppl), TOY (a built toy).
# Writes target/coder-lora/results.json; exits 1 when a check fails.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

STEPS=${1:-${STEPS:-60}}
THREADS=${THREADS:-2}
CTX=${CTX:-512}
TEXT_BYTES=${TEXT_BYTES:-16000}
work=$root/target/coder-lora
base=models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
readonly PY_VERSION=0.3.36
readonly SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
case "$STEPS" in '' | *[!0-9]* | 0) die "STEPS must be a positive integer, got '$STEPS'" ;; esac
mkdir -p "$work"

[ -f "$base" ] || bash scripts/fetch-coder.sh draft
if [ -z "${TOY:-}" ]; then
  cargo build --release --quiet --bin toy
  TOY=$root/target/release/toy
fi
toy() { "$TOY" -t "$THREADS" "$@"; }

# llama-perplexity: given, or built once from the sdist (the source compare-llama-cpp.sh uses)
llama_perplexity() {
  if [ -n "${LLAMA_BIN:-}" ]; then echo "$LLAMA_BIN/llama-perplexity"; return; fi
  local src=$root/target/llama-cpp/src build=$root/target/llama-cpp/build-ppl
  local tree=$src/llama_cpp_python-$PY_VERSION/vendor/llama.cpp
  if [ ! -x "$build/bin/llama-perplexity" ]; then
    if [ ! -f "$tree/CMakeLists.txt" ]; then
      mkdir -p "$src"
      python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$PY_VERSION" -d "$src" >&2
      local sd=$src/llama_cpp_python-$PY_VERSION.tar.gz
      [ "$(sha256sum "$sd" | cut -d' ' -f1)" = "$SDIST_SHA256" ] || die "sha256 mismatch: $sd"
      tar -xzf "$sd" -C "$src"
    fi
    command -v cmake >/dev/null || python3 -m pip install --quiet cmake >&2
    log "building llama-perplexity (once; cached in $build)"
    cmake -S "$tree" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
      >"$work/cmake.log" 2>&1 || { tail -20 "$work/cmake.log" >&2; die "cmake failed"; }
    cmake --build "$build" --target llama-perplexity -j2 >>"$work/cmake.log" 2>&1 ||
      { tail -20 "$work/cmake.log" >&2; die "building llama-perplexity failed"; }
  fi
  echo "$build/bin/llama-perplexity"
}

# 1. the base's held-out loss (lr 0), then STEPS steps of LoRA
finetune() { # run-name extra --set args...
  local name=$1; shift
  rm -rf "$work/runs/$name"
  toy finetune recipes/sft-smollm2-lora.toml --runs-dir "$work/runs" \
    --set "name=$name" --set "base.model=$base" "$@" >"$work/$name.out" 2>"$work/$name.err" ||
    { tail -5 "$work/$name.err" >&2; die "toy finetune ($name) failed"; }
}
val_loss() { # run-name first|last: that eval event's held-out loss
  python3 -c 'import json,sys; e=[e for e in map(json.loads, open(sys.argv[1])) if e["type"] == "eval"]; print(e[0 if sys.argv[2] == "first" else -1]["val_loss"])' \
    "$(ls -d "$work"/runs/"$1"-*/ | tail -1)events.jsonl" "$2"
}
log "1. $STEPS steps of LoRA (r 16, every linear part)"
t0=$(date +%s)
finetune lora --set "train.steps=$STEPS" --set "eval.interval=$STEPS" --set "checkpoint.interval=$STEPS"
train_s=$(($(date +%s) - t0))
before=$(val_loss lora first) after=$(val_loss lora last)
adapter=$(sed -n 's/^adapter: //p' "$work/lora.out")
[ -f "$adapter" ] || die "no adapter in $work/lora.out"
log "   held-out loss $before -> $after in ${train_s}s; adapter $adapter"

# 2. the taught format on held-out questions, base against adapter
questions=$work/questions.txt
python3 - "$questions" <<'EOF'
import json, sys
qs = []
for line in open("data/sft/val.jsonl"):
    m = json.loads(line)["messages"]
    qs.append(next(x["content"] for x in m if x["role"] == "user"))
open(sys.argv[1], "w").write("".join(q.replace("\n", " ") + "\n/reset\n" for q in qs[:12]))
EOF
chat() { toy chat -m "$base" "$@" -n 24 --temp 0 <"$questions" 2>/dev/null; }
chat >"$work/chat-base.txt"
chat --lora "$adapter" >"$work/chat-lora.txt"
formatted() { grep -cE '^CONFIDENCE: (high|medium|low)$' "$1" || true; }
fmt_base=$(formatted "$work/chat-base.txt") fmt_lora=$(formatted "$work/chat-lora.txt")
log "2. replies in the taught format: base $fmt_base/12, adapter $fmt_lora/12"

# 3. perplexity with the adapter, toy against llama.cpp
text=$work/text.txt
head -c "$TEXT_BYTES" ../shared/golden/gpl-3.txt >"$text"
ppl_bin=$(llama_perplexity)
llama_ppl() {
  "$ppl_bin" -m "$base" -f "$text" -c "$CTX" -t "$THREADS" "$@" 2>&1 |
    sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p'
}
toy_ppl() {
  toy eval ppl -m "$base" -f "$text" -c "$CTX" --json "$@" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ppl"])'
}
l_base=$(llama_ppl) t_base=$(toy_ppl)
l_lora=$(llama_ppl --lora "$adapter") t_lora=$(toy_ppl --lora "$adapter")
log "3. perplexity: base toy $t_base llama.cpp $l_base; with the adapter toy $t_lora llama.cpp $l_lora"

python3 - "$work/results.json" "$before" "$after" "$fmt_base" "$fmt_lora" "$t_base" "$l_base" "$t_lora" "$l_lora" "$STEPS" "$train_s" "$THREADS" <<'EOF'
import json, sys
out, before, after, fb, fl, tb, lb, tl, ll, steps, secs, threads = sys.argv[1:]
r = dict(steps=int(steps), train_seconds=int(secs), threads=int(threads),
         heldout_loss_base=float(before), heldout_loss_lora=float(after),
         format_base=int(fb), format_lora=int(fl), of=12,
         ppl_toy_base=float(tb), ppl_llama_base=float(lb),
         ppl_toy_lora=float(tl), ppl_llama_lora=float(ll))
r["ppl_rel_diff_base"] = abs(r["ppl_toy_base"] / r["ppl_llama_base"] - 1)
r["ppl_rel_diff_lora"] = abs(r["ppl_toy_lora"] / r["ppl_llama_lora"] - 1)
json.dump(r, open(out, "w"), indent=1)
print(json.dumps(r, indent=1))
fails = []
if not r["heldout_loss_lora"] < r["heldout_loss_base"]:
    fails.append("the held-out assistant log-likelihood did not rise")
if not r["format_lora"] > r["format_base"] or r["format_lora"] < 9:
    fails.append("toy chat --lora does not answer in the taught format (>= 9 of 12)")
if not r["ppl_rel_diff_lora"] < 0.005:
    fails.append("toy eval ppl --lora and llama-perplexity --lora differ by 0.5% or more")
for f in fails:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
EOF
