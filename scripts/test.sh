#!/usr/bin/env bash
# Every test: fetch the default model if it is missing (the golden tests run on it), then run
# the whole workspace's tests in release mode (the model tests need optimised code).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch-model.sh
cargo test --release --workspace
# the kernels again through their portable fallbacks (what ARM and older x86 run)
TOY_FORCE_SCALAR=1 cargo test --release -p tinynn
# the server against the official openai Python client, and its page in headless Chromium
bash scripts/serve-openai-test.sh
bash scripts/browser-test.sh
