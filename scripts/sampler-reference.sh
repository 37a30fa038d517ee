#!/usr/bin/env bash
# Rewrites crates/toy/tests/fixtures/llama-samplers.json: what llama.cpp 0c1e570's samplers keep,
# with which probabilities, on the fixed logit vectors of scripts/sampler-reference.cpp. Needs a
# llama.cpp build (not in CI: the fixture is committed). LLAMA_SRC is its source tree (the
# sdist's vendor/llama.cpp), LLAMA_BUILD its cmake build directory (with bin/libllama.so).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${LLAMA_SRC:-target/llama-cpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp}
BUILD=${LLAMA_BUILD:-target/llama-cpp/build-gcc}
bash scripts/fetch-model.sh
mkdir -p target/sampler-reference
g++ -O2 -std=c++17 -I"$SRC/include" -I"$SRC/ggml/include" scripts/sampler-reference.cpp \
    -L"$BUILD/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$PWD/$BUILD/bin" \
    -o target/sampler-reference/sampler-reference
target/sampler-reference/sampler-reference models/SmolLM2-135M-Instruct.Q4_1.gguf \
    > target/sampler-reference/out.json 2> target/sampler-reference/log.txt
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' target/sampler-reference/out.json
mv target/sampler-reference/out.json crates/toy/tests/fixtures/llama-samplers.json
echo "wrote crates/toy/tests/fixtures/llama-samplers.json ($(wc -c < crates/toy/tests/fixtures/llama-samplers.json) bytes)"
