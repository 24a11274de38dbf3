#!/usr/bin/env bash
# bench/relax_memory.py with its interpreters: TVM 0.27's (scripts/make_relax_fixtures.sh's venv,
# which has the compiler that makes the 64 MB model once) and one for the tvmrt package (its
# source, this checkout's library). Another benchmark of the same sides runs through it too:
#   bench/relax_memory.sh [SCRIPT MODEL]   (default: relax_memory.py relax_64mb; bench/relax_pools.sh
#                                           passes relax_pools.py relax_burst)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
script=bench/${1:-relax_memory.py}
tvm_python=${TVM_PYTHON:-$repo/.tvm-cache/relax/venv027/bin/python}
[ -x "$tvm_python" ] || { echo "no TVM 0.27 venv: scripts/make_relax_fixtures.sh --only 0.27 makes it" >&2; exit 2; }
model=$repo/.tvm-cache/bench/${2:-relax_64mb}/model.so
[ -f "$model" ] || "$tvm_python" "$script" make "$model"
cargo build --release --quiet
libdir=$repo/target/python-runtime
mkdir -p "$libdir" && cp -f target/release/libtvm_runtime.so "$libdir/"
venv=target/bench-venv
[ -x $venv/bin/python ] || { python3 -m venv $venv && $venv/bin/pip install -q numpy; }
# The package from source on this checkout's library, as scripts/test_python.sh runs it.
PYTHONPATH=$repo/python TVMRT_TEST_SOURCE=1 "$tvm_python" "$script" "$tvm_python" \
  "$repo/$venv/bin/python" "$libdir" "$model"
