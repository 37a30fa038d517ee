#!/usr/bin/env bash
# toy against ik_llama.cpp (`-rtr 1`) and, where built, mainline llama.cpp, on one machine,
# per weight type (issue 38): pp512 and tg128 (and both at depth D with DEPTH=D), the engines
# alternating and their order flipped each round, ratios taken per round.
#
# Usage: bench/compare-engines.sh [MODEL.gguf ...]
#
#   With no models: SmolLM2-135M-Instruct Q4_1 (scripts/fetch-model.sh) and that file rewritten
#   by `toy quantize` to each of TYPES (default "F16 Q8_0 Q4_0 Q4_K_M") under target/engines/,
#   plus models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf when present (scripts/fetch-coder.sh).
#
# Engines: target/release/toy (built), ik's llama-bench (bench/build-ik-llama.sh, cached; about
# 40 minutes the first time), mainline llama-bench from bench/compare-llama-cpp.sh's GCC build
# (target/llama-cpp/build-gcc) if it is there. Environment: THREADS (2), ROUNDS (2), REPS (3),
# DEPTH (0: off). Output: a table on stdout, raw JSON under target/engines/runs/. Not in CI.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
REPS=${REPS:-3}
DEPTH=${DEPTH:-0}
TYPES=${TYPES:-"F16 Q8_0 Q4_0 Q4_K_M"}
work=$root/target/engines
runs=$work/runs
mkdir -p "$runs"
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

cargo build --release --bin toy >&2
toy=$root/target/release/toy
ik=$(bash bench/build-ik-llama.sh)
main=$root/target/llama-cpp/build-gcc/bin/llama-bench
[ -x "$main" ] || main=""

models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    base=models/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -f "$base" ] || bash scripts/fetch-model.sh >&2
    models=("$base")
    for t in $TYPES; do
        out=$work/SmolLM2-135M-Instruct.to-$t.gguf
        if [ ! -f "$out" ] || [ "$base" -nt "$out" ]; then
            log "toy quantize $base -> $out"
            "$toy" quantize "$base" "$out" --type "$t" >&2
        fi
        models+=("$out")
    done
    coder=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    [ -f "$coder" ] && models+=("$coder")
fi

# tests as "-p 512 -n 0" style argument pairs: prefill, decode, and each at depth DEPTH
tests=("512 0 0" "0 128 0")
[ "$DEPTH" -gt 0 ] && tests+=("512 0 $DEPTH" "0 128 $DEPTH")

# run ENGINE MODEL P N D -> tok/s on stdout
run() {
    local e=$1 m=$2 p=$3 n=$4 d=$5 out
    out=$runs/$(basename "$m" .gguf).$e.p$p.n$n.d$d.$(date +%s%N).json
    case $e in
    toy) "$toy" -t "$THREADS" bench -m "$m" -p "$p" -n "$n" -d "$d" -r "$REPS" --json >"$out" 2>/dev/null
        python3 - "$out" "$p" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
print(j["prefill_tok_s" if int(sys.argv[2]) > 0 else "decode_tok_s"]["mean"])
EOF
        ;;
    ik | main)
        local bin=$ik extra=(-rtr 1)
        [ "$e" = main ] && bin=$main && extra=()
        # ik's llama-bench has no -d: its depth test is -gp DEPTH,N (decode after a prompt)
        if [ "$d" -gt 0 ] && [ "$e" = ik ]; then
            [ "$n" -gt 0 ] || { echo nan; return; }
            extra+=(-p 0 -n 0 -gp "$d,$n")
        elif [ "$d" -gt 0 ]; then
            extra+=(-p "$p" -n "$n" -d "$d")
        else
            extra+=(-p "$p" -n "$n")
        fi
        # ik 0.1.5 aborts in its flash attention on some files with -rtr (SmolLM2 IQ4_XS):
        # then it runs again without flash attention (logged); an engine that still fails
        # gives nan, not the end of the run
        if ! "$bin" -m "$m" -r "$REPS" -t "$THREADS" "${extra[@]}" -o json >"$out" 2>/dev/null; then
            log "$e failed on $(basename "$m") ${extra[*]}; again with -fa 0"
            "$bin" -m "$m" -r "$REPS" -t "$THREADS" "${extra[@]}" -fa 0 -o json >"$out" 2>/dev/null ||
                { echo nan; return; }
        fi
        python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["avg_ts"])' "$out"
        ;;
    esac
}

engines=(toy ik)
[ -n "$main" ] && engines+=(main)
printf '| model | test | %s | toy/ik per round |%s\n' "$(IFS='|'; echo "${engines[*]}" | sed 's/|/ | /g')" \
    "$([ -n "$main" ] && echo ' toy/main per round |')"
printf '|---|---|%s---|%s\n' "$(printf -- '---|%.0s' "${engines[@]}")" "$([ -n "$main" ] && printf '%s' '---|')"
for m in "${models[@]}"; do
    for t in "${tests[@]}"; do
        read -r p n d <<<"$t"
        name=$([ "$p" -gt 0 ] && echo "pp$p" || echo "tg$n")
        [ "$d" -gt 0 ] && name="$name@d$d"
        declare -A got=()
        ratios_ik="" ratios_main=""
        for ((r = 0; r < ROUNDS; r++)); do
            order=("${engines[@]}")
            # flip the order every other round
            if [ $((r % 2)) -eq 1 ]; then
                order=()
                for ((i = ${#engines[@]} - 1; i >= 0; i--)); do order+=("${engines[i]}"); done
            fi
            declare -A this=()
            for e in "${order[@]}"; do
                v=$(run "$e" "$m" "$p" "$n" "$d")
                this[$e]=$v
                got[$e]="${got[$e]:-}${got[$e]:+, }$(printf '%.1f' "$v")"
                log "$(basename "$m") $name $e: $v"
            done
            ratios_ik="$ratios_ik${ratios_ik:+, }$(python3 -c "print(f'{${this[toy]}/${this[ik]}:.2f}')" 2>/dev/null || echo nan)"
            [ -n "$main" ] && ratios_main="$ratios_main${ratios_main:+, }$(python3 -c "print(f'{${this[toy]}/${this[main]}:.2f}')")"
            unset this
        done
        row="| $(basename "$m" .gguf) | $name |"
        for e in "${engines[@]}"; do row="$row ${got[$e]} |"; done
        row="$row $ratios_ik |"
        [ -n "$main" ] && row="$row $ratios_main |"
        echo "$row"
        unset got
    done
done
