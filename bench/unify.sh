#!/usr/bin/env bash
# Speed before and after a refactor: two toy binaries (BASE, NEW) run the same benchmarks in
# alternation, REPS rounds, and the summary gives each side's median and NEW/BASE:
#   SmolLM2-135M Q4_1 pp512 and tg128 (`toy bench`), `toy bench --train` on recipes/tiny,
#   small and hybrid-small (f32), and a LoRA step (`toy finetune recipes/sft-smollm2-lora.toml`,
#   the median tok/s of steps 2..N from events.jsonl); with CODER=1 also Qwen2.5-Coder-1.5B
#   tg128 (scripts/fetch-coder.sh target) and 8-client serving of SmolLM2 (bench/serve-load.py:
#   8 concurrent greedy streams of 64 tokens, the aggregate tok/s, median of 3 rounds).
# Usage: bench/unify.sh BASE_TOY NEW_TOY   (REPS=3, THREADS=2, CASES="pp512 tg128 ..." to pick).
# The summary gives each side's median, their ratio, and the median (range) of the per-round
# ratios; which side runs first flips each round.
# Not part of CI: minutes, and noisy on a shared host (the alternation and medians are for that).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: bench/unify.sh BASE_TOY NEW_TOY}
new=${2:?usage: bench/unify.sh BASE_TOY NEW_TOY}
reps=${REPS:-3}
t=${THREADS:-2}
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$model" ] || bash scripts/fetch-model.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

one() { # side bin case -> prints tok/s
    local bin=$2 case=$3
    case $case in
    pp512) "$bin" bench -t "$t" -m "$model" -p 512 -n 1 -r 2 --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["prefill_tok_s"]["mean"])' ;;
    tg128) "$bin" bench -t "$t" -m "$model" -p 1 -n 128 -r 2 --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tok_s"]["mean"])' ;;
    lora)
        rm -rf "$out/runs"
        "$bin" finetune -t "$t" recipes/sft-smollm2-lora.toml --set train.steps=6 \
            --set eval.interval=1000000 --set checkpoint.interval=1000000 \
            --runs-dir "$out/runs" > "$out/ft.log" 2>&1 || { tail -5 "$out/ft.log" >&2; exit 1; }
        python3 -c 'import json,sys,glob,statistics as s; ev=[json.loads(l) for f in glob.glob(sys.argv[1]+"/*/events.jsonl") for l in open(f)]; v=[e["tok_s"] for e in ev if e.get("type")=="step" and e["step"]>1]; print(s.median(v))' "$out/runs" ;;
    coder-tg128) "$bin" bench -t "$t" -m "$coder" -p 1 -n 128 -r 2 --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tok_s"]["mean"])' ;;
    serve8)
        local port pid
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        "$bin" -t "$t" serve --port "$port" -m "$model" --parallel 8 --runs-dir "$out/serve" \
            >/dev/null 2>"$out/serve.log" &
        pid=$!
        for _ in $(seq 600); do
            curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
            sleep 0.2
        done
        "$PY" bench/serve-load.py --base-url "http://127.0.0.1:$port" --clients 8 --min-ratio 0 \
            >"$out/load.txt" 2>&1 || true
        kill "$pid"; wait "$pid" 2>/dev/null || true
        sed -n 's/^serve-load: .* 8 clients \([0-9.]*\) tok\/s.*/\1/p' "$out/load.txt" ;;
    *) "$bin" bench -t "$t" --train "recipes/$case.toml" --steps 12 --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["rate"])' ;;
    esac
}

coder=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
read -r -a cases <<<"${CASES:-pp512 tg128 tiny small hybrid-small lora}"
if [ "${CODER:-0}" = 1 ]; then
    [ -f "$coder" ] || bash scripts/fetch-coder.sh target
    PY=$(bash scripts/serve-pyenv.sh)
    cases+=(coder-tg128 serve8)
fi
for r in $(seq "$reps"); do
    for c in "${cases[@]}"; do
        # which side runs first flips each round: the second run of a pair ran slower on
        # this host (turbo, heat), which a fixed order charges to one side
        order="base new"; [ $((r % 2)) = 0 ] && order="new base"
        for side in $order; do
            bin=$base; [ $side = new ] && bin=$new
            v=$(one $side "$bin" "$c")
            echo "$c $side $v" | tee -a "$out/all.txt" >&2
        done
    done
done
python3 - "$out/all.txt" <<'PY'
import sys, statistics as s
rows = [l.split() for l in open(sys.argv[1])]
print(f"{'case':14} {'base':>10} {'new':>10} {'new/base':>9}  per-round new/base")
for c in dict.fromkeys(r[0] for r in rows):
    b = s.median(float(r[2]) for r in rows if r[0] == c and r[1] == "base")
    n = s.median(float(r[2]) for r in rows if r[0] == c and r[1] == "new")
    pairs = [float(n[2]) / float(b[2]) for b, n in zip(
        [r for r in rows if r[0] == c and r[1] == "base"],
        [r for r in rows if r[0] == c and r[1] == "new"])]
    print(f"{c:14} {b:10.1f} {n:10.1f} {n / b:9.3f}  pairs {s.median(pairs):.3f} "
          f"({min(pairs):.2f}-{max(pairs):.2f})")
PY
