#!/usr/bin/env bash
# toy against an outside reference on Qwen3.5 hybrids: scripts/qwen35-reference.sh makes a
# random tiny Qwen3_5ForCausalLM with HF transformers, converts it with llama.cpp's own
# convert_hf_to_gguf.py (llama-cpp-python 0.3.36 sdist) and saves transformers' log-probs
# (and llama.cpp's with LLAMA=1); scripts/qwen35-compare.py checks `toy score` on the same
# GGUFs against them (max |dlogprob| <= 1e-3). Run by scripts/test.sh; the venv, the sdist and
# the outputs are cached under target/, so a rerun takes a couple of minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/qwen35-ref}
bash scripts/build.sh
bash scripts/qwen35-reference.sh "$out" >&2
python3 scripts/qwen35-compare.py "$out" --toy target/release/toy
