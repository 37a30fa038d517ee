#!/usr/bin/env bash
# The hybrid against the all-attention model of the same size, side by side in one run:
# writes a random Qwen3.5-style hybrid the size of SmolLM2-135M (30 layers, width 576, 3 GDN
# layers : 1 gated attention layer, `cargo run --example hybrid_model`), quantizes it with
# `toy quantize` (Q4_1 by default), and runs `toy bench` pp512 / tg128 at depth 0 and 4096 on
# it and on SmolLM2-135M-Instruct of the same type. Prints a table of tok/s, each model's
# slowdown at depth, and the per-sequence state at ctx 4096 (`toy inspect`). Not part of CI.
#
# With LLAMA_BENCH=path/to/llama-bench (llama.cpp 0c1e570, e.g. the GCC build of
# bench/compare-llama-cpp.sh under target/llama-cpp/build-gcc/bin/), llama.cpp's pp512 / tg128
# at the same depths on the same files go beside toy's.
#
# Usage: bench/hybrid-depth.sh [TYPE]        Environment: THREADS (2), REPS (3), DEPTH (4096)
set -euo pipefail
cd "$(dirname "$0")/.."
ty=${1:-Q4_1}
threads=${THREADS:-2}
reps=${REPS:-3}
depth=${DEPTH:-4096}
work=target/hybrid-bench
mkdir -p "$work"
bash scripts/fetch-model.sh >/dev/null
cargo build --release --quiet --bin toy
cargo build --release --quiet -p toy --example hybrid_model
smol=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$work/hybrid-135m.f32.gguf" ]; then
  target/release/examples/hybrid_model "$smol" "$work/hybrid-135m.f32.gguf"
fi
for m in hybrid-135m smollm2-135m; do
  src="$work/hybrid-135m.f32.gguf"
  [ "$m" = smollm2-135m ] && src="$smol"
  [ -f "$work/$m.$ty.gguf" ] || target/release/toy quantize "$src" "$work/$m.$ty.gguf" --type "$ty" >/dev/null
done
results="$work/results-$ty.jsonl"
: >"$results"
# toy and llama.cpp alternate on each (model, depth), so drift on a shared machine falls on
# both sides of a ratio alike
for m in hybrid-135m smollm2-135m; do
  for d in 0 "$depth"; do
    printf '%s d=%s ... ' "$m" "$d" >&2
    target/release/toy -t "$threads" bench -m "$work/$m.$ty.gguf" -p 512 -n 128 -r "$reps" -d "$d" --json |
      python3 -c 'import json,sys; v=json.load(sys.stdin); v["name"]=sys.argv[1]; print(json.dumps(v))' "$m" >>"$results"
    if [ -n "${LLAMA_BENCH:-}" ]; then
      printf 'llama-bench ... ' >&2
      "$LLAMA_BENCH" -m "$work/$m.$ty.gguf" -p 512 -n 128 -t "$threads" -r "$reps" -d "$d" -o jsonl 2>/dev/null |
        python3 -c '
import json, sys
for l in sys.stdin:
    v = json.loads(l)
    kind = "prefill_tok_s" if v["n_prompt"] else "decode_tok_s"
    print(json.dumps({"name": "llama.cpp " + sys.argv[1], "depth": v["n_depth"], kind: {"mean": v["avg_ts"]}}))
' "$m" >>"$results"
    fi
    echo done >&2
  done
  target/release/toy inspect "$work/$m.$ty.gguf" | tail -n 1 | sed "s/^/$m: /"
done
python3 - "$results" "$depth" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
depth = int(sys.argv[2])
by = {}
for r in rows:
    by.setdefault((r["name"], r["depth"]), {}).update(r)
print(f"| model | pp512 | tg128 | pp512 @ d{depth} | tg128 @ d{depth} | tg slowdown at depth |")
print("|---|---|---|---|---|---|")
names = [n for n in ["hybrid-135m", "smollm2-135m", "llama.cpp hybrid-135m", "llama.cpp smollm2-135m"]
         if (n, 0) in by and (n, depth) in by]
for name in names:
    a, b = by[(name, 0)], by[(name, depth)]
    pp0, tg0 = a["prefill_tok_s"]["mean"], a["decode_tok_s"]["mean"]
    ppd, tgd = b["prefill_tok_s"]["mean"], b["decode_tok_s"]["mean"]
    print(f"| {name} | {pp0:.0f} | {tg0:.0f} | {ppd:.0f} | {tgd:.0f} | {tg0 / tgd:.2f}x |")
PY
