#!/usr/bin/env bash
# A full fine-tune of SmolLM2-135M-Instruct (F32, dequantized by `toy quantize`) in toy against
# llama.cpp's `llama-finetune` (0c1e570, examples/training/finetune.cpp), one run each on the
# same text at ctx 256 with one 256-token sequence a step, 2 threads: tokens/s, peak RSS, and
# the loss of every step from the same start on the same tokens.
#
# Like for like: llama-finetune tokenizes the file (no BOS for SmolLM2), cuts every window of
# ctx + 1 tokens at a stride of ctx / 2 (common_opt_dataset_init), trains on the first 95% of
# them in order (the rest is its validation) with AdamW (beta2 0.999, eps 1e-8, no weight decay,
# no clipping, lr 1e-5 constant: its defaults). toy gets the same windows as `{"tokens"}`
# records, in file order (`data.shuffle = false`), with the same optimizer settings, and trains
# every parameter as llama-finetune does. llama-finetune's bar prints the running mean of the
# epoch's losses (5 decimals); step k's loss is k * mean_k - (k - 1) * mean_(k-1).
# toy runs once per precision in PRECISIONS (default "f32 bf16"). PyTorch (transformers'
# LlamaForCausalLM from the same F32 GGUF, bench/pytorch/full_ft_torch.py) runs the same steps
# as a third reference when $VENV (default target/qwen35-venv, as bench/lora-peft.sh) has
# torch, transformers and gguf; TORCH=0 leaves it out. Not part of CI.
#
# Usage: LLAMA_BIN=path/to/llama.cpp/build/bin bench/full-ft-llama.sh [TEXT]
#   (default TEXT: ../shared/golden/gpl-3.txt; LLAMA_BIN holds llama-finetune, e.g. a build of
#   bench/compare-llama-cpp.sh's tree with `cmake --build DIR --target llama-finetune`)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
text=${1:-../shared/golden/gpl-3.txt}
bin=${LLAMA_BIN:?set LLAMA_BIN to the folder holding llama-finetune}
work=target/full-ft-bench
ctx=256
mkdir -p "$work"
bash scripts/fetch-model.sh >/dev/null
cargo build --release --quiet --bin toy
base="$work/smollm2-f32.gguf"
[ -f "$base" ] || target/release/toy quantize models/SmolLM2-135M-Instruct.Q4_1.gguf "$base" --type F32 >/dev/null
echo "llama-finetune ..." >&2
LD_LIBRARY_PATH="$bin" /usr/bin/time -v "$bin/llama-finetune" -m "$base" -f "$text" -c $ctx -b $ctx -ub $ctx \
  -t 2 --epochs 1 -o "$work/llama-out.gguf" >"$work/llama.log" 2>&1
target/release/toy tokenize -m "$base" --json "$(cat "$text")" >"$work/tokens.json"
steps=$(python3 - "$work" $ctx <<'PY'
import json, sys
work, ctx = sys.argv[1], int(sys.argv[2])
ids = json.load(open(f"{work}/tokens.json"))["ids"]
stride = ctx // 2
ndata = (len(ids) - ctx - 1) // stride
split = int(ndata * (1.0 - 0.05))  # llama-finetune's val_split
with open(f"{work}/windows.jsonl", "w") as f:
    for i in range(split):
        f.write(json.dumps({"tokens": ids[i * stride:i * stride + ctx + 1]}) + "\n")
with open(f"{work}/val.jsonl", "w") as f:
    for i in range(split, ndata):
        f.write(json.dumps({"tokens": ids[i * stride:i * stride + ctx + 1]}) + "\n")
print(split)
PY
)
for prec in ${PRECISIONS:-f32 bf16}; do
  echo "toy finetune, full, $prec, $steps steps ..." >&2
  rm -rf "$work/runs-$prec"
  /usr/bin/time -v target/release/toy finetune recipes/sft-smollm2-full.toml \
    --set "base.model=\"$base\"" --set "data.train=\"$work/windows.jsonl\"" --set "data.val=\"$work/val.jsonl\"" \
    --set data.shuffle=false --set train.ctx=$ctx --set train.batch=1 --set train.steps="$steps" \
    --set eval.interval=100000 --set checkpoint.interval=100000 --set optim.lr=1e-5 --set optim.min_lr=1e-5 \
    --set optim.warmup=0 --set optim.beta2=0.999 --set optim.eps=1e-8 --set optim.weight_decay=0.0 \
    --set optim.grad_clip=0.0 --set "train.precision=\"$prec\"" --runs-dir "$work/runs-$prec" >"$work/toy-$prec.log" 2>&1
done
VENV=${VENV:-$root/target/qwen35-venv}
rm -f "$work"/torch-*.json
if [ "${TORCH:-1}" = 1 ]; then
  if "$VENV/bin/python" -c "import torch, transformers, gguf" 2>/dev/null; then
    for prec in ${PRECISIONS:-f32 bf16}; do
      echo "PyTorch, $prec, $steps steps ..." >&2
      flag=; [ "$prec" = bf16 ] && flag=--bf16
      (cd bench/pytorch && /usr/bin/time -v "$VENV/bin/python" full_ft_torch.py --base "$root/$base" \
        --windows "$root/$work/windows.jsonl" --steps "$steps" $flag) >"$work/torch-$prec.json" 2>"$work/torch-$prec.log"
    done
  else
    echo "PyTorch reference left out: $VENV/bin/python cannot import torch, transformers and gguf" >&2
  fi
fi
python3 - "$work" "$steps" $ctx ${PRECISIONS:-f32 bf16} <<'PY'
import glob, json, os, re, sys
work, steps, ctx, precs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def rss(log):
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(log).read()).group(1)) / 1024
ll = open(f"{work}/llama.log").read()
bar = re.findall(r"train: .*?data=0*(\d+)/\d+ loss=([0-9.]+)±\S+ acc=\S+ t=(\d+):(\d+):(\d+)", ll)
mean = {int(k): float(m) for k, m, *_ in bar}
assert sorted(mean) == list(range(1, steps + 1)), f"llama-finetune's bar has steps {sorted(mean)[:5]}..., expected 1..{steps}"
llama = [k * mean[k] - (k - 1) * mean.get(k - 1, 0.0) for k in range(1, steps + 1)]
h, m, s = map(int, bar[-1][2:])
llama_tok_s = steps * ctx / (3600 * h + 60 * m + s)
runs = {}
for p in precs:
    ev = [json.loads(l) for l in open(glob.glob(f"{work}/runs-{p}/*/events.jsonl")[0])]
    runs[p] = [e for e in ev if e["type"] == "step"]
    assert len(runs[p]) == steps, f"toy {p} ran {len(runs[p])} steps, expected {steps}"
for p in precs:
    if os.path.exists(f"{work}/torch-{p}.json"):
        t = json.load(open(f"{work}/torch-{p}.json"))
        runs[f"torch-{p}"] = [{"loss": l, "tok_s": t["tok_s"]} for l in t["loss"]]
last10 = lambda l: sum(l[-10:]) / 10
print(f"{steps} steps of {ctx} tokens, the same windows in the same order\n")
print("| | tokens/s | ratio to llama-finetune | peak RSS MiB | step-1 loss | last-10 loss | mean loss | max step loss diff | last-10 diff |")
print("|---|---|---|---|---|---|---|---|---|")
print(f"| llama-finetune (F32) | {llama_tok_s:.1f} | 1.00x | {rss(f'{work}/llama.log'):.0f} | {llama[0]:.4f} | {last10(llama):.4f} | {sum(llama) / steps:.4f} | | |")
for p, st in runs.items():
    tok_s = len(st) * ctx / sum(ctx / e["tok_s"] for e in st)
    loss = [e["loss"] for e in st]
    diff = max(abs(a / b - 1) for a, b in zip(loss, llama))
    d10 = last10(loss) / last10(llama) - 1
    torch = p.startswith("torch-")
    name = f"PyTorch {p[6:]}{' autocast' if p == 'torch-bf16' else ''}" if torch else f"toy finetune full, {p}"
    log = f"{work}/{p}.log" if torch else f"{work}/toy-{p}.log"
    print(f"| {name} | {tok_s:.1f} | {tok_s / llama_tok_s:.2f}x | {rss(log):.0f} "
          f"| {loss[0]:.4f} | {last10(loss):.4f} | {sum(loss) / steps:.4f} | {100 * diff:.2f}% | {100 * d10:+.2f}% |")
with open(f"{work}/losses.tsv", "w") as f:
    f.write("step\tllama-finetune\t" + "\t".join(p if p.startswith("torch-") else f"toy-{p}" for p in runs) + "\n")
    for k in range(steps):
        f.write(f"{k + 1}\t{llama[k]:.5f}\t" + "\t".join(f"{runs[p][k]['loss']:.5f}" for p in runs) + "\n")
print()
for p in precs:
    if f"torch-{p}" in runs:
        rel = max(abs(a["loss"] / b["loss"] - 1) for a, b in zip(runs[p], runs[f"torch-{p}"]))
        print(f"toy {p} against PyTorch {p}, step by step: max relative loss difference {rel:.2e}")
print(f"per-step losses: {work}/losses.tsv")
PY
