#!/usr/bin/env bash
# Every test: fetch the default model if it is missing (the golden tests run on it), build
# everything once (scripts/build.sh: the test executables and target/release/toy with one
# feature set), then run the whole workspace's tests in release mode (the model tests need
# optimised code), the kernels again through their portable paths, the official openai
# client against a live server, the page in headless Chromium, and the qwen35 hybrid
# against transformers, the CUDA kernels compiled by NVRTC, every parser fuzzed for 30 s, and
# data-parallel training over MPI
# (OpenMPI, installed by the script).
set -euo pipefail
cd "$(dirname "$0")/.."
# the disk is what a clean run can run out of (a clean build is several GB): say what is free
df -h . | awk 'NR==2 {print "test.sh: " $4 " free on " $6 " at the start"}'
trap 'df -h . | awk '"'"'NR==2 {print "test.sh: " $4 " free at the end"}'"'"'; du -sh target fuzz/target 2>/dev/null || true' EXIT
bash scripts/fetch-model.sh
bash scripts/build.sh
cargo test --release --workspace
# the kernels again through their portable fallbacks (what ARM and older x86 run): the same
# tinynn test executable, so nothing is rebuilt with another feature set
TOY_FORCE_SCALAR=1 "$(bash scripts/build.sh --test-bin tinynn)"
# and through the AVX2 kernels that machines without AVX-512 VNNI take (on one that has it)
TOY_NO_VNNI=1 "$(bash scripts/build.sh --test-bin tinynn)"
# the server against the official openai Python client, and its page in headless Chromium
bash scripts/serve-openai-test.sh
bash scripts/browser-test.sh
# Qwen3.5 hybrids against transformers (a random tiny model converted by llama.cpp's converter)
bash scripts/qwen35-test.sh
# llama3 (rope_freqs) / qwen2 (biases) / qwen3 (q/k norms, head_dim) against transformers: toy score and toy finetune's step-1 loss
bash scripts/families-test.sh
# the CUDA feature without a GPU: every kernel compiles with PyPI's NVRTC, device listing
bash scripts/cuda-kernels.sh
# every parser under coverage-guided fuzzing for 30 s (cargo-fuzz, installed by the script),
# after its committed regression inputs
bash scripts/fuzz.sh 30
# data-parallel training over MPI (installs OpenMPI; builds toy with --features mpi, so last)
bash scripts/mpi-test.sh
