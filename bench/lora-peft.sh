#!/usr/bin/env bash
# LoRA fine-tuning of SmolLM2-135M-Instruct: toy on the Q4_1 base against PyTorch + peft on the
# same model in f32, one run each, side by side: tokens/s, peak RSS, and the losses after the
# same steps from the same start on the same batches.
#
# Usage: bench/lora-peft.sh [STEPS]          (default 20; also STEPS=...)
#
# 1. `toy quantize --type F32` writes the dequantized base (target/lora-bench/base-f32.gguf,
#    cached) that PyTorch loads into transformers' LlamaForCausalLM (attn_q / attn_k rows
#    un-permuted from llama.cpp's RoPE layout).
# 2. `toy finetune recipes/sft-smollm2-lora.toml --set train.steps=STEPS` (no evaluation or
#    checkpoint before the end) with --checkpoint-start (the initial adapter, ckpt-000000) and
#    --dump-batches (every batch as toy cut it), under /usr/bin/time -v.
# 3. Checks the conversion: HF log-probs against `toy score` on the F32 base over the first
#    row of batch 1, and HF's loss on batch 1 against toy's step-1 loss in a one-step toy run
#    on the F32 base (toy's f32 training path).
# 4. bench/pytorch/lora_peft.py train: peft LoRA (r, alpha, all seven linear parts, dropout 0)
#    from toy's initial A and B, toy's batches, AdamW / clipping / warm-up + cosine as toy's
#    run config says, f32, under /usr/bin/time -v; only the steps are timed.
# 5. Prints the table, writes target/lora-bench/results.json.
#
# tokens/s = positions run (sum of b*t over the steps, t being the batch's cut length) / summed
# step time (toy: each step's b*t / its events.jsonl tok_s; PyTorch: forward, backward, clip
# and optimizer step). Peak RSS is the process's "Maximum resident set size" (loading, the
# final evaluation and checkpoint included for toy; loading included for PyTorch).
#
# Environment: STEPS (20), THREADS (2), VENV (target/qwen35-venv), LOGIT_TOL (2e-2: max
# |log-prob diff| HF vs toy score on the F32 base, which rounds K/V to f16 as llama.cpp's cache
# and, under 64 tokens, queries too), LOSS1_TOL (1e-3: relative step-1 loss diff on the F32
# base), STRICT (0; 1 exits 1 when a target of the issue is missed: toy >= 2x the tokens/s,
# <= 1/2 the peak RSS, last-step losses within 2%), OMP_WAIT_POLICY (passive for PyTorch).
# Not part of CI; the machine should be quiet for the numbers to mean much.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

STEPS=${1:-${STEPS:-20}}
THREADS=${THREADS:-2}
VENV=${VENV:-$root/target/qwen35-venv}
LOGIT_TOL=${LOGIT_TOL:-2e-2}
LOSS1_TOL=${LOSS1_TOL:-1e-3}
STRICT=${STRICT:-0}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

recipe=recipes/sft-smollm2-lora.toml
base_q=models/SmolLM2-135M-Instruct.Q4_1.gguf
work=$root/target/lora-bench
base32=$work/base-f32.gguf
toy=$root/target/release/toy
py=$VENV/bin/python
script=$root/bench/pytorch/lora_peft.py

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

case "$STEPS" in '' | *[!0-9]* | 0) die "STEPS must be a positive integer, got '$STEPS'" ;; esac
[ -f "$recipe" ] || die "no $recipe"
[ -f "$base_q" ] || die "no base model $base_q"
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"
command -v python3 > /dev/null || die "python3 is missing"
mkdir -p "$work/logs"

# --- toy -------------------------------------------------------------------------------
if [ ! -x "$toy" ] || ! "$toy" finetune --help 2>/dev/null | grep -q -- --dump-batches; then
    log "building target/release/toy (it lacks finetune --dump-batches)"
    cargo build --release -q --bin toy || die "cargo build --release --bin toy failed"
fi

# --- PyTorch + peft ---------------------------------------------------------------------
[ -x "$py" ] || die "no venv at $VENV (VENV=... for another; it needs torch and transformers)"
if ! "$py" -c "import torch, transformers" 2> /dev/null; then
    die "$py cannot import torch and transformers"
fi
if ! "$py" -c "import peft, gguf" 2> /dev/null; then
    log "installing peft 0.21.2 and gguf into $VENV (--no-deps, then what import needs)"
    "$py" -m pip install -q --no-deps peft==0.21.2 gguf accelerate psutil ||
        die "pip install peft gguf failed (see /work/.library/env/ for the package index)"
    "$py" -c "import peft, gguf" || die "peft or gguf still does not import"
fi
versions=$("$py" -c "import torch, transformers, peft; print(f'torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}')")
log "PyTorch side: $versions"

# /usr/bin/time -v LOG -> peak RSS in MiB
peak_mib() { awk -F': ' '/Maximum resident set size/ { printf "%.1f", $2 / 1024 }' "$1"; }

# --- 1. the f32 base --------------------------------------------------------------------
if [ ! -s "$base32" ] || [ "$base_q" -nt "$base32" ]; then
    log "dequantizing $base_q to $base32"
    "$toy" -t "$THREADS" quantize "$base_q" "$base32" --type F32 > "$work/logs/quantize.log" 2>&1 ||
        die "toy quantize failed: $(tail -3 "$work/logs/quantize.log")"
fi

# --- 2. toy ------------------------------------------------------------------------------
runs=$work/runs
batches=$work/batches.jsonl
rm -rf "$runs" "$batches"
log "toy finetune: $STEPS steps of $recipe at $THREADS threads"
/usr/bin/time -v -o "$work/logs/toy.time" \
    "$toy" finetune -t "$THREADS" "$recipe" \
    --set train.steps="$STEPS" --set eval.interval=1000000 --set checkpoint.interval=1000000 \
    --checkpoint-start --dump-batches "$batches" --runs-dir "$runs" \
    > "$work/logs/toy.log" 2>&1 || die "toy finetune failed: $(tail -5 "$work/logs/toy.log")"
run_dir=$(find "$runs" -mindepth 1 -maxdepth 1 -type d | head -1)
[ -n "$run_dir" ] || die "toy finetune left no run folder in $runs"
adapter=$run_dir/ckpt-000000.gguf
[ -f "$adapter" ] || die "no initial adapter $adapter (--checkpoint-start)"
[ "$(wc -l < "$batches")" -eq "$STEPS" ] ||
    die "$batches has $(wc -l < "$batches") batches, expected $STEPS (grad_accum must be 1)"
log "toy run: $run_dir, peak RSS $(peak_mib "$work/logs/toy.time") MiB"

# --- 3. conversion checks ---------------------------------------------------------------
runs32=$work/runs-f32
batches32=$work/batches-f32.jsonl
rm -rf "$runs32" "$batches32"
log "toy finetune on the F32 base, 1 step (the reference step-1 loss of the f32 training path)"
"$toy" finetune -t "$THREADS" "$recipe" --set base.model="$base32" --set train.steps=1 \
    --dump-batches "$batches32" --runs-dir "$runs32" > "$work/logs/toy-f32.log" 2>&1 ||
    die "toy finetune on the F32 base failed: $(tail -5 "$work/logs/toy-f32.log")"
loss32=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("type") == "step" and e["step"] == 1:
        print(e["loss"]); break
else:
    sys.exit("no step 1 in " + sys.argv[1])
' "$(find "$runs32" -mindepth 2 -maxdepth 2 -name events.jsonl | head -1)")
cmp -s <(head -1 "$batches32") <(head -1 "$batches") ||
    log "warning: batch 1 of the F32 run differs from the Q4_1 run's"
ids=$(python3 -c '
import json, sys
b = json.loads(open(sys.argv[1]).readline())
t = b["t"]
print(",".join(map(str, b["inputs"][:min(t, 128)])))
' "$batches")
log "logit check: HF vs toy score over $(($(tr -cd , <<< "$ids" | wc -c))) positions of batch 1, row 0"
"$py" "$script" check --threads "$THREADS" --base "$base32" --toy "$toy" --ids "$ids" \
    --model-q "$base_q" --batches "$batches32" --toy-loss "$loss32" \
    > "$work/check.json" 2> "$work/logs/check.log" ||
    die "logit check failed: $(grep -v -i warn "$work/logs/check.log" | tail -5)"
grep '^\[lora_peft\]' "$work/logs/check.log" >&2 || true
python3 - "$work/check.json" "$LOGIT_TOL" "$LOSS1_TOL" << 'EOF' || die "the HF model does not match toy (see above); not benchmarking"
import json, sys
c = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
tol, ltol = float(sys.argv[2]), float(sys.argv[3])
bad = []
if c["max_abs_diff_f16kv"] > tol:
    bad.append(f"log-prob diff {c['max_abs_diff_f16kv']:.3g} > LOGIT_TOL {tol}")
if c["loss_rel_diff_batch1"] > ltol:
    bad.append(f"step-1 loss relative diff {c['loss_rel_diff_batch1']:.3g} > LOSS1_TOL {ltol}")
if bad:
    sys.exit("; ".join(bad))
EOF

# --- 4. PyTorch + peft -------------------------------------------------------------------
log "PyTorch + peft: the same $STEPS batches, f32, $THREADS threads (OMP_WAIT_POLICY=$OMP_WAIT_POLICY)"
/usr/bin/time -v -o "$work/logs/torch.time" \
    "$py" "$script" train --threads "$THREADS" --base "$base32" --adapter "$adapter" \
    --batches "$batches" --config "$run_dir/config.toml" --out "$work/torch.json" \
    > "$work/logs/torch.log" 2>&1 ||
    die "PyTorch run failed: $(grep -v -i warn "$work/logs/torch.log" | tail -5)"
log "PyTorch: peak RSS $(peak_mib "$work/logs/torch.time") MiB"

# --- 5. table ----------------------------------------------------------------------------
python3 - "$work" "$run_dir" "$(peak_mib "$work/logs/toy.time")" "$(peak_mib "$work/logs/torch.time")" \
    "$THREADS" "$versions" "$STRICT" << 'EOF'
import json, os, sys
work, run_dir, toy_rss, torch_rss, threads, versions, strict = sys.argv[1:]
toy_rss, torch_rss = float(toy_rss), float(torch_rss)
tok = [b["b"] * b["t"] for b in map(json.loads, open(os.path.join(work, "batches.jsonl")))]
ev = [json.loads(l) for l in open(os.path.join(run_dir, "events.jsonl"))]
st = [e for e in ev if e.get("type") == "step"]
if len(st) != len(tok):
    sys.exit(f"toy: {len(st)} step events for {len(tok)} batches")
toy_steps = [{"step": e["step"], "loss": e["loss"], "lr": e["lr"], "grad_norm": e["grad_norm"],
              "tokens": n, "secs": n / e["tok_s"]} for e, n in zip(st, tok)]
th = json.load(open(os.path.join(work, "torch.json")))
chk = json.loads(open(os.path.join(work, "check.json")).read().strip().splitlines()[-1])
ts = th["steps"]
n = len(ts)

def rate(steps, skip=0):
    s = steps[skip:]
    return sum(x["tokens"] for x in s) / sum(x["secs"] for x in s) if s else float("nan")

toy_r, torch_r = rate(toy_steps), rate(ts)
toy_r2, torch_r2 = rate(toy_steps, 1), rate(ts, 1)
rel = lambda a, b: abs(a - b) / abs(b)
rels = [rel(a["loss"], b["loss"]) for a, b in zip(toy_steps, ts)]
rows = [("tokens/s (all steps)", f"{toy_r:.1f}", f"{torch_r:.1f}", f"{toy_r / torch_r:.2f}x"),
        ("tokens/s (steps 2..N)", f"{toy_r2:.1f}", f"{torch_r2:.1f}", f"{toy_r2 / torch_r2:.2f}x"),
        ("step time total, s", f"{sum(x['secs'] for x in toy_steps):.1f}", f"{sum(x['secs'] for x in ts):.1f}", ""),
        ("peak RSS, MiB", f"{toy_rss:.0f}", f"{torch_rss:.0f}", f"{torch_rss / toy_rss:.2f}x (torch/toy)")]
show = list(range(min(5, n)))
if n - 1 not in show:
    show.append(n - 1)
for i in show:
    rows.append((f"loss step {i + 1} ({tok[i]} pos)", f"{toy_steps[i]['loss']:.4f}", f"{ts[i]['loss']:.4f}",
                 f"{100 * rels[i]:.2f}% diff"))
w = [max(len(r[k]) for r in rows + [("", "toy (Q4_1)", "torch+peft (f32)", "ratio")]) for k in range(4)]
line = lambda r: "  ".join(c.ljust(w[k]) if k == 0 else c.rjust(w[k]) for k, c in enumerate(r))
print()
b0 = json.loads(open(os.path.join(work, "batches.jsonl")).readline())["b"]
print(f"LoRA on SmolLM2-135M-Instruct ({th['trainable_params']} trainable), batch {b0}, {threads} threads, "
      f"{n} steps; {versions}")
print(line(("", "toy (Q4_1)", "torch+peft (f32)", "ratio")))
for r in rows:
    print(line(r))
speed, mem, last = toy_r / torch_r, toy_rss / torch_rss, rels[-1]
targets = {"speed_2x": speed >= 2.0, "memory_half": mem <= 0.5, "loss_2pct": last <= 0.02}
print(f"relative loss difference at the last step: {100 * last:.2f}% (max over steps {100 * max(rels):.2f}%)")
print(f"conversion check: max |log-prob diff| vs toy score on the F32 base {chk['max_abs_diff_f16kv']:.2e} "
      f"(f16 K/V emulated; plain f32 {chk['max_abs_diff_f32']:.2e}), step-1 loss on the F32 base "
      f"rel diff {chk['loss_rel_diff_batch1']:.2e}")
print("issue targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in targets.items()))
res = {"steps": n, "threads": int(threads), "versions": versions,
       "toy": {"tok_s": toy_r, "tok_s_after_first": toy_r2, "peak_rss_mib": toy_rss, "steps": toy_steps,
               "run": run_dir},
       "torch": {"tok_s": torch_r, "tok_s_after_first": torch_r2, "peak_rss_mib": torch_rss, "steps": ts,
                 "load_s": th["load_s"], "trainable_params": th["trainable_params"]},
       "speed_ratio_toy_over_torch": speed, "memory_ratio_torch_over_toy": torch_rss / toy_rss,
       "loss_rel_diff": rels, "loss_rel_diff_last": last, "check": chk, "targets": targets}
with open(os.path.join(work, "results.json"), "w") as f:
    json.dump(res, f, indent=1)
print(f"wrote {os.path.join(work, 'results.json')}")
if strict == "1" and not all(targets.values()):
    sys.exit(1)
EOF
