#!/usr/bin/env bash
# Prints the checksums pinned in crates/tinynn/src/quant/iq_quantize_tests.rs: ggml's
# quantize_iq2_xxs / quantize_iq2_xs / quantize_iq2_s / quantize_iq3_xxs / quantize_iq3_s
# (llama.cpp 0c1e570's ggml-quants.c, built as ggml-base is: -O3, no -march, so no FMA) on
# the test's rows, without and with an importance matrix. Needs only the llama.cpp source
# (the sdist's vendor/llama.cpp, LLAMA_SRC) and gcc; not run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${LLAMA_SRC:-target/llama-cpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp}
out=target/iq-quant-reference
mkdir -p "$out"
gcc -O3 -DNDEBUG -std=gnu11 -c "$SRC/ggml/src/ggml-quants.c" -I"$SRC/ggml/include" -I"$SRC/ggml/src" -o "$out/ggml-quants.o"
gcc -O3 -DNDEBUG -std=gnu11 scripts/iq-quant-reference.c "$out/ggml-quants.o" -I"$SRC/ggml/include" -I"$SRC/ggml/src" -lm -o "$out/iq-quant-reference"
"$out/iq-quant-reference"
