#!/usr/bin/env bash
# `toy eval kld` against llama.cpp's `llama-perplexity` (0c1e570), both ways, on SmolLM2:
#
#  1. llama-perplexity --kl-divergence-base on the F32 model (dequantized from the Q4_1 file
#     by `toy quantize`) writes a base; `toy eval kld --base` reads it: toy's F32 inference
#     against llama.cpp's gives mean KLD < 1e-4 and same top p > 99.5%.
#  2. `toy eval kld --save-base` writes a base from the same F32 model; llama-perplexity
#     --kl-divergence reads it with a Q4_0 copy (`toy quantize`), and toy scores the same Q4_0
#     file against the same base: PPL(base) (read from the file) agrees to 1e-5 and mean KLD
#     within 2%. Q4_0 is used because its weight rounding dominates the KLD; on Q4_1 (whose
#     F32 copy holds the same weights) what is left is activation rounding, which the two
#     engines draw differently (see docs/evaluation.md and docs/benchmarks.md, "Fidelity").
#
# Usage: LLAMA_BIN=path/to/llama.cpp/build/bin scripts/kld-llama-cpp.sh [TEXT]
#   TEXT defaults to ../shared/golden/gpl-3.txt; LLAMA_BIN holds llama-perplexity (a build of
#   bench/compare-llama-cpp.sh's tree: `cmake --build DIR --target llama-perplexity`).
# Environment: CTX (256), THREADS (2), OUT (target/kld-llama-cpp), CHUNKS (all), TOY (a built
# toy binary to use instead of building with scripts/build.sh).
# Not part of CI (it needs a llama.cpp build); exits 1 when a check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${LLAMA_BIN:?set LLAMA_BIN to the folder holding llama-perplexity}
text=${1:-../shared/golden/gpl-3.txt}
ctx=${CTX:-256}
threads=${THREADS:-2}
out=${OUT:-target/kld-llama-cpp}
chunks=()
[ -n "${CHUNKS:-}" ] && chunks=(--chunks "$CHUNKS")
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$out"
[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ] || bash scripts/fetch-model.sh
if [ -z "${TOY:-}" ]; then
  bash scripts/build.sh
  TOY=${CARGO_TARGET_DIR:-target}/release/toy
fi
toy() { "$TOY" -t "$threads" "$@"; }
perplexity() { "$bin/llama-perplexity" -t "$threads" -c "$ctx" "${chunks[@]}" "$@"; }

f32=$out/smollm2-f32.gguf q40=$out/smollm2-q4_0.gguf
[ -f "$f32" ] || toy quantize models/SmolLM2-135M-Instruct.Q4_1.gguf "$f32" --type F32
[ -f "$q40" ] || toy quantize "$f32" "$q40" --type Q4_0

echo "1. llama-perplexity writes the base, toy reads it" >&2
perplexity -m "$f32" -f "$text" --kl-divergence-base "$out/llama.base" >"$out/llama-base.log" 2>&1
toy eval kld -m "$f32" --base "$out/llama.base" -f "$text" --json >"$out/toy-reads-llama.json"

echo "2. toy writes the base, llama-perplexity reads it" >&2
toy eval kld -m "$f32" -f "$text" --ctx "$ctx" "${chunks[@]}" --save-base "$out/toy.base" >&2
perplexity -m "$q40" --kl-divergence-base "$out/toy.base" --kl-divergence >"$out/llama-reads-toy.log" 2>&1
toy eval kld -m "$q40" --base "$out/toy.base" --json >"$out/toy-q4_0.json"

python3 - "$out" <<'EOF'
import json, re, sys
out = sys.argv[1]
log = open(f"{out}/llama-reads-toy.log").read()
def llama(name):
    m = re.search(re.escape(name) + r"\s*:\s*([-\d.]+)", log)
    if not m:
        sys.exit(f"no '{name}' in {out}/llama-reads-toy.log")
    return float(m.group(1))
a = json.load(open(f"{out}/toy-reads-llama.json"))
q = json.load(open(f"{out}/toy-q4_0.json"))
rows = [
    ("toy F32 vs llama.cpp's F32 base: mean KLD", a["kld_mean"]["value"], None),
    ("toy F32 vs llama.cpp's F32 base: same top p %", 100 * a["same_top_p"]["value"], None),
    ("Q4_0 vs toy's F32 base: PPL(base)", q["ppl_base"]["value"], llama("Mean PPL(base)")),
    ("Q4_0 vs toy's F32 base: mean KLD", q["kld_mean"]["value"], llama("Mean    KLD")),
    ("Q4_0 vs toy's F32 base: same top p %", 100 * q["same_top_p"]["value"], llama("Same top p")),
    ("Q4_0 vs toy's F32 base: PPL(Q)/PPL(base)", q["ppl_ratio"]["value"], llama("Mean PPL(Q)/PPL(base)")),
]
for name, t, l in rows:
    print(f"{name:48s} toy {t:.6f}" + ("" if l is None else f"  llama.cpp {l:.6f}"))
fails = []
if not a["kld_mean"]["value"] < 1e-4 or not a["same_top_p"]["value"] > 0.995:
    fails.append("toy's F32 does not match llama.cpp's F32 base")
if abs(q["ppl_base"]["value"] / llama("Mean PPL(base)") - 1) > 1e-5:
    fails.append("PPL(base) read from toy's base differs")
if abs(q["kld_mean"]["value"] / llama("Mean    KLD") - 1) > 0.02:
    fails.append("mean KLD differs by more than 2%")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
EOF
