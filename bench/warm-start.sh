#!/usr/bin/env bash
# Warm start against from-scratch on the same data: trains a donor of half recipes/tiny.toml's
# width (d_model 32, 2 heads of the same size 16, d_ff 64) for DONOR_STEPS, then the tiny
# model twice for STEPS with the same seed and batches: from a fresh init, and with
# `--init-from` the donor (a 2x HyperCloning widening, function-preserving at init). Prints
# both validation-loss curves and the training loss every 50 steps side by side. Short by
# default (about a minute a run on 2 cores). Not part of CI.
#
# Usage: bench/warm-start.sh        Environment: STEPS (600), DONOR_STEPS (600), EVAL (100)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-600}
donor_steps=${DONOR_STEPS:-600}
eval=${EVAL:-100}
work=target/warm-start
rm -rf "$work" && mkdir -p "$work"
cargo build --release --quiet --bin toy
toy=${TOY:-target/release/toy}
common=(--runs-dir "$work/runs" --set eval.interval="$eval" --set checkpoint.interval=100000)
train() { # name, extra args...: prints the run folder
  local name=$1; shift
  "$toy" train recipes/tiny.toml "${common[@]}" --set name="$name" "$@" 2>/dev/null |
    head -n 1 | sed 's/ after .*//'
}
echo "donor: d_model 32, $donor_steps steps ..." >&2
donor_run=$(train donor --set train.steps="$donor_steps" --set model.d_model=32 \
  --set model.n_head=2 --set model.n_kv_head=2 --set model.d_ff=64)
donor=$(ls "$donor_run"/ckpt-*.gguf | tail -n 1)
echo "scratch: d_model 64, $steps steps ..." >&2
scratch_run=$(train scratch --set train.steps="$steps")
echo "warm: d_model 64 from $donor, $steps steps ..." >&2
warm_run=$(train warm --set train.steps="$steps" --init-from "$donor")
python3 - "$scratch_run/events.jsonl" "$warm_run/events.jsonl" "$donor_run/events.jsonl" <<'PY'
import json, sys
def load(p):
    ev = [json.loads(l) for l in open(p)]
    return ({e["step"]: e["loss"] for e in ev if e["type"] == "step"},
            {e["step"]: e["val_loss"] for e in ev if e["type"] == "eval"},
            next(e for e in ev if e["type"] == "run_start"))
(s_tr, s_val, _), (w_tr, w_val, w_start), (_, d_val, _) = map(load, sys.argv[1:4])
print("init_from:", w_start["config"].get("init_from", {}).get("plan"))
print("donor final val loss: %.4f" % d_val[max(d_val)])
print("%6s  %12s  %12s" % ("step", "scratch val", "warm val"))
for k in sorted(s_val):
    print("%6d  %12.4f  %12.4f" % (k, s_val[k], w_val.get(k, float("nan"))))
print("%6s  %12s  %12s" % ("step", "scratch loss", "warm loss"))
for k in sorted(s_tr):
    if k == 1 or k % 50 == 0:
        print("%6d  %12.4f  %12.4f" % (k, s_tr[k], w_tr.get(k, float("nan"))))
PY
