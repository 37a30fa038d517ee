#!/usr/bin/env bash
# Coverage-guided fuzzing of toy's parsers (issue 44): cargo-fuzz / libFuzzer on stable Rust
# (`-s none`: coverage instrumentation only, no sanitizer). Usage:
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (default 60 s each, every target in fuzz/Cargo.toml)
# First every committed regression input (fuzz/regressions/TARGET/: inputs that once crashed,
# hung or blew up memory, kept after their fix) runs once through its target; then each target
# fuzzes for SECONDS from its committed seeds (fuzz/seeds/TARGET/) and its working corpus
# (fuzz/corpus/TARGET/, not in git), with a 1 s limit per input and 1 GiB of memory. A finding
# stops that target, is saved under fuzz/artifacts/TARGET/ and fails the script. Prints one line
# per target: executions, coverage (libFuzzer's cov/ft), corpus size, result. Needs the default
# model (the tokenizer, template and request targets use SmolLM2's vocabulary); installs
# cargo-fuzz when it is missing. JOBS (default: cores) targets run at once; RUNS=N stops a
# target after N executions (before SECONDS when it is fast enough).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
bash scripts/fetch-model.sh >/dev/null
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --quiet
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^toy-fuzz$')
  (cd fuzz && cargo fuzz build -s none --release)
else
  (cd fuzz && for t in "${targets[@]}"; do cargo fuzz build -s none --release "$t"; done)
fi
bin=fuzz/target/x86_64-unknown-linux-gnu/release
flags=(-timeout=1 -rss_limit_mb=1024 -max_len=65536 -print_final_stats=1)
fail=0
# the regressions: each once, as a plain run over the files
for t in "${targets[@]}"; do
  if [ -d "fuzz/regressions/$t" ] && [ -n "$(ls -A "fuzz/regressions/$t")" ]; then
    if ! "$bin/$t" "${flags[@]}" fuzz/regressions/"$t"/* > "target/fuzz-$t-regressions.log" 2>&1; then
      echo "$t: a regression input fails again (target/fuzz-$t-regressions.log)"; fail=1
    fi
  fi
done
mkdir -p target
run() {
  local t=$1 log="target/fuzz-$1.log"
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  local rc=0
  local runs=()
  [ -z "${RUNS:-}" ] || runs=(-runs="$RUNS")
  "$bin/$t" "${flags[@]}" "${runs[@]}" -max_total_time="$secs" -artifact_prefix="fuzz/artifacts/$t/" \
    "fuzz/corpus/$t" "fuzz/seeds/$t" > "$log" 2>&1 || rc=$?
  local execs cov ft corp
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(ls "fuzz/corpus/$t" | wc -l)
  if [ $rc -eq 0 ]; then
    printf '%-10s %12s execs  cov %6s  ft %6s  corpus %6s  ok\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$corp"
  else
    printf '%-10s %12s execs  cov %6s  ft %6s  corpus %6s  FINDING (exit %s): %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$corp" "$rc" "$(ls -t fuzz/artifacts/$t | head -1)"
    return 1
  fi
}
jobs=${JOBS:-$(nproc)}
pids=()
for t in "${targets[@]}"; do
  run "$t" & pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
echo "fuzz: $([ $fail = 0 ] && echo 'no findings' || echo 'FINDINGS (see above)')"
exit $fail
