#!/usr/bin/env bash
# Fetches TVM 0.16 (the hhb-tvm wheel: compiler, upstream runtime, headers) and a Python venv able to
# run it. Idempotent; prints the variables to eval:  eval "$(scripts/tvm_env.sh)"
# Location: $TVM_HOME_DIR (default: .tvm-cache in the repo, git-ignored).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${TVM_HOME_DIR:-$repo/.tvm-cache}
mkdir -p "$dir"
if [ ! -f "$dir/unz/tvm/libtvm_runtime.so" ]; then
  echo "fetching hhb-tvm==3.2.3 into $dir" >&2
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.8 \
    --platform manylinux1_x86_64 hhb-tvm==3.2.3 -d "$dir/wheel" >&2
  rm -rf "$dir/unz.tmp"
  python3 -c "import sys, zipfile, glob; zipfile.ZipFile(glob.glob(sys.argv[1] + '/*.whl')[0]).extractall(sys.argv[2])" \
    "$dir/wheel" "$dir/unz.tmp"
  mv "$dir/unz.tmp" "$dir/unz"
fi
# Upstream's JSON runtime (src/runtime/contrib/json: JSONRuntimeBase, the base of every BYOC JSON
# backend), which only TVM's source tree carries: the two headers, from the TVM 0.19 wheel
# (xtc-tvm-python-bindings, 47 MB, downloaded once and dropped), for the JSON plug-in test.
if [ ! -f "$dir/json-runtime/json_runtime.h" ]; then
  echo "fetching upstream's JSON runtime headers into $dir/json-runtime" >&2
  rm -rf "$dir/json-wheel"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 xtc-tvm-python-bindings==0.19.0.12 -d "$dir/json-wheel" >&2
  python3 - "$dir/json-wheel" "$dir/json-runtime" <<'PY'
import glob, os, sys, zipfile
os.makedirs(sys.argv[2], exist_ok=True)
z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0])
for n in z.namelist():
    if "/src/runtime/contrib/json/" in n and n.endswith(".h"):
        with open(os.path.join(sys.argv[2], os.path.basename(n)), "wb") as f:
            f.write(z.read(n))
PY
  rm -rf "$dir/json-wheel"
fi
# --no-venv: only the runtime and headers are needed (tests), not the compiler's Python deps.
if [ "${1:-}" != "--no-venv" ] && { [ ! -x "$dir/venv/bin/python" ] || [ ! -f "$dir/venv/.complete" ]; }; then
  echo "creating the Python venv in $dir/venv" >&2
  python3 -m venv "$dir/venv"
  deps=("numpy<2" decorator attrs psutil typing_extensions cloudpickle tornado scipy tqdm tflite pytest)
  # Once more without pip's cache when a download fails (a truncated or damaged cached wheel fails
  # its hash check; a registry's hiccup passes on the second try).
  "$dir/venv/bin/pip" install -q "${deps[@]}" >&2 || "$dir/venv/bin/pip" install -q --no-cache-dir "${deps[@]}" >&2
  touch "$dir/venv/.complete"
fi
echo "export TVM_WHEEL_DIR='$dir/unz'"
echo "export TVM_PYTHON='$dir/venv/bin/python'"
echo "export TVM_UPSTREAM_RUNTIME='$dir/unz/tvm/libtvm_runtime.so'"
echo "export TVM_UPSTREAM_INCLUDE='$dir/unz/tvm/include'"
echo "export TVM_DLPACK_INCLUDE='$dir/unz/tvm/dlpack/include'"
echo "export TVM_DMLC_INCLUDE='$dir/unz/tvm/dmlc-core/include'"
echo "export TVM_JSON_RUNTIME_INCLUDE='$dir/json-runtime'"
