#!/usr/bin/env bash
# aarch64 Linux: cross-builds libtvm_runtime.so with Debian's GNU toolchain (GNU ld), builds the MLP
# fixtures for aarch64 with TVM 0.16, and runs the C tests (models, error paths, sharing, packed
# functions, several host threads) and the C++ host (compiled against upstream's headers) under
# qemu-aarch64, at 1 and 2 threads; outputs must be the x86_64 builds' bytes. Then tvmrt rpc-server,
# cross-built, under qemu-aarch64, driven by TVM's Python client (scripts/rpc_on_device.py). The
# aarch64 library, linked by GNU ld, must export exactly what x86_64's default link does.
# Installs what is missing (cross compilers, qemu-user via apt; the Rust target via rustup).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
need_apt=()
command -v aarch64-linux-gnu-gcc >/dev/null || need_apt+=(gcc-aarch64-linux-gnu)
command -v aarch64-linux-gnu-g++ >/dev/null || need_apt+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need_apt+=(qemu-user)
command -v ld.bfd >/dev/null || need_apt+=(binutils)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  if ! rustup target add aarch64-unknown-linux-gnu; then
    [ "${TVM_RT_REQUIRE_AARCH64:-0}" = 1 ] && { echo "cannot install the aarch64 Rust target" >&2; exit 1; }
    echo "== NOTE: the aarch64 Rust target cannot be installed here (rustup): the aarch64 suite is skipped"
    exit 0
  fi
fi
eval "$(scripts/tvm_env.sh)"

echo "== cross-build for aarch64 (GNU ld): the same exported symbols as x86_64's default link"
cargo build --release --lib --quiet --target aarch64-unknown-linux-gnu -p tvm-runtime
lib=$repo/target/aarch64-unknown-linux-gnu/release
# GNU ld links through scripts/linker, which merges upstream's C++ exports into rustc's version
# script: the list must come out as the default link's, every C and C++ entry point (this once
# took a second x86_64 build with GNU ld, a minute and a half of CI, for the same comparison).
cargo build --release --lib --quiet
exports() { nm -D --defined-only "$1" | awk '{print $2, $3}' | sort; }
diff <(exports "$lib/libtvm_runtime.so") <(exports target/release/libtvm_runtime.so)
fx=$repo/target/aarch64-fixtures
if [ ! -f "$fx/mlp_unbound_b8/lib.so" ]; then
  TVM_FFI=ctypes PYTHONPATH="$TVM_WHEEL_DIR" "$TVM_PYTHON" scripts/make_aarch64_fixtures.py "$fx"
fi
out=$repo/target/aarch64-tests
mkdir -p "$out"
for t in test_models test_errors test_sharing test_packed test_stress; do
  aarch64-linux-gnu-gcc -std=c11 -O1 -Wall -Werror -Wno-unused-parameter -Iinclude "c_tests/$t.c" -o "$out/$t" \
    -L"$lib" -ltvm_runtime -lm -lpthread
done
wheel=$TVM_WHEEL_DIR/tvm
aarch64-linux-gnu-g++ -std=c++17 -O1 -Wall -Werror -Wno-unused-parameter \
  -DDMLC_USE_LOGGING_LIBRARY='<tvm/runtime/logging.h>' \
  -I"$wheel/include" -I"$wheel/dlpack/include" -I"$wheel/dmlc-core/include" \
  c_tests/cxx/test_cxx_host.cc -o "$out/test_cxx_host" -L"$lib" -ltvm_runtime
run() { qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH="$lib" -E TVM_NUM_THREADS="$threads" "$@"; }
for threads in 1 2; do
  echo "== under qemu-aarch64, TVM_NUM_THREADS=$threads"
  run "$out/test_models" "$fx/mlp_b1" "$fx/mlp_unbound_b1" "$fx/mlp_unbound_b8"
  run "$out/test_errors" "$fx/mlp_b1"
  run "$out/test_sharing" "$fx"
  run "$out/test_packed"
  run "$out/test_stress" "$fx" 10
  run "$out/test_cxx_host" "$fx" present
done

echo "== tvmrt rpc-server under qemu-aarch64, driven by TVM's Python client on x86_64"
cargo build --release --quiet --target aarch64-unknown-linux-gnu -p tvmrt
TVM_FFI=ctypes PYTHONPATH="$TVM_WHEEL_DIR" "$TVM_PYTHON" scripts/rpc_on_device.py \
  "$lib/tvmrt" "$lib" "$fx"
