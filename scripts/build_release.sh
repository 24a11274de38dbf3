#!/usr/bin/env bash
# Everything a release publishes, into dist/: what the release workflow runs on a version tag, and
# CI on every push (the same script, so a release builds what CI tested).
#
#   scripts/build_release.sh              (TVMRT_WHEEL_ARCHES="x86_64 aarch64" by default)
#
# - the wheels (manylinux_2_28, x86_64 and aarch64) and the Triton backend's archives:
#   scripts/build_wheels.sh;
# - the source archive tvmrt-<version>.tar.gz: the Python package with the Rust workspace inside
#   (rust/), which pip builds where no wheel fits (Rust 1.82+ and a C++ compiler needed there);
# - the C archive tvm-runtime-<version>-linux-<arch>.tar.gz: the CMake install of the same glibc
#   2.28 build (lib/libtvm_runtime.so, include/tvm_runtime.h and .hpp, lib/cmake and lib/pkgconfig,
#   both relocatable, bin/tvmrt, backends/tvm/libtriton_tvm.so), for C and C++ hosts;
# - SHA256SUMS over all of them.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
out=${TVMRT_WHEEL_OUT:-$repo/dist}
arches=${TVMRT_WHEEL_ARCHES:-"x86_64 aarch64"}
export TVMRT_WHEEL_OUT=$out TVMRT_WHEEL_ARCHES=$arches
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
tools=$repo/.tvm-cache/wheel-tools

scripts/build_wheels.sh

echo "== the source archive"
stage=$repo/target/sdist
rm -rf "$stage" && mkdir -p "$stage"
(cd python && "$tools/bin/python" setup.py -q sdist -d "$stage/plain" >/dev/null 2>&1) \
  || { (cd python && "$tools/bin/python" setup.py sdist -d "$stage/plain"); exit 1; }
tar -xzf "$stage/plain/tvmrt-$version.tar.gz" -C "$stage"
root=$stage/tvmrt-$version
# What cargo needs to build the library and the tool: the workspace's manifests and sources, the
# targets the manifest names, and the bundled model the tool carries inside.
git ls-files -z Cargo.toml Cargo.lock build.rs cbindgen.toml src include cxx tvmrt/Cargo.toml tvmrt/build.rs \
  tvmrt/dynamic.list tvmrt/src triton/Cargo.toml triton/src examples/fuzz.rs tests/fuzz.rs tests/rpc.rs tests/common \
  tests/fixtures/mlp_b1/lib.so tests/fixtures/mlp_b1/graph.json tests/fixtures/mlp_b1/manifest.txt \
  tests/fixtures/mlp_b1/in_0.bin tests/fixtures/mlp_b1/out_0.bin \
  | tar --null -T - -cf - | tar -xf - -C "$root" --one-top-level=rust
cp LICENSE "$root/"
rm -f "$out/tvmrt-$version.tar.gz"
tar --sort=name --owner=0 --group=0 --numeric-owner -czf "$out/tvmrt-$version.tar.gz" -C "$stage" "tvmrt-$version"
echo "   tvmrt-$version.tar.gz: $(du -k "$out/tvmrt-$version.tar.gz" | cut -f1) KiB (the package and the Rust workspace)"

echo "== the C archives"
for arch in $arches; do
  name=tvm-runtime-$version-linux-$arch
  build=$repo/target/c-archive/$arch
  rm -rf "$build" && mkdir -p "$build"
  cmake -S . -B "$build/cmake" -DTVM_RT_PREBUILT_DIR="$repo/target/zig/$arch-unknown-linux-gnu/release" >/dev/null
  cmake --install "$build/cmake" --prefix "$build/$name" >/dev/null
  cp LICENSE README.md CHANGELOG.md "$build/$name/"
  tar --sort=name --owner=0 --group=0 --numeric-owner -czf "$out/$name.tar.gz" -C "$build" "$name"
  echo "   $name.tar.gz: $(du -k "$out/$name.tar.gz" | cut -f1) KiB ($(cd "$build/$name" && find . -type f | sort | tr '\n' ' '))"
done

echo "== SHA256SUMS"
(cd "$out" && ls tvmrt-"$version"*.whl tvmrt-"$version".tar.gz tvm-runtime-"$version"-*.tar.gz \
  triton-tvm-backend-"$version"-*.tar.gz | xargs sha256sum > SHA256SUMS && cat SHA256SUMS)
