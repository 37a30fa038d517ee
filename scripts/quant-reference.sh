#!/usr/bin/env bash
# Prints the checksums pinned in crates/tinynn/src/quant/weighted_tests.rs: ggml's
# quantize_<type> (llama.cpp 0c1e570's ggml-quants.c, built as ggml-base is: -O3, no -march,
# so no FMA) on the test's rows, without and with an importance matrix. Needs only the
# llama.cpp source (the sdist's vendor/llama.cpp, LLAMA_SRC) and gcc; not run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${LLAMA_SRC:-target/llama-cpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp}
out=target/quant-reference
mkdir -p "$out"
gcc -O3 -DNDEBUG -std=gnu11 -c "$SRC/ggml/src/ggml-quants.c" -I"$SRC/ggml/include" -I"$SRC/ggml/src" -o "$out/ggml-quants.o"
gcc -O3 -DNDEBUG -std=gnu11 scripts/quant-reference.c "$out/ggml-quants.o" -I"$SRC/ggml/include" -I"$SRC/ggml/src" -lm -o "$out/quant-reference"
"$out/quant-reference"
