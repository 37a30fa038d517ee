#!/usr/bin/env bash
# toy against an outside reference on the llama3 / qwen2 / qwen3 families, for inference and
# for the trainer. Usage: scripts/families-test.sh [OUT_DIR]        (default target/families-ref)
#
# For each family scripts/families-reference.py makes a random tiny HF model with transformers
# (f32, seeded, RMSNorm weights moved away from 1, biases nonzero; 2 layers, hidden 64, 4/2
# heads, SmolLM2's tokenizer):
#   llama3  LlamaForCausalLM, rope_type llama3 (factor 8, original context 64, head_dim 16,
#           theta 1e4: the converter writes rope_freqs.weight = 1, 2 smoothed, 5 x 8), own head
#   qwen2   Qwen2ForCausalLM: q/k/v biases, NeoX RoPE, tied embeddings
#   qwen3   Qwen3ForCausalLM: per-head q/k RMSNorm, head_dim 32 != 64 / 4 heads, own head
# converts it with llama.cpp's own convert_hf_to_gguf.py (the llama-cpp-python 0.3.36 sdist)
# to an F32 GGUF, checks the GGUF carries the family's part (check-gguf), and takes
# transformers' mean next-token NLL (natural log, float64 sum) on one fixed 96-id record, plus
# the NLL of the same weights without that part (llama3 unscaled RoPE, qwen2 no biases, qwen3
# no q/k norms), which must differ by over 10x the tolerance; for llama3 and qwen2 `toy score` on
# a copy of the GGUF without that part (rope_freqs 1, biases 0) must give that ablated NLL
# (toy reads the part; the check tells the two apart). Then, on the same ids:
#   toy score             mean NLL within 1e-4 relative; per-token log-probs within 1e-3 of
#                         transformers with K and V rounded to f16 (toy's KV cache is f16;
#                         against plain f32 transformers single log-probs move by up to 6.3e-3,
#                         bound 1e-2)
#   toy finetune (full)   step-1 training loss (of the initial weights: step 1's loss comes
#                         before its update) and the step-0 held-out loss, within 1e-4 relative
#   toy finetune (lora)   the same on a LoRA run (B starts at zero; the F32 base as stored);
#                         NO_LORA=1 skips it
# and prints a table. Any failure exits 1.
#
# The venv (target/qwen35-venv: torch without its CUDA wheels, transformers 5.23.0, gguf-py),
# the sdist (target/llama-cpp/src) and the tokenizer are scripts/qwen35-reference.sh's: when
# they are missing, that script is run once to make them (its own qwen35 outputs go to
# target/qwen35-ref, as scripts/qwen35-test.sh's). The models, GGUFs and references are cached
# in OUT_DIR per family, keyed on scripts/families-reference.py and the venv: a rerun only
# runs toy. FRESH=1 remakes them. Environment: THREADS (2), QWEN35_VENV.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

out=${1:-target/families-ref}
case $out in -h|--help) sed -n '2,/^set -euo/{/^set/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;; esac
export THREADS=${THREADS:-2}
FRESH=${FRESH:-0}
NO_LORA=${NO_LORA:-0}
venv=${QWEN35_VENV:-$root/target/qwen35-venv}
py="$venv/bin/python"
llama_src="$root/target/llama-cpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp"
ref_py="$root/scripts/families-reference.py"
tokenizer_gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
run() { nice -n 10 "$@"; }

t0=$(date +%s)
bash scripts/build.sh

# --- the venv, sdist and tokenizer of scripts/qwen35-reference.sh ---------------------------
if [ ! -f "$venv/.qwen35-ready" ] || [ ! -f "$llama_src/convert_hf_to_gguf.py" ] || [ ! -f "$tokenizer_gguf" ]; then
    log "no qwen35 venv/sdist yet: running scripts/qwen35-reference.sh to make them"
    bash scripts/qwen35-reference.sh target/qwen35-ref >&2
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
logs="$out/logs"
mkdir -p "$logs"
stamp="$(sha256sum "$ref_py" "$root/scripts/qwen35-reference.py" | cut -c1-16 | tr '\n' ' ')$(cat "$venv/.qwen35-ready")"

# --- models, conversion, references (cached) --------------------------------------------------
for family in llama3 qwen2 qwen3; do
    hf="$out/hf-$family"
    gguf_out="$out/tiny-$family.f32.gguf"
    ref="$out/reference-$family.json"
    if [ "$FRESH" != 1 ] && [ "$(cat "$out/.$family-ready" 2>/dev/null)" = "$stamp" ] &&
        [ -f "$gguf_out" ] && [ -f "$ref" ]; then
        log "$family: cached ($gguf_out, $ref)"
        continue
    fi
    rm -rf "$hf" "$gguf_out" "$ref" "$out/.$family-ready"
    log "$family: tokenizer and random model into $hf"
    run "$py" "$ref_py" model "$hf" --family $family --tokenizer-gguf "$tokenizer_gguf" 2>"$logs/model-$family.log" ||
        { cat "$logs/model-$family.log" >&2; die "model ($family)"; }
    grep '^model:' "$logs/model-$family.log" >&2
    log "$family: convert_hf_to_gguf.py --outtype f32 -> $gguf_out"
    # (through families-reference.py convert: transformers 5 would give the converter a
    # Qwen2Tokenizer for a qwen2 checkpoint, not SmolLM2's; see cmd_convert there)
    run "$py" "$ref_py" convert "$llama_src" "$hf" --outtype f32 --model-name "tiny-$family" \
        --outfile "$gguf_out" >"$logs/convert-$family.log" 2>&1 ||
        { tail -n 30 "$logs/convert-$family.log" >&2; die "convert_hf_to_gguf.py failed ($family)"; }
    run "$py" "$root/scripts/qwen35-reference.py" dump "$gguf_out" "$gguf_out.txt" >/dev/null
    run "$py" "$ref_py" check-gguf "$gguf_out" "$hf" --family $family || die "check-gguf ($family)"
    if [ $family != qwen3 ]; then
        run "$py" "$ref_py" mutate "$gguf_out" "$out/tiny-$family-ablated.f32.gguf" --family $family ||
            die "mutate ($family)"
    fi
    log "$family: transformers NLL -> $ref"
    run "$py" "$ref_py" reference "$hf" "$ref" --family $family 2>"$logs/reference-$family.log" ||
        { cat "$logs/reference-$family.log" >&2; die "reference ($family)"; }
    grep '^reference:' "$logs/reference-$family.log" >&2
    echo "$stamp" >"$out/.$family-ready"
done

# --- toy against them -----------------------------------------------------------------------
log "toy score and toy finetune on the same ids"
lora=()
[ "$NO_LORA" = 1 ] && lora=(--no-lora)
rc=0
"$py" "$ref_py" compare "$out" --toy "$root/target/release/toy" "${lora[@]}" | tee "$out/table.md" || rc=$?
log "done in $(( $(date +%s) - t0 )) s: $out"
exit $rc
