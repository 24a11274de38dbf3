#!/usr/bin/env bash
# The Triton backend (triton/, libtriton_tvm.so) in a real Triton server: the server from the
# nvidia-pytriton wheel (scripts/triton_server.sh), Triton's own clients (tritonclient, HTTP and
# gRPC) in a venv, then triton/tests/test_server.py; every address 127.0.0.1.
# The backend tested is the release archive's (TRITON_TVM_ARCHIVE, default: the x86_64 one
# scripts/build_wheels.sh left in dist/) when there is one, else this host's cargo build.
#   scripts/test_triton.sh [PYTEST ARGS]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
archive=${TRITON_TVM_ARCHIVE:-$(ls dist/triton-tvm-backend-*-linux-x86_64.tar.gz 2>/dev/null | tail -1 || true)}
if [ -n "$archive" ]; then
  rm -rf target/triton/backends && mkdir -p target/triton/backends
  tar -xzf "$archive" -C target/triton/backends
  backend=$repo/target/triton/backends/tvm/libtriton_tvm.so
  echo "== the backend of $(basename "$archive")"
else
  cargo build --release --quiet -p triton-tvm
  backend=$repo/target/release/libtriton_tvm.so
fi
# Captured first, so that a failed download stops the script (inside `eval "$(...)"` it would not).
server_vars=$(scripts/triton_server.sh)
eval "$server_vars"
py=$( (command -v pyenv >/dev/null && pyenv prefix 3.11 2>/dev/null | head -1) || true)
py=${py:+$py/bin/python3}
py=${py:-python3}
venv=target/triton/venv
if [ ! -x $venv/bin/python ] || [ ! -f $venv/.complete ]; then
  rm -rf $venv
  "$py" -m venv $venv
  $venv/bin/pip install -q --upgrade pip
  $venv/bin/pip install -q "tritonclient[http,grpc]" numpy pytest
  touch $venv/.complete
fi
echo "== tritonserver 2.51 (the nvidia-pytriton 0.7.0 wheel), tritonclient $($venv/bin/python -c 'import importlib.metadata as m; print(m.version("tritonclient"))')"
TRITON_TVM_BACKEND="$backend" \
  $venv/bin/python -m pytest -q -p no:cacheprovider triton/tests/test_server.py "$@"
