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
# Environment: THREADS (2), REPS (5), N_PROMPT (512), N_GEN (128); WAIT_QUIET (600): before
# each benchmark, wait up to this many seconds for the CPUs to be under QUIET_BUSY (0.25) busy
# (0 = do not wait); RETRIES (2): rerun a benchmark up to this many times when other processes
# used QUIET_BUSY or more of the CPUs during it. Disturbed runs are flagged in the table/JSON.
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
WAIT_QUIET=${WAIT_QUIET:-600}
QUIET_BUSY=${QUIET_BUSY:-0.25}
RETRIES=${RETRIES:-2}

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

usage() { sed -n '2,/^set -euo/{/^set/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

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

# Fraction of all CPUs busy over the next 2 seconds (from /proc/stat), e.g. 0.07.
cpu_busy() {
  python3 - <<'PY'
import time
def snap():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(v), v[3] + v[4]  # total, idle + iowait
t0, i0 = snap(); time.sleep(2); t1, i1 = snap()
print(f"{1 - (i1 - i0) / max(t1 - t0, 1):.2f}")
PY
}

# measured OUT ERRLOG CMD...: run CMD (stdout to OUT, stderr to ERRLOG) and write to OUT.other
# the share of all CPUs that *other* processes used meanwhile (busy time from /proc/stat less
# CMD's own CPU time), so that a benchmark disturbed mid-run can be told from a clean one.
measured() {
  python3 - "$@" <<'PY'
import os, resource, subprocess, sys, time
out, err, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
def busy():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
b0, w0 = busy(), time.monotonic()
with open(out, "w") as o, open(err, "w") as e:
    rc = subprocess.call(cmd, stdout=o, stderr=e)
b1, w1 = busy(), time.monotonic()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
other = max(0.0, (b1 - b0) - (ru.ru_utime + ru.ru_stime)) / ((w1 - w0) * os.cpu_count())
with open(out + ".other", "w") as f:
    f.write(f"{other:.2f}\n")
sys.exit(rc)
PY
}

# Wait (up to WAIT_QUIET s) until the CPUs are quiet; prints the last busy fraction measured.
# Benchmarks of 2 threads on a 2-core machine shared with another job measure the other job.
wait_quiet() {
  local busy start=$SECONDS next=0
  busy=$(cpu_busy)
  while awk -v b="$busy" -v q="$QUIET_BUSY" 'BEGIN { exit !(b >= q) }'; do
    if [ $((SECONDS - start)) -ge "$WAIT_QUIET" ]; then
      warn "CPUs still $busy busy after waiting $(fmt_secs "$WAIT_QUIET"); benchmarking anyway (numbers will be skewed)"
      break
    fi
    if [ $((SECONDS - start)) -ge "$next" ]; then
      log "CPUs $busy busy (load avg $(loadavg)); waiting for them to quiet down (< $QUIET_BUSY, up to $(fmt_secs "$WAIT_QUIET"))"
      next=$((next + 60))
    fi
    sleep 3
    busy=$(cpu_busy)
  done
  echo "$busy"
}

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
    log "step 2: [$name] already built ($label, in $(fmt_secs "$(cat "$stamp")")); skipping"
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
  local threading="ggml threadpool (no OpenMP)"
  if grep -qs GGML_USE_OPENMP "$dir/ggml/src/CMakeFiles/ggml-cpu.dir/flags.make"; then
    threading="OpenMP"
  fi
  python3 - "$dir" "$name" "$label" "$cc" "$cxx" "$flags" "$secs" "$how" \
      "$($cc --version 2>/dev/null | head -n 1)" "$threading" <<'PY' >&2
import ctypes, glob, json, os, sys
d, name, label, cc, cxx, flags, secs, how, ccver, threading = sys.argv[1:]
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
        "build_seconds": int(secs), "build": how, "threading": threading, "cpu_features": feats}
json.dump(info, open(os.path.join(d, ".toy-bench-info.json"), "w"), indent=1)
shown = " | ".join(f"{k} = {v}" for k, v in feats.items()) or "unknown (libggml-cpu not found)"
print(f"    [{name}] ggml CPU backend compiled with: {shown}; threads: {threading}")
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

# bench_one KIND DESC OUT LOG CMD...: one benchmark, after waiting for quiet CPUs; when other
# processes used >= QUIET_BUSY of the CPUs during the run, run it again (up to RETRIES more
# times). Appends KIND=OUT to `files` on success. Never runs two benchmarks at once.
bench_one() {
  local kind=$1 desc=$2 out=$3 blog=$4 try other
  shift 4
  for ((try = 0; try <= RETRIES; try++)); do
    wait_quiet >"$out.busy"
    log "step 4: $desc (CPUs $(cat "$out.busy") busy before)"
    if ! measured "$out.part" "$blog" "$@"; then
      tail -n 20 "$blog" >&2
      rm -f "$out.part" "$out.part.other"
      warn "$desc FAILED (log: $blog)"
      return 0
    fi
    mv "$out.part" "$out"
    mv "$out.part.other" "$out.other"
    other=$(cat "$out.other")
    if awk -v b="$other" -v q="$QUIET_BUSY" 'BEGIN { exit !(b < q) }'; then
      break
    fi
    if [ "$try" -lt "$RETRIES" ]; then
      warn "other processes used $other of the CPUs during that run; running it again"
    else
      warn "other processes used $other of the CPUs during that run too; keeping it (skewed)"
    fi
  done
  files+=("$kind=$out")
}

bench_model() {
  local m=$1 base name label v
  base=$(basename "$m" .gguf)
  local files=()
  local args=(-m "$m" -p "$N_PROMPT" -n "$N_GEN" -r "$REPS")
  for v in "${variant_info[@]}"; do
    name=${v%%|*}
    label=${v#*|}
    bench_one "llama-$name" "[$base] llama-bench ($label): ${args[*]:2} -t $THREADS -o json" \
      "$runs/$base.llama-$name.json" "$logs/bench-$base.llama-$name.log" \
      "$work/build-$name/bin/llama-bench" "${args[@]}" -t "$THREADS" -o json
  done
  bench_one toy "[$base] toy -t $THREADS bench ${args[*]:2} --json" \
    "$runs/$base.toy.json" "$logs/bench-$base.toy.log" \
    "$toy" -t "$THREADS" bench "${args[@]}" --json
  report "$m" "$work/compare-$base.json" "${files[@]}"
}

# report MODEL OUT.json KIND=FILE... : print the table and write the JSON.
report() {
  python3 - "$work" "$THREADS" "$REPS" "$N_PROMPT" "$N_GEN" "$LLAMA_COMMIT" "$PY_VERSION" \
      "$(loadavg)" "$QUIET_BUSY" "$@" <<'PY'
import json, os, sys
work, threads, reps, npp, ntg, commit, pyver, load, quiet, model, out = sys.argv[1:12]
quiet = float(quiet)
npp, ntg = int(npp), int(ntg)
res = {"model": model, "threads": int(threads), "reps": int(reps),
       "llama_cpp": {"commit": commit, "source": f"llama-cpp-python=={pyver} sdist"},
       "load_avg_after": load, "quiet_threshold": quiet, "variants": {}, "tests": {}}
tests = {f"pp{npp}": None, f"tg{ntg}": None}
vals = {}  # kind -> test -> (mean, sd)
busy, other = {}, {}
def num(path):
    try:
        return float(open(path).read())
    except (OSError, ValueError):
        return None
for arg in sys.argv[12:]:
    kind, path = arg.split("=", 1)
    data = json.load(open(path))
    busy[kind], other[kind] = num(path + ".busy"), num(path + ".other")
    if kind == "toy":
        vals[kind] = {f"pp{npp}": (data["prefill_tok_s"]["mean"], data["prefill_tok_s"]["sd"]),
                      f"tg{ntg}": (data["decode_tok_s"]["mean"], data["decode_tok_s"]["sd"])}
        res["variants"]["toy"] = {"label": "toy", "peak_rss_mib": data.get("peak_rss_mib"),
                                  "kernels": data.get("kernels"), "cpu_busy_before": busy[kind],
                                  "other_cpu_during": other[kind]}
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
        info["cpu_busy_before"] = busy[kind]
        info["other_cpu_during"] = other[kind]
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
              f"{i.get('threading', '?')}, AMX_INT8 = {i.get('cpu_features', {}).get('AMX_INT8', '?')}")
hdr = f"{'test':<7} {'llama.cpp GCC':>18} {'llama.cpp clang':>18} {'toy':>18} {'toy/GCC':>8} {'toy/clang':>9}"
print(hdr)
print("-" * len(hdr))
for t, r in res["tests"].items():
    print(f"{t:<7} {cell(get('llama-gcc', t)):>18} {cell(get('llama-clang', t)):>18} "
          f"{cell(get('toy', t)):>18} {rcell(r['toy_over_gcc']):>8} {rcell(r['toy_over_clang']):>9}")
rss = res["variants"].get("toy", {}).get("peak_rss_mib")
if rss is not None:
    print(f"toy peak RSS {rss:.1f} MiB")
print("CPU share used by other processes during each run: "
      + ", ".join(f"{k} {'?' if v is None else f'{v:.2f}'}" for k, v in other.items()))
noisy = sorted({k for d in (busy, other) for k, b in d.items() if b is not None and b >= quiet})
if noisy:
    print(f"WARNING: other processes used >= {quiet} of the CPUs around: {', '.join(noisy)}; "
          "those numbers are skewed")
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
for m in "${models[@]}"; do
  bench_model "$m"
done
if [ "${#models[@]}" -gt 1 ]; then
  summary=()
  for m in "${models[@]}"; do
    summary+=("$work/compare-$(basename "$m" .gguf).json")
  done
  log "summary of ${#models[@]} models (tok/s; toy/GCC, toy/clang)"
  python3 - "${summary[@]}" <<'PY'
import json, os, sys
def f(x):
    return "n/a" if x is None else f"{x['mean']:.1f}"
def r(x):
    return "n/a" if x is None else f"{x:.2f}x"
rows = []
for path in sys.argv[1:]:
    if not os.path.exists(path):
        continue
    d = json.load(open(path))
    name = os.path.basename(d["model"])
    for t, v in d["tests"].items():
        rows.append((name, t, f(v["llama_gcc"]), f(v["llama_clang"]), f(v["toy"]),
                     r(v["toy_over_gcc"]), r(v["toy_over_clang"])))
w = max(len(x[0]) for x in rows) if rows else 5
print(f"{'model':<{w}} {'test':<6} {'GCC':>8} {'clang':>8} {'toy':>8} {'toy/GCC':>8} {'toy/clang':>9}")
for x in rows:
    print(f"{x[0]:<{w}} {x[1]:<6} {x[2]:>8} {x[3]:>8} {x[4]:>8} {x[5]:>8} {x[6]:>9}")
PY
fi
log "done"
