#!/usr/bin/env bash
# Runs every test on a fresh machine: formatting and lints, the Rust tests, the C and C++ suite under
# CTest (also under valgrind; hosts built against upstream TVM 0.16's C and C++ headers, the C++ one
# also run on upstream's own library), models built for OpenCL on pocl's CPU device, the old-ABI
# build with its C++ host, the differential test, AOT builds of TVM's memory planner
# (scripts/usmp_dense.sh), the README's snippets and docs' recipes, TVM's
# own Python package driving this runtime under pytest, the CMake install matrix, the release
# wheels (scripts/build_wheels.sh, then scripts/test_wheel.sh and, under qemu,
# scripts/test_wheel_aarch64.sh), Ray Serve (scripts/test_serve.sh), the Triton backend in a real
# Triton server (scripts/test_triton.sh) and the aarch64 suite under qemu
# (scripts/aarch64.sh). Installs what is missing (cmake, valgrind, pocl,
# cross compilers and qemu via apt; TVM's wheel and a Python venv via pip; the Rust target via rustup).
#
#   scripts/test.sh           everything CI runs, on a fresh Debian machine: about 20 minutes on 2
#                             cores (the README says what it downloads and the disk it takes); the
#                             run ends by listing every part it skipped, and why
#   scripts/test.sh --all     the same and the aarch64 wheel: a second cross build of the whole crate
#                             graph with zig (about 4 minutes on 2 cores) and its tests under qemu
#                             (as long again); the release workflow runs it on every tag, and the
#                             aarch64 library itself is tested by the default run (scripts/aarch64.sh)
#   scripts/test.sh --quick   the Rust tests and the C and C++ suite on the host, nothing else, with
#                             nothing downloaded: in cargo's release profile, so after the README's
#                             first command it reuses that build (about 2 minutes on a fresh clone,
#                             not the debug build's 5 of compiling); no fmt or clippy, valgrind,
#                             upstream's headers (the hosts built against them are left out), old
#                             ABI, differential test, snippets, Python, CMake install matrix or qemu
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
# Each stage's header carries the minutes and seconds since the start: where CI's time goes.
stage() { printf '== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
quick=0 all=0
case "${1:-}" in
  --quick) quick=1 ;;
  --all) all=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick | --all]" >&2; exit 2 ;;
esac
# What this run leaves out, and why: listed at its end.
skipped=()

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
[ $quick = 1 ] || command -v valgrind >/dev/null || need_apt+=(valgrind)
command -v cc >/dev/null || need_apt+=(gcc)
command -v c++ >/dev/null || need_apt+=(g++)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
# Ninja: the CMake install test builds with both generators.
[ $quick = 1 ] || command -v ninja >/dev/null || need_apt+=(ninja-build)
# A CPU OpenCL device (pocl) and the ICD loader, for the OpenCL tests (skipped without a device,
# unless TVM_RT_REQUIRE_OPENCL=1, as CI sets).
# The quick run uses a device if there is one, and installs none.
if [ $quick = 0 ]; then
  [ -e /etc/OpenCL/vendors/pocl.icd ] || need_apt+=(pocl-opencl-icd)
  ldconfig -p 2>/dev/null | grep -q 'libOpenCL.so.1 ' || need_apt+=(ocl-icd-libopencl1)
  # Upstream's library opens the unversioned name (`libOpenCL.so`), which only the -dev package installs.
  ldconfig -p 2>/dev/null | grep -q 'libOpenCL.so ' || need_apt+=(ocl-icd-opencl-dev)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  stage "installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ $quick = 1 ]; then
  # The README's first command built the release profile: the tests reuse it.
  stage "cargo test --release"
  mkdir -p target
  cargo test --release --quiet 2>&1 | tee target/cargo-test.log
else
  stage "TVM 0.16 (hhb-tvm wheel: upstream's headers and Python package, with a venv to run it)"
  # Captured first: a failure inside `eval "$(...)"` would not stop the script, only empty it.
  tvm_vars=$(scripts/tvm_env.sh)
  eval "$tvm_vars"
  stage "cargo fmt --check"
  cargo fmt --all -- --check
  stage "cargo clippy"
  cargo clippy --all-targets --quiet --features tvm-runtime/fuzzing -- -D warnings
  stage "cargo test"
  cargo test --quiet --features tvm-runtime/fuzzing 2>&1 | tee target/cargo-test.log
fi
# Upstream's own library (v0.16 with OpenCL, new std::string ABI), for the tests that run the same
# host on both runtimes and for the differential test. A clone without it skips those, saying so;
# CI sets TVM_RT_REQUIRE_UPSTREAM_LIB=1 so they can never be skipped there.
upstream_dir=${TVM_UPSTREAM_SHARED:-$repo/../shared/upstream}
require_lib=OFF
# The differential test speaks the C API alone: without that build, TVM 0.16's wheel's own runtime
# (the same version, downloaded above) is its other side.
diff_dir=$upstream_dir
if [ -f "$upstream_dir/libtvm_runtime.so" ]; then
  require_lib=ON
elif [ "${TVM_RT_REQUIRE_UPSTREAM_LIB:-0}" = 1 ]; then
  echo "no upstream libtvm_runtime.so in $upstream_dir, and TVM_RT_REQUIRE_UPSTREAM_LIB=1" >&2
  exit 1
else
  skipped+=("the C++ hosts run on upstream's own library (test_cxx_upstream_cases and friends in CTest): they need upstream v0.16 built from source with the new std::string ABI in $upstream_dir (or TVM_UPSTREAM_SHARED); the differential test ran against TVM 0.16's wheel's runtime instead")
  [ $quick = 1 ] || diff_dir=$TVM_WHEEL_DIR/tvm
fi
if [ $quick = 1 ]; then
  stage "C and C++ tests (CTest, host only, no valgrind, none built against upstream's headers)"
  # Upstream's headers would be a download: the hosts built against them wait for the full run.
  cmake -S . -B build-quick -DBUILD_TESTING=ON -DTVM_RT_WERROR=ON -DTVM_RT_VALGRIND=OFF -DTVM_RT_REQUIRE_UPSTREAM=OFF \
    -DTVM_RT_REQUIRE_UPSTREAM_LIB=$require_lib -DTVM_UPSTREAM_SHARED="$upstream_dir" -DTVM_UPSTREAM_INCLUDE= \
    -DTVM_JSON_RUNTIME_INCLUDE= >target/quick-configure.log 2>&1 || { cat target/quick-configure.log; exit 1; }
  cmake --build build-quick -j2
  ctest --test-dir build-quick --output-on-failure --no-tests=error
  stage "quick run passed (scripts/test.sh without --quick runs what CI does)"
  exit 0
fi
stage "C tests (CTest, plain and under valgrind)"
cmake -S . -B build -DBUILD_TESTING=ON -DTVM_RT_WERROR=ON -DTVM_RT_VALGRIND=ON -DTVM_RT_REQUIRE_UPSTREAM=ON -DTVM_RT_REQUIRE_UPSTREAM_LIB=$require_lib \
  -DTVM_UPSTREAM_SHARED="$upstream_dir" -DTVM_UPSTREAM_INCLUDE="$TVM_UPSTREAM_INCLUDE" \
  -DTVM_DLPACK_INCLUDE="$TVM_DLPACK_INCLUDE" -DTVM_JSON_RUNTIME_INCLUDE="$TVM_JSON_RUNTIME_INCLUDE" >/dev/null
cmake --build build -j2
ctest --test-dir build --output-on-failure --no-tests=error
stage "the tool with the test plug-in CMake built (c_tests/cxx/plugin)"
TVMRT_TEST_PLUGIN="$repo/build/libtvmrt_test_plugin.so" cargo test --quiet -p tvmrt --test cli plugins
stage "C++ hosts with the old std::string ABI (TVM_RT_CXX_OLD_ABI=1), on ours and on the wheel's runtime"
TVM_RT_CXX_OLD_ABI=1 CARGO_TARGET_DIR=target/old-abi cargo build --release --lib --quiet
wheel=$TVM_WHEEL_DIR/tvm
c++ -std=c++17 -O1 -D_GLIBCXX_USE_CXX11_ABI=0 -DDMLC_USE_LOGGING_LIBRARY='<tvm/runtime/logging.h>' \
  -I"$wheel/include" -I"$wheel/dlpack/include" -I"$wheel/dmlc-core/include" \
  c_tests/cxx/test_cxx_host.cc -o target/old-abi/test_cxx_host -Ltarget/old-abi/release -ltvm_runtime
LD_LIBRARY_PATH=target/old-abi/release target/old-abi/test_cxx_host tests/fixtures
LD_LIBRARY_PATH="$(dirname "$TVM_UPSTREAM_RUNTIME")" target/old-abi/test_cxx_host tests/fixtures
stage "differential test against upstream's library (docs/DIFFERENCES.md)"
TVM_UPSTREAM_SHARED=$diff_dir scripts/difftest.sh 1 100 400 0123
stage "the same, every executor of ours in a pool of activation arenas (TVM_RT_ARENA_POOL=2)"
OURS_ENV="TVM_RT_ARENA_POOL=2" TVM_UPSTREAM_SHARED=$diff_dir scripts/difftest.sh 101 30 400 0123
stage "AOT artefacts of TVM's memory planner (USMP): dense networks x 3 targets, right or refused, never corrupting memory"
scripts/usmp_dense.sh
stage "the README's C, C++ and Python snippets, as written"
scripts/readme_snippets.py
stage "the recipes in docs/, as written (scripts/doc_recipes.py)"
scripts/doc_recipes.py
stage "TVM's Python package on this runtime (pytest)"
scripts/test_python.sh
stage "TVM 0.19's Python package running its Relax executables on this runtime (pytest)"
scripts/test_relax_python.sh
stage "the CMake route: configure, build and install with each build type (then the suite in Release, -Werror)"
scripts/test_cmake_install.sh
wheel_arches=x86_64
if [ $all = 1 ]; then
  wheel_arches="x86_64 aarch64"
else
  skipped+=("the aarch64 wheel (a second zig cross build and its tests under qemu, about 8 minutes more): scripts/test.sh --all runs it, as the release workflow does on every tag")
fi
stage "what a release publishes (scripts/build_release.sh: manylinux_2_28 wheels for $wheel_arches, the source and C archives)"
TVMRT_WHEEL_ARCHES=$wheel_arches scripts/build_release.sh
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
stage "the x86_64 wheel in fresh venvs (3.9 and 3.13, numpy 1.x and 2.x: its tests, the first example with no Rust on PATH), the source archive built by pip"
TVMRT_WHEEL=dist/tvmrt-$version-py3-none-manylinux_2_28_x86_64.whl TVMRT_SDIST=dist/tvmrt-$version.tar.gz scripts/test_wheel.sh
stage "the C archive: examples/c built against it (CMake, pkg-config), run on a graph model and a Relay VM"
scripts/test_c_archive.sh "dist/tvm-runtime-$version-linux-x86_64.tar.gz"
stage "its Ray Serve module (tvmrt[serve]) on a local Ray instance and on two Ray nodes, all on 127.0.0.1"
scripts/test_serve.sh
stage "the Triton backend (its release archive) in a real Triton server: HTTP, gRPC, shared memory, batching, load cycles"
scripts/test_triton.sh
stage "aarch64: cross-built with GNU ld (exporting what x86_64's default link does), the C and C++ suites under qemu-aarch64"
scripts/aarch64.sh
if [ $all = 1 ]; then
  stage "the aarch64 wheel under qemu-aarch64, for Debian's arm64 CPython"
  scripts/test_wheel_aarch64.sh
fi
grep -qw avx512f /proc/cpuinfo || skipped+=("the AVX-512 builds of scripts/usmp_dense.sh: this CPU has no AVX-512F")
stage "every test passed"
if [ ${#skipped[@]} -gt 0 ]; then
  echo "   left out of this run (the stages above print a NOTE for anything smaller):"
  for s in "${skipped[@]}"; do echo "   - $s"; done
fi
