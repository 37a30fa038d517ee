#!/usr/bin/env bash
# Builds ik_llama.cpp's llama-bench once, for comparing toy with the fastest CPU engine
# (issue 38). Source: the `vendor/ik_llama.cpp` tree of the sdist ik-llama-cpp-python==0.1.5
# (sha256 checked). The sdist lacks common/cmake/build-info-gen-cpp.cmake, so
# common/build-info.cpp is written from its .in template first. Built with the AVX-512 flags
# (without them its IQK fast path is silently off) and GGML_IQK_FA_ALL_QUANTS=OFF; about 40
# minutes on 2 cores. Cached: prints the binary's path, building only when it is missing.
# Use it with `-rtr 1` (run-time repacking). Not part of CI.
# Usage: bench/build-ik-llama.sh      (JOBS=2)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly VERSION=0.1.5
readonly SDIST_SHA256=33c67eb99e4dcab5e611050433243815709b8b3067753f9ce18375013cf002ad
work=$root/target/ik-llama
src=$work/src
tree=$src/ik_llama_cpp_python-$VERSION/vendor/ik_llama.cpp
build=$work/build
bin=$build/bin/llama-bench
die() { echo "build-ik-llama: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$src"
if [ ! -f "$tree/CMakeLists.txt" ]; then
    python3 -m pip download --quiet --no-deps --no-binary ik-llama-cpp-python \
        "ik-llama-cpp-python==$VERSION" -d "$src" >&2
    sd=$src/ik_llama_cpp_python-$VERSION.tar.gz
    [ "$(sha256sum "$sd" | cut -d' ' -f1)" = "$SDIST_SHA256" ] || die "sha256 mismatch: $sd"
    tar -xzf "$sd" -C "$src"
fi
# the four @...@ fields of the template, as the missing cmake script would fill them
sed -e 's/@BUILD_NUMBER@/0/' -e "s/@BUILD_COMMIT@/ik-llama-cpp-python-$VERSION/" \
    -e "s/@BUILD_COMPILER@/$(cc --version | head -1 | tr -d '"')/" \
    -e "s/@BUILD_TARGET@/$(uname -m)-linux/" \
    "$tree/common/build-info.cpp.in" >"$tree/common/build-info.cpp"
command -v cmake >/dev/null || python3 -m pip install --quiet cmake >&2
log "configuring ik_llama.cpp (log: $work/build.log)"
cmake -S "$tree" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DGGML_NATIVE=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON \
    -DGGML_AVX512_BF16=ON -DGGML_IQK_FA_ALL_QUANTS=OFF >"$work/build.log" 2>&1 ||
    { tail -20 "$work/build.log" >&2; die "cmake failed"; }
log "building llama-bench (about 40 min on 2 cores)"
cmake --build "$build" --target llama-bench -j "${JOBS:-2}" >>"$work/build.log" 2>&1 ||
    { tail -20 "$work/build.log" >&2; die "building llama-bench failed"; }
[ -x "$bin" ] || die "no $bin after the build"
log "done: $bin"
echo "$bin"
