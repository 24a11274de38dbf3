#!/usr/bin/env bash
# Mutation tests of the core that plans memory, reads the formats and what a hostile RPC client
# sends (handshakes, archives, paths): cargo-mutants changes one
# thing at a time in these files (a condition, an operator, a return value) and runs the tests that
# cover them; a mutant the tests do not catch is a gap, or an equivalent change to argue for in
# writing. Slow (each mutant rebuilds): run it when the planner changes, not in the test script.
# usage: scripts/mutants.sh [FILE...]   (default: the planner and format files below)
# Results: mutants.out/ (caught.txt, missed.txt, timeout.txt, unviable.txt).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
command -v cargo-mutants >/dev/null || cargo install --locked cargo-mutants
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(src/executor/layout.rs src/memory_plan.rs src/tensor/weight.rs src/params.rs src/graph.rs
  src/executor/fold.rs src/executor/instance/*.rs src/device/memory.rs src/prepared_params.rs src/digest.rs
  src/device/opencl/programs.rs src/device/opencl/program_cache.rs src/executor/pool.rs src/device/texture.rs
  src/device/opencl/images.rs src/rpc/handshake.rs src/rpc/tar.rs src/files/beneath.rs
  src/object/native.rs src/host_memory.rs)
# The Triton backend's safe core is a crate of its own, with its own tests (the unit tests and
# triton/tests/core.rs on the fixtures; about 10 s a mutant, the runtime unchanged):
#   cargo mutants --no-shuffle -j 1 -p triton-tvm --file triton/src/batch.rs --file triton/src/request.rs \
#     --file triton/src/config.rs --file triton/src/instance.rs -- -p triton-tvm
# Not in the list: src/rpc/workdir.rs, which only the tool's RPC server tests reach (a server
# process per test, 40 s a mutant):
#   cargo mutants --no-shuffle -j 1 --file src/rpc/workdir.rs -- -p tvmrt --test rpc_server --lib
args=()
for f in "${files[@]}"; do args+=(--file "$f"); done
# The tests that cover these files (the Rust suites; the C and Python suites add little here and
# would multiply the time per mutant). The OpenCL ones need a device (pocl).
cargo mutants --no-shuffle -j 1 --features fuzzing "${args[@]}" -- \
  --lib --test layout_oracle --test folding --test sharing --test errors --test header --test fuzz --test models \
  --test fold_cache --test mapped --test opencl --test opencl_memory --test opencl_devices --test opencl_programs \
  --test arena_pool --test opencl_textures --test rpc
