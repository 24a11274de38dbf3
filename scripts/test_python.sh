#!/usr/bin/env bash
# TVM 0.16's Python package (from the hhb-tvm wheel) on this project's libtvm_runtime.so: pytest.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
eval "$(scripts/tvm_env.sh)"
# The library, and tvmrt (its RPC server is driven by TVM's own clients).
cargo build --release --quiet
# A folder holding only our library, so Python cannot pick anything else up.
libdir="$repo/target/python-runtime"
mkdir -p "$libdir"
cp -f target/release/libtvm_runtime.so "$libdir/"
TVM_FFI=ctypes TVM_USE_RUNTIME_LIB=1 TVM_LIBRARY_PATH="$libdir" PYTHONPATH="$TVM_WHEEL_DIR" \
  TVM_UPSTREAM_RUNTIME="$TVM_UPSTREAM_RUNTIME" TVM_UPSTREAM_SHARED="${TVM_UPSTREAM_SHARED:-$repo/../shared/upstream}" \
  TVM_RT_CXX_RPC_SERVER="${TVM_RT_CXX_RPC_SERVER:-$repo/build/rpc_cxx_server}" \
  TVM_RT_TEST_PLUGIN="${TVM_RT_TEST_PLUGIN:-$repo/build/libtvmrt_test_plugin.so}" \
  "$TVM_PYTHON" -m pytest -q -p no:cacheprovider "$repo/tests/python" "$@"
# docs/extensions.md's AOT pair as written: build_aot.py with TVM's compiler, run_aot.py on this
# runtime through TVM's Python.
pair=$(mktemp -d)
python3 - "$repo/docs/extensions.md" "$pair" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
for name in ("build_aot.py", "run_aot.py"):
    body = re.search(r"\*\*`" + re.escape(name) + r"`\*\*\n```python\n(.*?)```", text, re.S).group(1)
    open(f"{sys.argv[2]}/{name}", "w").write(body)
PY
(cd "$pair" && TOPHUB_LOCATION=NONE TVM_FFI=ctypes PYTHONPATH="$TVM_WHEEL_DIR" "$TVM_PYTHON" build_aot.py)
(cd "$pair" && TVM_FFI=ctypes TVM_USE_RUNTIME_LIB=1 TVM_LIBRARY_PATH="$libdir" PYTHONPATH="$TVM_WHEEL_DIR" \
  "$TVM_PYTHON" run_aot.py) | tee "$pair/run.log"
grep -q "AOT outputs equal the graph executor's" "$pair/run.log"
rm -rf "$pair"
