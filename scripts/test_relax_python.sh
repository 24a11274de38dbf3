#!/usr/bin/env bash
# TVM's own Python packages (runtime only) on this project's libtvm_runtime.so, each running the
# Relax executables its version made (tests/fixtures/relax/<version>), byte-equal:
#  - TVM 0.19 (xtc-tvm-python-bindings 0.19.0.12): the classic ABI, tests/python_relax;
#  - TVM 0.25, 0.26, 0.27 (apache-tvm) on upstream's libtvm_ffi.so from the apache-tvm-ffi wheel
#    pip resolves for them (0.25 pinned to 0.1.12: its own Python registers a class tvm-ffi 0.1.15
#    already has, whatever the runtime), tests/python_relax_ffi; and a C++ host built against
#    that wheel's headers, c_tests/test_relax_tvm_ffi.cc, under valgrind when it is installed;
#  - that C++ host on every apache-tvm-ffi 0.1.x release (scripts/tvm_ffi_versions.sh, 2 MB each).
# Each package runs from scripts/make_relax_fixtures.sh's venv when there is one, else from a venv
# of its own (.tvm-cache/relax/venv0XX-runtime: about 130 MB downloaded for 0.19, 110 MB for each
# of the others). Arguments go to every pytest run (-x, -k ...).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cache=${TVM_HOME_DIR:-$repo/.tvm-cache}/relax

# venv_for <tag> <pip requirement...>: the fixture venv of that version, or a runtime one.
venv_for() {
  local tag=$1
  shift
  local venv=$cache/venv$tag
  if [ ! -f "$venv/.complete" ]; then
    venv=$cache/venv$tag-runtime
  fi
  if [ ! -f "$venv/.complete" ]; then
    local python
    python=$(pyenv prefix 3.11 2>/dev/null || true)/bin/python
    [ -x "$python" ] || python=python3.11
    rm -rf "$venv"
    mkdir -p "$cache"
    "$python" -m venv "$venv" >&2
    "$venv/bin/pip" install -q "$@" pytest >&2
    touch "$venv/.complete"
  fi
  "$venv/bin/python" -c "import pytest" 2>/dev/null || "$venv/bin/pip" install -q pytest >&2
  echo "$venv"
}

cargo build --release --quiet
libdir="$repo/target/python-runtime"
mkdir -p "$libdir"
cp -f target/release/libtvm_runtime.so "$libdir/"

venv=$(venv_for 019 "xtc-tvm-python-bindings==0.19.0.12")
echo "== TVM 0.19's Python ($venv)"
TVM_FFI=ctypes TVM_USE_RUNTIME_LIB=1 TVM_LIBRARY_PATH="$libdir" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "$repo/tests/python_relax" "$@"

for version in 0.25.0.post1 0.26.0 0.27.0.post1; do
  tag=0$(echo "$version" | cut -d. -f2)
  pin=""
  [ "$tag" = 025 ] && pin="apache-tvm-ffi==0.1.12"
  venv=$(venv_for "$tag" "apache-tvm==$version" $pin)
  ffi=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('apache-tvm-ffi'))")
  echo "== TVM $version's Python on apache-tvm-ffi $ffi ($venv)"
  TVM_USE_RUNTIME_LIB=1 TVM_LIBRARY_PATH="$libdir" \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "$repo/tests/python_relax_ffi" "$@"
  # The C++ host, built against this wheel's headers; this runtime linked first, so kernels'
  # direct import of TVMFFIErrorSetRaisedFromCStrParts binds to ours (which passes it on).
  ffi_dir=$("$venv/bin/python" -c "import os, tvm_ffi; print(os.path.dirname(tvm_ffi.__file__))")
  host="$repo/target/ffi-host/test_relax_tvm_ffi-$tag"
  mkdir -p "$repo/target/ffi-host"
  "${CXX:-g++}" -std=c++17 -O1 -g -Wall -Werror -I"$ffi_dir/include" "$repo/c_tests/test_relax_tvm_ffi.cc" \
    -o "$host" -Wl,--no-as-needed "$libdir/libtvm_runtime.so" "$ffi_dir/lib/libtvm_ffi.so" \
    -Wl,-rpath,"$libdir:$ffi_dir/lib" -pthread
  fixtures=("$repo"/tests/fixtures/relax/"$(echo "$version" | cut -d. -f1-2)"/*)
  echo "== a C++ host on apache-tvm-ffi $ffi's headers"
  "$host" "${fixtures[@]}"
  if [ "$tag" = 027 ] && command -v valgrind >/dev/null; then
    echo "== the same under valgrind"
    valgrind -q --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite \
      --show-leak-kinds=definite "$host" "${fixtures[@]}"
  fi
done

# The same C++ host on every apache-tvm-ffi 0.1.x release.
"$repo/scripts/tvm_ffi_versions.sh"
