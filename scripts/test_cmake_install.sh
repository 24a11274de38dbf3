#!/usr/bin/env bash
# The CMake route as packagers and users take it: configure, build and install with each build
# type (Debug, Release, RelWithDebInfo, MinSizeRel; with Ninja too when it is installed), from the
# source tree, no tests asked for: the library and the tool installed, stripped, smaller than
# upstream's library, the tool running from the prefix. Then the test suite built in Release with
# -Werror (what -O2 warns about).
#   scripts/test_cmake_install.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
out=$repo/target/cmake-install-test
rm -rf "$out"
mkdir -p "$out"
upstream=${TVM_UPSTREAM_SHARED:-$repo/../shared/upstream}/libtvm_runtime.so
generators=("Unix Makefiles")
command -v ninja >/dev/null && generators+=("Ninja")
for gen in "${generators[@]}"; do
  for type in Debug Release RelWithDebInfo MinSizeRel; do
    dir="$out/${gen// /_}-$type"
    echo "== $gen, CMAKE_BUILD_TYPE=$type: configure, build, install"
    cmake -S . -B "$dir/build" -G "$gen" -DCMAKE_BUILD_TYPE=$type >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
    cmake --build "$dir/build" >>"$dir.log" 2>&1 || { tail -40 "$dir.log"; exit 1; }
    cmake --install "$dir/build" --prefix "$dir/stage" >>"$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
    # Nothing of the test suite was built.
    if find "$dir/build" -maxdepth 1 -name 'test_*' -type f | grep -q .; then
      echo "test programs were built without BUILD_TESTING" >&2
      exit 1
    fi
    lib=$dir/stage/lib/libtvm_runtime.so
    for f in "$lib" "$dir/stage/bin/tvmrt" "$dir/stage/include/tvm_runtime.h" "$dir/stage/include/tvm_runtime.hpp" \
      "$dir/stage/lib/cmake/tvm_runtime_rs/tvm_runtime_rsConfig.cmake" "$dir/stage/lib/pkgconfig/tvm_runtime.pc" \
      "$dir/stage/backends/tvm/libtriton_tvm.so"; do
      [ -e "$f" ] || { echo "not installed: $f" >&2; exit 1; }
    done
    if readelf -S "$lib" | grep -q '\.debug_'; then
      echo "the installed library keeps debug info" >&2
      exit 1
    fi
    size=$(stat -c %s "$lib")
    if [ -f "$upstream" ] && [ "$size" -ge "$(stat -c %s "$upstream")" ]; then
      echo "the installed library ($size bytes) is not smaller than upstream's" >&2
      exit 1
    fi
    # grep reads all of it: `grep -q` would leave at the match, and the tool still writing would
    # die of SIGPIPE, failing the pipeline (exit 141) at random.
    (cd / && "$dir/stage/bin/tvmrt" run --repeat 1) | grep "matches the reference" >/dev/null
    echo "   library $((size / 1024)) KiB, tool $(($(stat -c %s "$dir/stage/bin/tvmrt") / 1024)) KiB, the tool runs"
    # docs/c.md's sizes stay true: each within a tenth of what was installed.
    python3 - docs/c.md "$lib" "$dir/stage/bin/tvmrt" <<'PY'
import os, re, sys
text = " ".join(open(sys.argv[1]).read().split())
said = re.search(r"installed library is ([0-9.]+) MB .*? and `tvmrt` ([0-9.]+) MB", text)
assert said, "docs/c.md no longer says the installed sizes"
for what, mb, path in (("library", said.group(1), sys.argv[2]), ("tool", said.group(2), sys.argv[3])):
    real = os.path.getsize(path) / 1e6
    assert abs(real - float(mb)) <= 0.1 * real, f"docs/c.md says the {what} is {mb} MB; it is {real:.1f} MB"
PY
  done
done
echo "== the test suite in Release with -Werror (BUILD_TESTING=ON TVM_RT_WERROR=ON)"
cmake -S . -B "$out/tests-release" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DTVM_RT_WERROR=ON \
  -DTVM_UPSTREAM_INCLUDE="${TVM_UPSTREAM_INCLUDE:-}" -DTVM_DLPACK_INCLUDE="${TVM_DLPACK_INCLUDE:-}" \
  -DTVM_JSON_RUNTIME_INCLUDE="${TVM_JSON_RUNTIME_INCLUDE:-}" >"$out/tests.log" 2>&1
cmake --build "$out/tests-release" -j2 >>"$out/tests.log" 2>&1 || { tail -40 "$out/tests.log"; exit 1; }
echo "== the CMake route works with every build type"
