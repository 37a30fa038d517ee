#!/usr/bin/env bash
# Compare `toy bench` with llama.cpp's `llama-bench` (pp512 / tg128) on the same GGUF model.
#
# Usage: bench/compare-llama-cpp.sh [--types] [--force-amx] [MODEL.gguf]
#
#   MODEL        GGUF model (default models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched with
#                scripts/fetch-model.sh when missing).
#   --types      also quantize MODEL with `toy quantize` to Q8_0 Q4_0 Q4_K_M F16 (into
#                target/llama-cpp/models/) and compare each of those the same way.
#   --force-amx  build the clang variant with the AMX defines even when the CPU lacks AMX.
#
# llama.cpp is commit 0c1e570, as vendored in the sdist of llama-cpp-python==0.3.36 on PyPI.
# It is built twice (GCC and clang-14) into target/llama-cpp/build-{gcc,clang}; everything is
# cached under target/llama-cpp/, so a rerun skips the download and the builds and only
# measures again. Benchmarks run one at a time, never concurrently. Results:
# target/llama-cpp/compare-<model-basename>.json; raw outputs and logs: target/llama-cpp/runs/
# and target/llama-cpp/logs/. Not part of CI.
#
# Environment: THREADS (2), REPS (5), N_PROMPT (512), N_GEN (128).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

readonly PY_PKG=llama-cpp-python
readonly PY_VERSION=0.3.36
readonly SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
readonly LLAMA_COMMIT=0c1e570
readonly DEFAULT_MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
readonly QUANT_TYPES=(Q8_0 Q4_0 Q4_K_M F16)
readonly GCC_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
readonly CLANG_AMX_FLAGS="-D__AMX_TILE__ -D__AMX_INT8__ -D__AMX_BF16__"
THREADS=${THREADS:-2}
REPS=${REPS:-5}
N_PROMPT=${N_PROMPT:-512}
N_GEN=${N_GEN:-128}

work="$root/target/llama-cpp"
sdist_dir="$work/src"
src_root="$sdist_dir/llama_cpp_python-$PY_VERSION"
llama_src="$src_root/vendor/llama.cpp"
logs="$work/logs"
runs="$work/runs"
toy="$root/target/release/toy"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
warn() { log "WARNING: $*"; }
die() { log "ERROR: $*"; exit 1; }

usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

do_types=0
force_amx=0
model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --types) do_types=1 ;;
    --force-amx) force_amx=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option '$1'" ;;
    *) [ -z "$model" ] || die "only one model may be given (got '$model' and '$1')"; model=$1 ;;
  esac
  shift
done
model=${model:-$DEFAULT_MODEL}

mkdir -p "$work" "$logs" "$runs"

# ---------------------------------------------------------------------------------------------
# Helpers

# Run as root, or through sudo when that is available.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else return 1
  fi
}

# apt-get install, running apt-get update first only when the first try fails.
apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  log "apt-get install -y $* (log: $logs/apt.log)"
  if as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >>"$logs/apt.log" 2>&1; then
    return 0
  fi
  log "apt-get install failed; running apt-get update and retrying"
  as_root apt-get update >>"$logs/apt.log" 2>&1 || return 1
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >>"$logs/apt.log" 2>&1
}

# Seconds as "Xm Ys".
fmt_secs() { printf '%dm %02ds' "$(($1 / 60))" "$(($1 % 60))"; }

loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?"; }

# ---------------------------------------------------------------------------------------------
# Step 1: llama.cpp sources from the llama-cpp-python sdist

fetch_llama() {
  local sdist="$sdist_dir/llama_cpp_python-$PY_VERSION.tar.gz"
  if [ -f "$src_root/.unpacked" ] && [ -f "$llama_src/CMakeLists.txt" ]; then
    log "step 1: llama.cpp sources present: $llama_src"
    return
  fi
  mkdir -p "$sdist_dir"
  if [ ! -f "$sdist" ] || [ "$(sha256sum "$sdist" | cut -d' ' -f1)" != "$SDIST_SHA256" ]; then
    rm -f "$sdist"
    log "step 1: downloading the $PY_PKG==$PY_VERSION sdist from PyPI"
    # --no-binary for this one package only: `--no-binary :all:` would also refuse wheels for
    # the build backend's own requirements (cmake, ninja), and pip would then compile cmake
    # from source (tens of minutes on 2 cores) just to read the package's metadata.
    python3 -m pip download --quiet --no-deps --no-binary "$PY_PKG" \
      "$PY_PKG==$PY_VERSION" -d "$sdist_dir" >"$logs/pip-download.log" 2>&1 ||
      { tail -n 20 "$logs/pip-download.log" >&2; die "pip download failed (log: $logs/pip-download.log)"; }
    [ -f "$sdist" ] || die "pip download did not produce $sdist"
    local got
    got=$(sha256sum "$sdist" | cut -d' ' -f1)
    [ "$got" = "$SDIST_SHA256" ] || die "sha256 mismatch for $sdist: got $got, expected $SDIST_SHA256"
  fi
  log "step 1: unpacking $sdist"
  rm -rf "$src_root"
  tar -xzf "$sdist" -C "$sdist_dir"
  [ -f "$llama_src/CMakeLists.txt" ] || die "no vendor/llama.cpp in $sdist"
  touch "$src_root/.unpacked"
}

check_commit() {
  if grep -q "llama.cpp@$LLAMA_COMMIT" "$src_root/CHANGELOG.md" 2>/dev/null; then
    log "llama.cpp commit: $(grep -o "llama.cpp@${LLAMA_COMMIT}[0-9a-f]*" "$src_root/CHANGELOG.md" | head -n 1) (from the sdist's CHANGELOG.md)"
  else
    warn "the sdist's CHANGELOG.md does not mention llama.cpp@$LLAMA_COMMIT"
  fi
}

# ---------------------------------------------------------------------------------------------
# Step 2: tools and builds

ensure_cmake() {
  if command -v cmake >/dev/null 2>&1; then
    log "cmake: $(cmake --version | head -n 1)"
    return
  fi
  log "cmake not found; installing it"
  apt_install cmake || python3 -m pip install --quiet cmake >>"$logs/pip-cmake.log" 2>&1 ||
    die "cannot install cmake (tried apt-get and pip)"
  hash -r
  command -v cmake >/dev/null 2>&1 || die "cmake still not on PATH after installing it"
  log "cmake: $(cmake --version | head -n 1)"
}

# Returns 0 when clang-14/clang++-14 are (now) available.
ensure_clang14() {
  if command -v clang-14 >/dev/null 2>&1 && command -v clang++-14 >/dev/null 2>&1; then
    return 0
  fi
  log "clang-14 not found; installing it"
  apt_install clang-14 || return 1
  hash -r
  command -v clang-14 >/dev/null 2>&1 && command -v clang++-14 >/dev/null 2>&1
}

# Variant metadata for the report, written next to each build: label, compilers, flags,
# build time, and what ggml's CPU backend says it was compiled with.
variant_info=()  # "name|label" pairs of variants that built

# build_llama NAME LABEL CC CXX FLAGS -> 0 when build-NAME/bin/llama-bench is ready.
build_llama() {
  local name=$1 label=$2 cc=$3 cxx=$4 flags=$5
  local dir="$work/build-$name"
  local config stamp="$dir/.toy-bench-built" cfgfile="$dir/.toy-bench-config"
  config="src=$PY_PKG-$PY_VERSION cc=$cc cxx=$cxx flags=$flags"
  if [ -f "$stamp" ] && [ -x "$dir/bin/llama-bench" ] && [ "$(cat "$cfgfile" 2>/dev/null)" = "$config" ]; then
    log "step 2: [$name] already built ($label, $(cat "$stamp")); skipping"
    write_info "$name" "$label" "$cc" "$cxx" "$flags" "$(cat "$stamp")" cached
    return 0
  fi
  if [ -f "$cfgfile" ] && [ "$(cat "$cfgfile")" != "$config" ]; then
    log "step 2: [$name] configuration changed; starting that build afresh"
    rm -rf "$dir"
  fi
  mkdir -p "$dir"
  printf '%s' "$config" >"$cfgfile"
  rm -f "$stamp"
  local blog="$logs/build-$name.log" start=$SECONDS
  log "step 2: [$name] configuring llama.cpp ($label: $cc / $cxx, flags '${flags}'); log: $blog"
  if ! cmake -S "$llama_src" -B "$dir" \
      -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" >"$blog" 2>&1; then
    tail -n 30 "$blog" >&2
    log "step 2: [$name] cmake configure FAILED (log: $blog)"
    return 1
  fi
  grep -E "OpenMP|GGML_NATIVE|x86 detected|Adding CPU backend" "$blog" | sed "s/^/    [$name] /" >&2 || true
  log "step 2: [$name] building llama-bench (-j2; several minutes on 2 cores)"
  if ! cmake --build "$dir" --config Release --target llama-bench -j2 >>"$blog" 2>&1; then
    grep -E "error|Error" "$blog" | head -n 20 >&2 || true
    log "step 2: [$name] build FAILED after $(fmt_secs $((SECONDS - start))) (log: $blog)"
    return 1
  fi
  local secs=$((SECONDS - start))
  printf '%s' "$secs" >"$stamp"
  log "step 2: [$name] built in $(fmt_secs "$secs")"
  write_info "$name" "$label" "$cc" "$cxx" "$flags" "$secs" fresh
}

write_info() {
  local name=$1 label=$2 cc=$3 cxx=$4 flags=$5 secs=$6 how=$7
  local dir="$work/build-$name"
  "$dir/bin/llama-bench" --help >"$logs/llama-bench-help-$name.txt" 2>&1 ||
    warn "[$name] llama-bench --help exited non-zero"
  log "[$name] llama-bench --help: $(head -n 1 "$logs/llama-bench-help-$name.txt")"
  python3 - "$dir" "$name" "$label" "$cc" "$cxx" "$flags" "$secs" "$how" \
      "$($cc --version 2>/dev/null | head -n 1)" <<'PY' >&2
import ctypes, glob, json, os, sys
d, name, label, cc, cxx, flags, secs, how, ccver = sys.argv[1:]
# ggml's CPU backend reports the ISA it was compiled for (ggml_cpu_has_*), the same values as
# llama.cpp's system info line ("AVX512 = 1 | ... | AMX_INT8 = 1").
feats = {}
libs = sorted(glob.glob(os.path.join(d, "bin", "libggml-cpu*.so")))
if libs:
    try:
        lib = ctypes.CDLL(libs[0])
        for f in ["avx2", "avx512", "avx512_vbmi", "avx512_vnni", "avx512_bf16", "amx_int8", "llamafile"]:
            fn = getattr(lib, "ggml_cpu_has_" + f, None)
            if fn is not None:
                feats[f.upper()] = int(fn())
    except OSError as e:
        print(f"    [{name}] cannot load {libs[0]}: {e}", file=sys.stderr)
info = {"name": name, "label": label, "cc": cc, "cxx": cxx, "compiler": ccver, "flags": flags,
        "build_seconds": int(secs), "build": how, "cpu_features": feats}
json.dump(info, open(os.path.join(d, ".toy-bench-info.json"), "w"), indent=1)
shown = " | ".join(f"{k} = {v}" for k, v in feats.items()) or "unknown (libggml-cpu not found)"
print(f"    [{name}] ggml CPU backend compiled with: {shown}")
amx = feats.get("AMX_INT8")
print(f"    [{name}] AMX_INT8 = {amx if amx is not None else '?'}"
      + (" (AMX kernels compiled in)" if amx == 1 else " (no AMX kernels)"))
PY
  variant_info+=("$name|$label")
}

build_all() {
  ensure_cmake
  if ! command -v gcc >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
    die "gcc/g++ not found"
  fi

  build_llama gcc "GCC $(gcc -dumpversion)" gcc g++ "$GCC_FLAGS" ||
    die "the GCC build of llama-bench failed"

  if ! ensure_clang14; then
    warn "clang-14 is not available (apt-get install clang-14 failed); no clang column"
    return
  fi
  local cpu_amx=0
  grep -qw amx_int8 /proc/cpuinfo && cpu_amx=1
  log "CPU AMX flags: $(grep -o 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)"
  if [ "$cpu_amx" = 1 ] || [ "$force_amx" = 1 ]; then
    local label="clang 14 (AMX defines)"
    [ "$cpu_amx" = 1 ] || label="clang 14 (AMX defines, forced; CPU lacks AMX)"
    if build_llama clang "$label" clang-14 clang++-14 "$CLANG_AMX_FLAGS"; then
      return
    fi
    warn "the clang build WITH the AMX defines failed to compile; building clang without them"
    build_llama clang "clang 14 (no AMX: AMX build failed)" clang-14 clang++-14 "" ||
      warn "the clang build failed too; no clang column"
  else
    log "this CPU has no amx_int8: building the clang variant without the AMX defines"
    build_llama clang "clang (no AMX: CPU lacks it)" clang-14 clang++-14 "" ||
      warn "the clang build failed; no clang column"
  fi
}

# ---------------------------------------------------------------------------------------------
# Step 3: toy, models, benchmarks

build_toy() {
  log "step 3: cargo build --release --bin toy (log: $logs/cargo-build.log; waits if another cargo holds the lock)"
  cargo build --release --bin toy >"$logs/cargo-build.log" 2>&1 ||
    { tail -n 30 "$logs/cargo-build.log" >&2; die "cargo build failed"; }
  [ -x "$toy" ] || die "no $toy after cargo build"
}

prepare_models() {
  if [ ! -f "$model" ]; then
    if [ "$model" = "$DEFAULT_MODEL" ]; then
      log "default model missing: running scripts/fetch-model.sh"
      bash scripts/fetch-model.sh >&2
    else
      die "model not found: $model"
    fi
  fi
  models=("$model")
  if [ "$do_types" = 1 ]; then
    mkdir -p "$work/models"
    local base t out
    base=$(basename "$model" .gguf)
    for t in "${QUANT_TYPES[@]}"; do
      out="$work/models/$base.to-$t.gguf"
      if [ -f "$out" ] && [ "$out" -nt "$model" ] && [ "$out" -nt "$toy" ]; then
        log "step 3: $out present; skipping quantize"
      else
        log "step 3: toy quantize $model -> $out --type $t"
        "$toy" quantize "$model" "$out" --type "$t" >&2 || die "toy quantize --type $t failed"
      fi
      models+=("$out")
    done
  fi
}

# One benchmark at a time: each call waits for its process to finish.
bench_model() {
  local m=$1 base name label out v
  base=$(basename "$m" .gguf)
  local files=()
  for v in "${variant_info[@]}"; do
    name=${v%%|*}
    label=${v#*|}
    out="$runs/$base.llama-$name.json"
    log "step 4: [$base] llama-bench ($label): -p $N_PROMPT -n $N_GEN -t $THREADS -r $REPS (load avg $(loadavg))"
    if "$work/build-$name/bin/llama-bench" -m "$m" -p "$N_PROMPT" -n "$N_GEN" -t "$THREADS" \
        -r "$REPS" -o json >"$out.part" 2>"$logs/bench-$base.llama-$name.log"; then
      mv "$out.part" "$out"
      files+=("llama-$name=$out")
    else
      tail -n 20 "$logs/bench-$base.llama-$name.log" >&2
      rm -f "$out.part"
      warn "[$base] llama-bench ($name) failed (log: $logs/bench-$base.llama-$name.log)"
    fi
  done
  out="$runs/$base.toy.json"
  log "step 4: [$base] toy bench: -t $THREADS -p $N_PROMPT -n $N_GEN -r $REPS (load avg $(loadavg))"
  if "$toy" -t "$THREADS" bench -m "$m" -p "$N_PROMPT" -n "$N_GEN" -r "$REPS" --json \
      >"$out.part" 2>"$logs/bench-$base.toy.log"; then
    mv "$out.part" "$out"
    files+=("toy=$out")
  else
    tail -n 20 "$logs/bench-$base.toy.log" >&2
    rm -f "$out.part"
    warn "[$base] toy bench failed (log: $logs/bench-$base.toy.log)"
  fi
  report "$m" "$work/compare-$base.json" "${files[@]}"
}

# report MODEL OUT.json KIND=FILE... : print the table and write the JSON.
report() {
  python3 - "$work" "$THREADS" "$REPS" "$N_PROMPT" "$N_GEN" "$LLAMA_COMMIT" "$PY_VERSION" \
      "$(loadavg)" "$@" <<'PY'
import json, os, sys
work, threads, reps, npp, ntg, commit, pyver, load, model, out = sys.argv[1:11]
npp, ntg = int(npp), int(ntg)
res = {"model": model, "threads": int(threads), "reps": int(reps),
       "llama_cpp": {"commit": commit, "source": f"llama-cpp-python=={pyver} sdist"},
       "load_avg_after": load, "variants": {}, "tests": {}}
tests = {f"pp{npp}": None, f"tg{ntg}": None}
vals = {}  # kind -> test -> (mean, sd)
for arg in sys.argv[11:]:
    kind, path = arg.split("=", 1)
    data = json.load(open(path))
    if kind == "toy":
        vals[kind] = {f"pp{npp}": (data["prefill_tok_s"]["mean"], data["prefill_tok_s"]["sd"]),
                      f"tg{ntg}": (data["decode_tok_s"]["mean"], data["decode_tok_s"]["sd"])}
        res["variants"]["toy"] = {"label": "toy", "peak_rss_mib": data.get("peak_rss_mib"),
                                  "kernels": data.get("kernels")}
    else:
        name = kind.split("-", 1)[1]
        v = {}
        for r in data:
            if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
                v[f"pp{r['n_prompt']}"] = (r["avg_ts"], r["stddev_ts"])
            elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
                v[f"tg{r['n_gen']}"] = (r["avg_ts"], r["stddev_ts"])
        vals[kind] = v
        info_path = os.path.join(work, f"build-{name}", ".toy-bench-info.json")
        info = json.load(open(info_path)) if os.path.exists(info_path) else {}
        info["cpu_info"] = data[0].get("cpu_info") if data else None
        info["build_commit"] = data[0].get("build_commit") if data else None
        res["variants"][kind] = info

def get(kind, t):
    return vals.get(kind, {}).get(t)

def ratio(a, b):
    return a[0] / b[0] if a and b and b[0] > 0 else None

for t in tests:
    toy, gcc, clang = get("toy", t), get("llama-gcc", t), get("llama-clang", t)
    res["tests"][t] = {
        "llama_gcc": None if gcc is None else {"mean": gcc[0], "sd": gcc[1]},
        "llama_clang": None if clang is None else {"mean": clang[0], "sd": clang[1]},
        "toy": None if toy is None else {"mean": toy[0], "sd": toy[1]},
        "toy_over_gcc": ratio(toy, gcc), "toy_over_clang": ratio(toy, clang),
    }
tmp = out + ".part"
with open(tmp, "w") as f:
    json.dump(res, f, indent=1)
os.replace(tmp, out)

def cell(x):
    return "n/a" if x is None else f"{x[0]:9.1f} ± {x[1]:6.1f}"

def rcell(x):
    return "n/a" if x is None else f"{x:.2f}x"

print()
print(f"model {os.path.basename(model)}  threads {threads}  reps {reps}  "
      f"(llama.cpp {commit}; tok/s mean ± sd)")
for kind in ("llama-gcc", "llama-clang"):
    if kind in res["variants"]:
        i = res["variants"][kind]
        print(f"  {kind}: {i.get('label', '?')}: {i.get('compiler', '?')}, "
              f"AMX_INT8 = {i.get('cpu_features', {}).get('AMX_INT8', '?')}")
hdr = f"{'test':<7} {'llama.cpp GCC':>18} {'llama.cpp clang':>18} {'toy':>18} {'toy/GCC':>8} {'toy/clang':>9}"
print(hdr)
print("-" * len(hdr))
for t, r in res["tests"].items():
    print(f"{t:<7} {cell(get('llama-gcc', t)):>18} {cell(get('llama-clang', t)):>18} "
          f"{cell(get('toy', t)):>18} {rcell(r['toy_over_gcc']):>8} {rcell(r['toy_over_clang']):>9}")
rss = res["variants"].get("toy", {}).get("peak_rss_mib")
if rss is not None:
    print(f"toy peak RSS {rss:.1f} MiB")
print(f"results: {out}")
PY
}

# ---------------------------------------------------------------------------------------------

log "compare toy with llama.cpp $LLAMA_COMMIT: model $model, threads $THREADS, reps $REPS"
command -v python3 >/dev/null 2>&1 || die "python3 is required"
fetch_llama
check_commit
build_all
build_toy
prepare_models
log "load average before benchmarking: $(loadavg) (another busy process skews the numbers)"
for m in "${models[@]}"; do
  bench_model "$m"
done
if [ "${#models[@]}" -gt 1 ]; then
  log "summary: one JSON per model in $work/compare-*.json"
fi
log "done"
