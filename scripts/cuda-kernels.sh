#!/usr/bin/env bash
# The CUDA feature where there is no GPU (issue 39): installs NVRTC from PyPI
# (nvidia-cuda-nvrtc, CUDA 13) into target/cuda-venv, then runs tinynn's device and cuda
# tests with `--features cuda`: every kernel source must compile with NVRTC for compute_80 and
# compute_90 (TOY_REQUIRE_NVRTC: a missing libnvrtc fails instead of skipping), NVRTC's log
# must reach the error, the kernel cache must work, and the GPU tests say they were skipped
# (they run where `toy devices` lists a GPU). Debug, in its own target dir (target/cuda), so
# the release build of scripts/build.sh is not redone. (`cargo build -p toy-cli --features
# cuda` builds toy with it; nothing above tinynn depends on the feature yet.)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/cuda-venv
if [ ! -x "$venv/bin/pip" ]; then python3 -m venv "$venv"; fi
"$venv/bin/pip" install -q "nvidia-cuda-nvrtc>=13,<14"
lib=$(ls -d "$venv"/lib/python3*/site-packages/nvidia/cu13/lib | head -1)
export LD_LIBRARY_PATH="$PWD/$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# no debug info: it only has to compile and run the checks (disk)
export TOY_REQUIRE_NVRTC=1 CARGO_TARGET_DIR=target/cuda CARGO_PROFILE_DEV_DEBUG=false
cargo test -p tinynn --features cuda --lib -- cuda:: device::
