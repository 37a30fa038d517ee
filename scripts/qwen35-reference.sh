#!/usr/bin/env bash
# Reference outputs for toy's qwen35 support (Qwen3.5: Gated DeltaNet + gated attention, 3:1).
#
# Usage: scripts/qwen35-reference.sh [OUT_DIR]          (default target/qwen35-ref)
#
# Makes a randomly initialised tiny Qwen3.5 with HF transformers (Qwen3_5ForCausalLM, f32,
# seeded; norms, A_log, dt_bias and conv weights moved away from their defaults), converts it
# to GGUF F32 with llama.cpp's own convert_hf_to_gguf.py (commit 0c1e570, as vendored in the
# llama-cpp-python==0.3.36 sdist on PyPI, whose gguf-py is installed too), and saves
# transformers' next-token log-probabilities on a fixed token sequence. Two variants:
#
#   OUT_DIR/tiny-qwen35.f32.gguf          tied embeddings (no output.weight), reference.json
#   OUT_DIR/tiny-qwen35-untied.f32.gguf   own output.weight,                 reference-untied.json
#
# reference*.json: {"ids", "tokens": [{"id", "logprob", "top": [{"id", "logprob"}] x20}], ...}
# in `toy score --prompt-ids ids[0] --continuation-ids ids[1..] --json` shape; *-full.json:
# complete log-softmax rows at 3 positions; *-logprobs.npy: all rows (float32). Also
# *.gguf.txt (metadata keys and tensors, from gguf-py) and hf-*/ (the HF checkpoints).
#
# Checks (any failure exits 1): the rebuilt tokenizer hashes to the converter's "smollm" entry;
# transformers agrees with itself (T=1, a prefix, token-by-token decode through its cache);
# every GGUF tensor equals the HF tensor under the transforms of docs/hybrids.md
# (check-transforms); an independent numpy implementation of llama.cpp's qwen35 graph
# (docs/hybrids.md) on the GGUF matches transformers within 1e-4, and each of 13 deliberate
# convention errors moves the log-probs by over 1e-2 (check-numpy).
#
# Set-up, cached under target/: the venv target/qwen35-venv with torch 2.15.0 installed
# --no-deps (PyPI's Linux wheel is a CUDA build that links ~15 CUDA libraries, GBs of nvidia-*
# wheels; instead gcc builds small stub libraries for them into the venv, see cuda-stubs in
# scripts/qwen35-reference.py, and torch runs on the CPU; FULL_TORCH=1 installs the real CUDA
# wheels instead), transformers 5.23.0, tokenizers, safetensors, sentencepiece, and gguf-py
# from the sdist; the sdist in target/llama-cpp/src/ (shared with bench/compare-llama-cpp.sh).
# The tokenizer is SmolLM2's (models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by
# scripts/fetch-model.sh when missing), rebuilt as tokenizer.json from the GGUF's tokens and
# merges. Not part of CI.
#
# Environment: LLAMA=1 also runs llama.cpp on both GGUFs (llama-cpp-python 0.3.36 built from the
# sdist into the venv, ~40 minutes on 2 busy cores the first time, or bench/compare-llama-cpp.sh's
# build when present), compares with transformers (tolerance 1e-3; measured 1e-5 with an f32 KV
# cache, 7e-4 with llama.cpp's default f16 KV + flash attention), and writes llama.cpp's own
# log-probs (f16 KV, flash attention) as llama-reference*.json; THREADS (2);
# QWEN35_VENV (target/qwen35-venv).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

readonly PY_PKG=llama-cpp-python
readonly PY_VERSION=0.3.36
readonly SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
readonly TORCH_VERSION=2.15.0
readonly TRANSFORMERS_VERSION=5.23.0
readonly TOKENIZER_GGUF=models/SmolLM2-135M-Instruct.Q4_1.gguf
LLAMA=${LLAMA:-0}
FULL_TORCH=${FULL_TORCH:-0}
export THREADS=${THREADS:-2}

out=${1:-target/qwen35-ref}
case $out in -h|--help) sed -n '2,/^set -euo/{/^set/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;; esac
venv=${QWEN35_VENV:-$root/target/qwen35-venv}
py="$venv/bin/python"
sdist_dir="$root/target/llama-cpp/src"
src_root="$sdist_dir/llama_cpp_python-$PY_VERSION"
llama_src="$src_root/vendor/llama.cpp"
ref_py="$root/scripts/qwen35-reference.py"
logs="$out/logs"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
run() { nice -n 10 "$@"; }

mkdir -p "$out" "$logs"
out=$(cd "$out" && pwd)
logs="$out/logs"
t0=$(date +%s)

# --- inputs ----------------------------------------------------------------------------
[ -f "$TOKENIZER_GGUF" ] || bash scripts/fetch-model.sh >&2

if [ ! -f "$src_root/.unpacked" ] || [ ! -f "$llama_src/convert_hf_to_gguf.py" ]; then
    sdist="$sdist_dir/llama_cpp_python-$PY_VERSION.tar.gz"
    mkdir -p "$sdist_dir"
    if [ ! -f "$sdist" ] || [ "$(sha256sum "$sdist" | cut -d' ' -f1)" != "$SDIST_SHA256" ]; then
        rm -f "$sdist"
        log "downloading the $PY_PKG==$PY_VERSION sdist from PyPI"
        # --no-binary for this package only (`:all:` would compile cmake from source too)
        python3 -m pip download --quiet --no-deps --no-binary "$PY_PKG" "$PY_PKG==$PY_VERSION" \
            -d "$sdist_dir" >"$logs/pip-download.log" 2>&1 || die "pip download failed ($logs/pip-download.log)"
        [ "$(sha256sum "$sdist" | cut -d' ' -f1)" = "$SDIST_SHA256" ] || die "sha256 mismatch for $sdist"
    fi
    log "unpacking $sdist"
    rm -rf "$src_root"
    tar -xzf "$sdist" -C "$sdist_dir"
    touch "$src_root/.unpacked"
fi
grep -q "llama.cpp@0c1e570" "$src_root/CHANGELOG.md" || log "WARNING: the sdist does not say llama.cpp@0c1e570"

# --- venv ------------------------------------------------------------------------------
stamp="torch=$TORCH_VERSION transformers=$TRANSFORMERS_VERSION gguf-py=$PY_VERSION full_torch=$FULL_TORCH"
if [ "$(cat "$venv/.qwen35-ready" 2>/dev/null)" != "$stamp" ]; then
    [ -x "$py" ] || { log "creating $venv"; python3 -m venv "$venv"; }
    run "$py" -m pip install -q --upgrade pip
    if [ "$FULL_TORCH" = 1 ]; then
        log "installing torch $TORCH_VERSION with its CUDA wheels (GBs)"
        run "$py" -m pip install -q "torch==$TORCH_VERSION"
    elif ! "$py" -c "import torch" 2>/dev/null; then
        log "installing torch $TORCH_VERSION without its CUDA dependencies"
        run "$py" -m pip install -q --no-deps "torch==$TORCH_VERSION"
        # (pip then warns that torch's CUDA requirements are missing: expected, see the log)
        run "$py" -m pip install -q filelock typing-extensions sympy networkx jinja2 fsspec mpmath \
            markupsafe numpy "setuptools>=77.0.3" >"$logs/pip-torch-deps.log" 2>&1 ||
            { cat "$logs/pip-torch-deps.log" >&2; die "pip install of torch's dependencies failed"; }
        site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
        # torch/lib's RPATH includes ../../nvidia/cu13/lib: the stubs go there
        log "building CUDA stub libraries into $site/nvidia/cu13/lib"
        run "$py" "$ref_py" cuda-stubs "$site/torch/lib" "$site/nvidia/cu13/lib" 2>"$logs/cuda-stubs.log" ||
            die "cuda-stubs failed ($logs/cuda-stubs.log); FULL_TORCH=1 installs the CUDA wheels instead"
    fi
    "$py" -c "import torch; assert not torch.cuda.is_available() or '$FULL_TORCH' == '1'; torch.ones(2) @ torch.ones(2)" ||
        die "torch does not import; FULL_TORCH=1 installs the CUDA wheels instead"
    log "installing transformers $TRANSFORMERS_VERSION, tokenizers, safetensors, sentencepiece, gguf-py (sdist)"
    run "$py" -m pip install -q "transformers==$TRANSFORMERS_VERSION" tokenizers safetensors sentencepiece \
        "$llama_src/gguf-py"
    echo "$stamp" >"$venv/.qwen35-ready"
fi
"$py" -c "import torch, transformers, gguf; print('torch', torch.__version__, '| transformers', transformers.__version__, '| gguf-py', gguf.__file__)" >&2

# --- models, conversion, references ----------------------------------------------------------
for variant in tied untied; do
    if [ $variant = tied ]; then name=tiny-qwen35; ref=reference; else name=tiny-qwen35-untied; ref=reference-untied; fi
    hf="$out/hf-$variant"
    gguf_out="$out/$name.f32.gguf"
    rm -rf "$hf"
    log "$variant: tokenizer and random model into $hf"
    run "$py" "$ref_py" tokenizer "$TOKENIZER_GGUF" "$hf" 2>"$logs/tokenizer-$variant.log" ||
        { cat "$logs/tokenizer-$variant.log" >&2; die "tokenizer"; }
    run "$py" "$ref_py" model "$hf" --variant $variant 2>"$logs/model-$variant.log" ||
        { cat "$logs/model-$variant.log" >&2; die "model"; }
    log "$variant: convert_hf_to_gguf.py --outtype f32 --no-mtp -> $gguf_out"
    # --no-mtp: without it the Qwen3.5 converter asserts that the checkpoint has MTP tensors
    # (mtp.*), which a transformers-made Qwen3_5ForCausalLM does not
    run "$py" "$llama_src/convert_hf_to_gguf.py" "$hf" --outtype f32 --no-mtp --model-name "$name" \
        --outfile "$gguf_out" >"$logs/convert-$variant.log" 2>&1 ||
        { tail -n 30 "$logs/convert-$variant.log" >&2; die "convert_hf_to_gguf.py failed"; }
    run "$py" "$ref_py" dump "$gguf_out" "$gguf_out.txt" >/dev/null
    log "$variant: transformers log-probs -> $out/$ref.json"
    run "$py" "$ref_py" reference "$hf" "$out" --name $ref --gguf-name "$name.f32.gguf" 2>"$logs/reference-$variant.log" ||
        { cat "$logs/reference-$variant.log" >&2; die "reference"; }
    grep '^reference:' "$logs/reference-$variant.log" >&2
    run "$py" "$ref_py" check-transforms "$hf" "$gguf_out" || die "check-transforms ($variant)"
    log "$variant: numpy implementation of llama.cpp's graph vs transformers"
    run "$py" "$ref_py" check-numpy "$gguf_out" "$out/$ref.json" >"$out/check-numpy-$variant.json" ||
        { cat "$out/check-numpy-$variant.json" >&2; die "check-numpy ($variant)"; }
    "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print('check-numpy: max |dlogprob| %.2e (top-20), %.2e (all); smallest mutation effect %.2e' % (r['max_abs_diff_top'], r['max_abs_diff_full'], min(r['mutations'].values())))" \
        "$out/check-numpy-$variant.json" >&2
done

# --- llama.cpp (optional) --------------------------------------------------------------------
if [ "$LLAMA" = 1 ]; then
    prebuilt="$root/target/llama-cpp/build-gcc/bin"
    if ! "$py" -c "import llama_cpp" 2>/dev/null; then
        if [ -f "$prebuilt/libllama.so" ] && [ -d "$src_root/llama_cpp" ]; then
            log "llama-cpp-python from $src_root over bench/compare-llama-cpp.sh's libraries in $prebuilt"
            export PYTHONPATH="$src_root${PYTHONPATH:+:$PYTHONPATH}" LLAMA_CPP_LIB_PATH="$prebuilt"
        else
            log "building llama-cpp-python $PY_VERSION from the sdist (~30 minutes on 2 cores; log: $logs/llama-cpp-python.log)"
            CMAKE_BUILD_PARALLEL_LEVEL=$THREADS CMAKE_ARGS="-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
                run "$py" -m pip install -v --no-binary "$PY_PKG" "$sdist_dir/llama_cpp_python-$PY_VERSION.tar.gz" \
                >"$logs/llama-cpp-python.log" 2>&1 || die "llama-cpp-python build failed ($logs/llama-cpp-python.log)"
        fi
    fi
    for variant in tied untied; do
        if [ $variant = tied ]; then name=tiny-qwen35; ref=reference; else name=tiny-qwen35-untied; ref=reference-untied; fi
        log "$variant: llama.cpp vs transformers"
        run "$py" "$ref_py" check-llama "$out/$name.f32.gguf" "$out/$ref.json" --out "$out/llama-$ref.json" | tee "$out/check-llama-$variant.json" >&2 ||
            die "check-llama ($variant)"
    done
fi

log "done in $(( $(date +%s) - t0 )) s: $out"
( cd "$out" && sha256sum ./*.gguf ./*reference*.json ) >&2
