#!/usr/bin/env bash
# Decode speed on a busy machine: tg128 of `toy bench` (and of llama-bench, when
# bench/compare-llama-cpp.sh has built it) alone, then beside a process that keeps one core
# busy. Prints each slowdown (quiet / busy). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
threads=${THREADS:-2}
cargo build --release --quiet --bin toy
toy_tg() { target/release/toy -t "$threads" bench -m "$model" -p 0 -n 128 -r 3 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tok_s"]["mean"])'; }
llama_tg() { "$1" -m "$model" -p 0 -n 128 -t "$threads" -r 3 -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'; }
busy_start() { python3 -c 'while True: pass' & busy=$!; sleep 1; }
busy_stop() { kill "$busy"; wait "$busy" 2>/dev/null || true; }
report() { python3 -c "import sys; q,b=float(sys.argv[2]),float(sys.argv[3]); print(f'{sys.argv[1]:<16} quiet {q:7.1f} tok/s  busy {b:7.1f} tok/s  slowdown {q/b:4.2f}x')" "$@"; }

q=$(toy_tg); busy_start; b=$(toy_tg); busy_stop
report toy "$q" "$b"
for build in gcc clang; do
  bin=target/llama-cpp/build-$build/bin/llama-bench
  [ -x "$bin" ] || continue
  q=$(llama_tg "$bin"); busy_start; b=$(llama_tg "$bin"); busy_stop
  report "llama.cpp $build" "$q" "$b"
done
