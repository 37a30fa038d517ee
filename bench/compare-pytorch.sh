#!/usr/bin/env bash
# Train the same model in toy, PyTorch eager and torch.compile, side by side, then check the
# checkpoint in llama.cpp (llama-cpp-python).
#
# Usage: bench/compare-pytorch.sh [CONFIG...]       CONFIG: tiny, small (default: tiny small)
#
# For each recipe (recipes/CONFIG.toml), on the Rust book prepared once by `toy data prepare`
# into target/bench-pytorch/data-<vocab>: STEPS steps of `toy train`, then of
# bench/pytorch/train_torch.py in eager mode and with torch.compile (same shapes, AdamW,
# clipping, schedule, token shards and batches, and toy's initial weights from its step-0
# checkpoint; OWN_INIT=1: PyTorch's own draw of the same init scheme), each in its own process
# at THREADS threads. Prints tokens/s (median of steady-state steps), the ratios toy/eager and
# toy/compile, peak RSS, and the loss ratio after the same steps (must be within 2%).
# Then trains tiny llama and tiny gpt2 for LLAMA_STEPS steps with toy, loads each checkpoint
# GGUF in llama-cpp-python and compares llama.cpp's next-token log-probabilities at every
# position of a text with `toy score` (within 1e-3), and its tokenization with `toy tokenize`.
#
# Set-up (cached under target/): a venv target/pytorch-venv with torch from PyPI (the wheel
# with its CUDA libraries: the --no-deps install does not import without them) and
# llama-cpp-python 0.3.36 built from source (minutes), or, when bench/compare-llama-cpp.sh has
# already built that llama.cpp commit, its Python package over those libraries. llama.cpp runs
# with flash attention, the attention path toy's inference follows. Not part of CI.
#
# With PRECISIONS=f32,bf16 (default) toy also trains with `precision = "bf16"`, and with
# MODES=eager,compile,compile-bf16 (default) PyTorch also under torch.autocast(bfloat16) with
# torch.compile; the table then gives toy bf16 against each.
# Environment: PRECISIONS, MODES, THREADS (2), STEPS_TINY (300), STEPS_SMALL (40), LLAMA_STEPS (300), OWN_INIT (0),
# SKIP_LLAMA_CPP (0), SKIP_COMPARE (0; 1 runs only the llama.cpp check), TORCH_VERSION (2.15.0),
# OMP_WAIT_POLICY (passive for PyTorch: its default spin-waiting collapses when other processes
# share the cores; set active on a quiet machine). Results: target/bench-pytorch/*.json.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

THREADS=${THREADS:-2}
STEPS_TINY=${STEPS_TINY:-300}
STEPS_SMALL=${STEPS_SMALL:-40}
LLAMA_STEPS=${LLAMA_STEPS:-300}
SKIP_LLAMA_CPP=${SKIP_LLAMA_CPP:-0}
SKIP_COMPARE=${SKIP_COMPARE:-0}
OWN_INIT=${OWN_INIT:-0}
PRECISIONS=${PRECISIONS:-f32,bf16}
MODES=${MODES:-eager,compile,compile-bf16}
TORCH_VERSION=${TORCH_VERSION:-2.15.0}
readonly LLAMA_CPP_PY=0.3.36

venv="${TORCH_VENV:-$root/target/pytorch-venv}"
py="$venv/bin/python"
work="$root/target/bench-pytorch"
toy="$root/target/release/toy"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(tiny small)
[ "$SKIP_COMPARE" = 1 ] && configs=()

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

mkdir -p "$work/logs"

# --- PyTorch ---------------------------------------------------------------------------
. "$root/bench/pytorch/venv.sh"

# --- toy -------------------------------------------------------------------------------
log "building toy"
cargo build --release -p toy-cli >&2

vocab_of() { sed -n 's/^vocab *= *\([0-9]*\).*/\1/p' "$1" | head -1; }
data_for() {
    local vocab=$1 dir="$work/data-$1"
    if [ ! -f "$dir/meta.json" ]; then
        log "preparing the Rust book with a BPE of $vocab into $dir"
        "$toy" data prepare --out "$dir" --vocab-size "$vocab" >&2
    fi
    echo "$dir"
}

status=0
for cfg in "${configs[@]+"${configs[@]}"}"; do
    recipe="recipes/$cfg.toml"
    [ -f "$recipe" ] || die "no recipe $recipe"
    case $cfg in tiny) steps=$STEPS_TINY ;; small) steps=$STEPS_SMALL ;; *) steps=$STEPS_TINY ;; esac
    data=$(data_for "$(vocab_of "$recipe")")
    log "$cfg: $steps steps each of toy, torch eager, torch.compile at $THREADS threads"
    "$py" bench/pytorch/compare.py "$recipe" --toy "$toy" --python "$py" --data "$data" \
        --precisions "$PRECISIONS" --modes "$MODES" \
        --steps "$steps" --threads "$THREADS" --runs-dir "$work/runs-$cfg" \
        --out "$work/compare-$cfg.json" $([ "$OWN_INIT" = 1 ] && echo --own-init) || status=1
done

# --- llama.cpp -------------------------------------------------------------------------
if [ "$SKIP_LLAMA_CPP" != 1 ]; then
    src="$root/target/llama-cpp/src/llama_cpp_python-$LLAMA_CPP_PY"
    prebuilt="$root/target/llama-cpp/build-gcc/bin"
    "$py" -c "import diskcache" 2>/dev/null || "$py" -m pip install -q diskcache
    if ! "$py" -c "import llama_cpp" 2>/dev/null; then
        if [ -f "$prebuilt/libllama.so" ] && [ -d "$src/llama_cpp" ]; then
            # bench/compare-llama-cpp.sh already built this llama.cpp (the commit vendored in
            # llama-cpp-python $LLAMA_CPP_PY): its Python package over those libraries.
            log "llama-cpp-python $LLAMA_CPP_PY from $src over the libraries in $prebuilt"
            export PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}" LLAMA_CPP_LIB_PATH="$prebuilt"
        else
            sdist="$root/target/llama-cpp/src/llama_cpp_python-$LLAMA_CPP_PY.tar.gz"
            [ -f "$sdist" ] || sdist="llama-cpp-python==$LLAMA_CPP_PY"
            log "building llama-cpp-python $LLAMA_CPP_PY from source (minutes; log: $work/logs/llama-cpp-python.log)"
            CMAKE_BUILD_PARALLEL_LEVEL=$THREADS CMAKE_ARGS="-DLLAMA_CURL=OFF" \
                "$py" -m pip install -v --no-binary llama-cpp-python "$sdist" \
                >"$work/logs/llama-cpp-python.log" 2>&1 || die "llama-cpp-python build failed"
        fi
    fi
    data=$(data_for 627)
    for arch in llama gpt2; do
        runs="$work/runs-llama-cpp-$arch"
        rm -rf "$runs"
        log "tiny $arch: $LLAMA_STEPS steps with toy, then llama.cpp's logits on its checkpoint"
        "$toy" -t "$THREADS" train recipes/tiny.toml --runs-dir "$runs" --set "data.dir=\"$data\"" \
            --set "model.arch=$arch" --set "train.steps=$LLAMA_STEPS" \
            --set "eval.interval=$LLAMA_STEPS" --set "checkpoint.interval=$LLAMA_STEPS" >&2
        ckpt=$(ls "$runs"/*/ckpt-*.gguf | tail -1)
        "$py" bench/pytorch/llama_logits.py "$ckpt" --toy "$toy" | tee "$work/llama-cpp-$arch.json" \
            || status=1
    done
fi
exit $status
