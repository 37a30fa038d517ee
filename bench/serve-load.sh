#!/usr/bin/env bash
# Load bench of `toy serve` (bench/serve-load.py): builds the release binary, starts the server on a
# free loopback port with --parallel 8 (PARALLEL=n to change; MODEL=path for another model; SERVE_ARGS=...
# adds flags), runs the bench with the given arguments, stops the server. Not part of CI (minutes, and
# noisy on a busy box).
#   bash bench/serve-load.sh                            # 1 vs 8 clients: tok/s ratio, TTFT, equal outputs
#   bash bench/serve-load.sh --soak 1800 --clients 64   # the mixed soak, 30 minutes (or --soak-minutes 30)
# Soak mode (--soak SECONDS or --soak-minutes M) first makes a LoRA adapter (`toy finetune` of
# recipes/sft-smollm2-lora.toml, 2 steps, ~20 s; LORA=FILE uses that adapter instead, LORA=none serves
# none) and starts the server with `--spec ngram --lora ADAPTER:0` (speculation is server-wide; the
# adapter is off by default and the soak's `lora` requests turn it on), then passes --expect-spec
# (and --expect-lora) to the bench.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "serve-load: model $model is missing (scripts/fetch-model.sh)" >&2; exit 2; }
args=()
soak=0
while [ $# -gt 0 ]; do
  case $1 in
    --soak-minutes|--soak-minutes=*)
      if [ "$1" = --soak-minutes ]; then
        [ $# -ge 2 ] || { echo "serve-load: --soak-minutes needs a value" >&2; exit 2; }
        m=$2; shift 2
      else
        m=${1#*=}; shift
      fi
      [[ $m =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "serve-load: --soak-minutes '$m' is not a number" >&2; exit 2; }
      args+=(--soak "$(awk -v m="$m" 'BEGIN { print m * 60 }')")
      soak=1 ;;
    --soak|--soak=*) soak=1; args+=("$1"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
PY=$(bash scripts/serve-pyenv.sh)
[ -n "${TOY:-}" ] || cargo build --release --quiet -p toy-cli   # TOY=path runs that binary instead
runs=$(mktemp -d)
source scripts/serve-lib.sh
trap 'serve_stop; rm -rf "$runs"' EXIT
soak_serve=()
if [ "$soak" = 1 ]; then
  soak_serve=(--spec ngram)
  args+=(--expect-spec)
  adapter=${LORA:-}
  if [ -z "$adapter" ]; then
    echo "serve-load: making a LoRA adapter for the soak (toy finetune, 2 steps)" >&2
    "${TOY:-target/release/toy}" finetune recipes/sft-smollm2-lora.toml --set train.steps=2 --set "base.model=$model" \
      --runs-dir "$runs/lora" >"$runs/finetune.log" 2>&1 || { cat "$runs/finetune.log" >&2; exit 1; }
    adapter=$(ls "$runs"/lora/*/ckpt-*.gguf | sort | tail -n 1)
  fi
  if [ "$adapter" != none ]; then
    soak_serve+=(--lora "$adapter:0")
    args+=(--expect-lora)
  fi
fi
# shellcheck disable=SC2086  # SERVE_ARGS is word-split on purpose
serve_start -m "$model" --parallel "${PARALLEL:-8}" --runs-dir "$runs" ${soak_serve[@]+"${soak_serve[@]}"} ${SERVE_ARGS:-}
status=0
"$PY" bench/serve-load.py --base-url "$serve_url" --pid "$serve_pid" ${args[@]+"${args[@]}"} || status=$?
exit "$status"
