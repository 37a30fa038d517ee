#!/usr/bin/env bash
# The main job: fetch the default model if it is missing, build toy in release mode, and start
# an interactive chat with SmolLM2-135M-Instruct. Extra arguments go to `toy chat`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch-model.sh
cargo build --release --quiet --bin toy
exec ./target/release/toy chat -m models/SmolLM2-135M-Instruct.Q4_1.gguf "$@"
