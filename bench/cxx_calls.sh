#!/usr/bin/env bash
# C++ hosts: per-call cost of this runtime against upstream's own v0.16 build, alternated.
#   bench/cxx_calls.sh [ROUNDS]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-2}
eval "$(scripts/tvm_env.sh --no-venv)"
upstream=${TVM_UPSTREAM_SHARED:-$repo/../shared/upstream}
cargo build --release --quiet --lib
mkdir -p target/bench
dmlc=$(dirname "$TVM_UPSTREAM_INCLUDE")/dmlc-core/include
c++ -std=c++17 -O2 -DDMLC_USE_LOGGING_LIBRARY='<tvm/runtime/logging.h>' -I"$TVM_UPSTREAM_INCLUDE" \
  -I"$TVM_DLPACK_INCLUDE" -I"$dmlc" bench/cxx_calls.cc -o target/bench/cxx_calls -Ltarget/release -ltvm_runtime
for _ in $(seq "$rounds"); do
  echo "ours:     $(TVM_NUM_THREADS=1 LD_LIBRARY_PATH=target/release target/bench/cxx_calls tests/fixtures/mlp_b1 | tail -1)"
  echo "upstream: $(TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$upstream target/bench/cxx_calls tests/fixtures/mlp_b1 | tail -1)"
done
