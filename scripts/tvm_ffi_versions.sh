#!/usr/bin/env bash
# This runtime beside every apache-tvm-ffi 0.1.x release: for each, the C++ host
# (c_tests/test_relax_tvm_ffi.cc) built against that release's headers and run with its
# libtvm_ffi.so on the Relax fixtures of TVM 0.25, 0.26 and 0.27 (every case byte-equal, threads,
# errors). The runtime speaks tvm-ffi's C ABI only, which stays put across the series: one build
# of it must serve them all. Each wheel is about 2 MB (kept in .tvm-cache/relax/ffi-wheels).
# scripts/test_relax_python.sh runs it; arguments replace the list of versions.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cache=${TVM_HOME_DIR:-$repo/.tvm-cache}/relax/ffi-wheels
libdir="$repo/target/python-runtime"
[ -f "$libdir/libtvm_runtime.so" ] || { echo "run scripts/test_relax_python.sh (it builds $libdir)" >&2; exit 2; }
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  # The newest build of each 0.1 release on PyPI as of 2026-12.
  versions=(0.1.0 0.1.1 0.1.2 0.1.3 0.1.4 0.1.5 0.1.6 0.1.7 0.1.8.post2 0.1.9 0.1.10 0.1.11 0.1.12
    0.1.13.post3 0.1.14.post1 0.1.15.post2)
fi
python=$(pyenv prefix 3.11 2>/dev/null || true)/bin/python
[ -x "$python" ] || python=python3
fixtures=("$repo"/tests/fixtures/relax/0.2[567]/*)
mkdir -p "$cache"
for v in "${versions[@]}"; do
  dir="$cache/$v"
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux_2_28_x86_64 -d "$dir" "apache-tvm-ffi==$v"
    "$python" -m zipfile -e "$dir"/apache_tvm_ffi-*.whl "$dir/wheel"
    touch "$dir/.complete"
  fi
  ffi="$dir/wheel/tvm_ffi"
  host="$dir/test_relax_tvm_ffi"
  "${CXX:-g++}" -std=c++17 -O1 -Wall -Werror -I"$ffi/include" c_tests/test_relax_tvm_ffi.cc -o "$host" \
    -Wl,--no-as-needed "$libdir/libtvm_runtime.so" "$ffi/lib/libtvm_ffi.so" -Wl,-rpath,"$libdir:$ffi/lib" -pthread
  printf '== apache-tvm-ffi %-14s ' "$v"
  "$host" "${fixtures[@]}" | tail -1
done
