#!/usr/bin/env bash
# Data-parallel training over MPI: installs OpenMPI (and libclang, which the mpi crate's
# bindings are generated with) from Debian when missing, builds toy with `--features mpi`,
# and runs crates/cli/tests/mpi.rs: `mpirun -np 2` equals one process bit for bit (train and
# LoRA fine-tune), resume across world sizes, TCP against shared memory, a dead rank, bad
# starts. Run last by scripts/test.sh: it leaves target/release/toy built with MPI.
set -euo pipefail
cd "$(dirname "$0")/.."
have() {
  command -v mpirun >/dev/null && command -v mpicc >/dev/null &&
    ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1
}
if ! have; then
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -q openmpi-bin libopenmpi-dev libclang-dev >/dev/null ||
    { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q openmpi-bin libopenmpi-dev libclang-dev >/dev/null; }
fi
# OpenMPI refuses root unless told; CI machines run the tests as root
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo test --release -p toy-cli --features mpi --test mpi
