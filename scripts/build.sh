#!/usr/bin/env bash
# One build for everything the tests run: every test executable of the workspace and the
# `toy` binary (target/release/toy), all with the one feature set the workspace's tests
# unify to. The scripts that run the binary call this rather than `cargo build -p toy-cli`,
# whose narrower feature set rebuilt 27 crates (about 4 minutes here) after the tests had
# built. A no-op when nothing changed.
#
# Usage: scripts/build.sh                      build (quietly)
#        scripts/build.sh --test-bin CRATE     build, then print the path of CRATE's unit-test
#                                              executable (to run it again with other settings)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != --test-bin ]; then
  exec cargo test --release --workspace --no-run --quiet
fi
crate=${2:?usage: scripts/build.sh --test-bin CRATE}
cargo test --release --workspace --no-run --quiet
bin=$(cargo test --release --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if (m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test")
            and t.get("name") == sys.argv[1] and "lib" in t.get("kind", []) and m.get("executable")):
        print(m["executable"])
        break
' "$crate")
[ -n "$bin" ] || { echo "build: no unit-test executable for crate '$crate'" >&2; exit 1; }
echo "$bin"
