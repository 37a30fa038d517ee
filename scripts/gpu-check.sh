#!/usr/bin/env bash
# The GPU checks of issue 39 on a lent device (../shared/GPU.md): every CUDA kernel and the
# cuBLASLt products against tinynn's CPU layers (tinynn's `cuda::` tests, which skip where there
# is no GPU and fail there if a kernel disagrees), and `toy devices`.
#
#   here:  bash scripts/gpu-check.sh --build     builds both with --features cuda, strips them
#                                                into .dev/ (ignored; about 10 MB)
#   there: run(command="bash scripts/gpu-check.sh $OUT", carry=[".dev"], timeout_s=480)
#
# Prints everything to stdout (and to $1/gpu-check.log when given).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --build ]; then
  mkdir -p .dev
  grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >> .git/info/exclude
  cargo build --release -p toy-cli --features cuda
  bin=$(cargo test --release -p tinynn --features cuda --lib --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l) if l.startswith("{") else {}
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])')
  strip -o .dev/toy target/release/toy
  strip -o .dev/tinynn-tests "$bin"
  ls -la .dev
  exit 0
fi
out=${1:-}
lib=/usr/local/cuda-13.0/targets/x86_64-linux/lib
[ -d "$lib" ] && export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  .dev/toy devices
  # every GPU test, one at a time (one stream, clear output); --nocapture shows any "skipped"
  .dev/tinynn-tests --test-threads=1 --nocapture cuda:: device::
} 2>&1 | tee ${out:+"$out/gpu-check.log"}
