#!/usr/bin/env bash
# TVM 0.19's Python package (xtc-tvm-python-bindings 0.19.0.12, runtime only) on this project's
# libtvm_runtime.so, running TVM 0.19's Relax executables: tests/python_relax (pytest). The package
# runs from scripts/make_relax_fixtures.sh's venv when there is one, else from a venv of its own
# without the compiler's LLVM (.tvm-cache/relax/venv019-runtime: about 130 MB downloaded).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cache=${TVM_HOME_DIR:-$repo/.tvm-cache}/relax
venv=$cache/venv019
if [ ! -f "$venv/.complete" ]; then
  venv=$cache/venv019-runtime
fi
if [ ! -f "$venv/.complete" ]; then
  python=$(pyenv prefix 3.11 2>/dev/null || true)/bin/python
  [ -x "$python" ] || python=python3.11
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q "xtc-tvm-python-bindings==0.19.0.12" pytest
  touch "$venv/.complete"
fi
"$venv/bin/python" -c "import pytest" 2>/dev/null || "$venv/bin/pip" install -q pytest
cargo build --release --quiet
libdir="$repo/target/python-runtime"
mkdir -p "$libdir"
cp -f target/release/libtvm_runtime.so "$libdir/"
TVM_FFI=ctypes TVM_USE_RUNTIME_LIB=1 TVM_LIBRARY_PATH="$libdir" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "$repo/tests/python_relax" "$@"
