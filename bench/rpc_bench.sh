#!/usr/bin/env bash
# RPC over loopback against upstream's runtime: servers (tvmrt rpc-server, TVM's Python server on
# each library) under one client, and clients (TVM's Python on each library) against one server:
# a call's round trip, 100 MB each way, a remote time_evaluator.    bench/rpc_bench.sh [ROUNDS]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
eval "$(scripts/tvm_env.sh)"
cargo build --release --quiet
mkdir -p target/python-runtime
cp -f target/release/libtvm_runtime.so target/python-runtime/
export TVM_UPSTREAM_SHARED="${TVM_UPSTREAM_SHARED:-$repo/../shared/upstream}"
TVM_FFI=ctypes PYTHONPATH="$TVM_WHEEL_DIR" "$TVM_PYTHON" bench/rpc_bench.py "${1:-5}"
