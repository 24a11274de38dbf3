#!/usr/bin/env bash
# bench/relax_pools.py with its interpreters: TVM 0.27's (scripts/make_relax_fixtures.sh's venv,
# which makes the model once) and one for the tvmrt package (its source, this checkout's library).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tvm_python=${TVM_PYTHON:-$repo/.tvm-cache/relax/venv027/bin/python}
[ -x "$tvm_python" ] || { echo "no TVM 0.27 venv: scripts/make_relax_fixtures.sh --only 0.27 makes it" >&2; exit 2; }
model=$repo/.tvm-cache/bench/relax_burst/model.so
[ -f "$model" ] || "$tvm_python" bench/relax_pools.py make "$model"
cargo build --release --quiet
libdir=$repo/target/python-runtime
mkdir -p "$libdir" && cp -f target/release/libtvm_runtime.so "$libdir/"
venv=target/bench-venv
[ -x $venv/bin/python ] || { python3 -m venv $venv && $venv/bin/pip install -q numpy; }
# The package from source on this checkout's library, as scripts/test_python.sh runs it.
PYTHONPATH=$repo/python TVMRT_TEST_SOURCE=1 "$tvm_python" bench/relax_pools.py "$tvm_python" \
  "$repo/$venv/bin/python" "$libdir" "$model"
