#!/usr/bin/env bash
# The C archive a release attaches (scripts/build_release.sh), as a C user takes it: unpacked in a
# folder of its own, examples/c built against it with CMake (find_package) and with pkg-config,
# both run on a model folder and on a Relay VM, and its tool on the bundled model.
#   scripts/test_c_archive.sh [dist/tvm-runtime-<version>-linux-x86_64.tar.gz]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
archive=${1:-$(ls dist/tvm-runtime-*-linux-"$(uname -m)".tar.gz | tail -1)}
out=$repo/target/c-archive-test
rm -rf "$out" && mkdir -p "$out"
tar -xzf "$archive" -C "$out"
prefix=$(ls -d "$out"/tvm-runtime-*)
echo "== $(basename "$archive"): $(cd "$prefix" && find . -type f | sort | tr '\n' ' ')"
cmake -S examples/c -B "$out/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$out/build" >/dev/null
"$out/build/run_model" tests/fixtures/mlp_unbound_b1 tests/fixtures/mlp_unbound_b8 | tee "$out/run_model.log"
grep -q "executor 1 output 0 \[8,10\] 0.0903047 0.205685" "$out/run_model.log"
"$out/build/run_vm" tests/fixtures/vm/0.16/mlp_dyn 3x16 | tee "$out/run_vm.log"
grep -q "invoke 1 output 1 \[3\] 2.32047 0.426679 1.71141" "$out/run_vm.log"
# pkg-config's flags alone, the library found at run time through its libdir.
cc -std=gnu11 examples/c/main.c examples/c/common.c -o "$out/run_model_pc" \
  $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs tvm_runtime)
# Each run's whole output is read (grep without -q): a reader that stops at the first match
# would leave the writer a closed pipe, and SIGPIPE (status 141) for its next line.
LD_LIBRARY_PATH=$prefix/lib "$out/run_model_pc" tests/fixtures/multi_io | grep "output 4 \[4\] 0 2 4 6" >/dev/null
"$prefix/bin/tvmrt" run --repeat 1 | grep "matches the reference" >/dev/null
[ -f "$prefix/backends/tvm/libtriton_tvm.so" ] && [ -f "$prefix/lib/cmake/tvm_runtime_rs/tvm_runtime_rsConfig.cmake" ]
echo "== the C archive passed: CMake and pkg-config hosts, the Relay VM, the tool"
