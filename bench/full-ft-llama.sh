#!/usr/bin/env bash
# A full fine-tune of SmolLM2-135M-Instruct (F32, dequantized by `toy quantize`) in toy against
# llama.cpp's `llama-finetune` (0c1e570, examples/training/finetune.cpp), one run each on the
# same text at ctx 256 with one 256-token sequence a step, 2 threads: tokens/s and peak RSS.
# llama-finetune trains on every 256-token window of the file with stride 128 (its dataset,
# 5% held out); toy on `{"text"}` records of the same file (1400-character windows, stride
# 700, truncated to ctx + 1 tokens), the same number of steps, lr 1e-5 constant as
# llama-finetune's default. toy runs once per precision in PRECISIONS (default "f32 bf16").
# Not part of CI.
#
# Usage: LLAMA_BIN=path/to/llama.cpp/build/bin bench/full-ft-llama.sh [TEXT]
#   (default TEXT: ../shared/golden/gpl-3.txt; LLAMA_BIN holds llama-finetune, e.g. a build of
#   bench/compare-llama-cpp.sh's tree with `cmake --build DIR --target llama-finetune`)
set -euo pipefail
cd "$(dirname "$0")/.."
text=${1:-../shared/golden/gpl-3.txt}
bin=${LLAMA_BIN:?set LLAMA_BIN to the folder holding llama-finetune}
work=target/full-ft-bench
mkdir -p "$work"
bash scripts/fetch-model.sh >/dev/null
cargo build --release --quiet --bin toy
base="$work/smollm2-f32.gguf"
[ -f "$base" ] || target/release/toy quantize models/SmolLM2-135M-Instruct.Q4_1.gguf "$base" --type F32 >/dev/null
echo "llama-finetune ..." >&2
LD_LIBRARY_PATH="$bin" /usr/bin/time -v "$bin/llama-finetune" -m "$base" -f "$text" -c 256 -b 256 -ub 256 \
  -t 2 --epochs 1 -o "$work/llama-out.gguf" >"$work/llama.log" 2>&1
python3 - "$text" "$work/text.jsonl" <<'PY'
import json, sys
t = open(sys.argv[1]).read()
with open(sys.argv[2], "w") as f:
    for i in range(0, len(t) - 1400, 700):
        f.write(json.dumps({"text": t[i:i + 1400]}) + "\n")
PY
head -n 4 data/sft/val.jsonl >"$work/val.jsonl"
# the train bar's last update (the validation bar after it counts the held-out windows)
steps=$(grep -o 'train: .*data=[0-9]*/[0-9]*' "$work/llama.log" | tail -n 1 | grep -o '/[0-9]*$' | tr -d / | sed 's/^0*//')
for prec in ${PRECISIONS:-f32 bf16}; do
  echo "toy finetune, full, $prec, $steps steps ..." >&2
  rm -rf "$work/runs-$prec"
  /usr/bin/time -v target/release/toy finetune recipes/sft-smollm2-full.toml \
    --set "base.model=\"$base\"" --set "data.train=\"$work/text.jsonl\"" --set "data.val=\"$work/val.jsonl\"" \
    --set 'data.on_long="truncate"' --set train.ctx=256 --set train.batch=1 --set train.steps="$steps" \
    --set eval.interval=100000 --set checkpoint.interval=100000 --set optim.lr=1e-5 --set optim.min_lr=1e-5 \
    --set optim.warmup=0 --set "train.precision=\"$prec\"" --runs-dir "$work/runs-$prec" >"$work/toy-$prec.log" 2>&1
done
python3 - "$work" "$steps" ${PRECISIONS:-f32 bf16} <<'PY'
import glob, json, re, sys
work, steps, precs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def rss(log):
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(log).read()).group(1)) / 1024
ll = open(f"{work}/llama.log").read()
# the train bar's elapsed time at its last update
h, m, s = map(int, re.findall(r"train: .*?t=(\d+):(\d+):(\d+)", ll)[-1])
llama_tok_s = steps * 256 / (3600 * h + 60 * m + s)
print(f"| | tokens/s | ratio to llama-finetune | peak RSS MiB | last-10 loss |")
print(f"|---|---|---|---|---|")
print(f"| llama-finetune (F32) | {llama_tok_s:.1f} | 1.00x | {rss(f'{work}/llama.log'):.0f} | |")
for p in precs:
    ev = [json.loads(l) for l in open(glob.glob(f"{work}/runs-{p}/*/events.jsonl")[0])]
    st = [e for e in ev if e["type"] == "step"]
    tok_s = len(st) * 256 / sum(256 / e["tok_s"] for e in st)
    loss = sum(e["loss"] for e in st[-10:]) / len(st[-10:])
    print(f"| toy finetune full, {p} | {tok_s:.1f} | {tok_s / llama_tok_s:.2f}x | {rss(f'{work}/toy-{p}.log'):.0f} | {loss:.4f} |")
PY
