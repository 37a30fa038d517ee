#!/usr/bin/env bash
# The main job: fetch the default model if it is missing, build toy in release mode, and serve
# SmolLM2-135M-Instruct behind the OpenAI API with its chat page on http://127.0.0.1:4567/.
# Extra arguments go to `toy serve` (e.g. --port 8080, --api-key KEY, -m another.gguf).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch-model.sh
cargo build --release --quiet --bin toy
exec ./target/release/toy serve -m models/SmolLM2-135M-Instruct.Q4_1.gguf "$@"
