#!/usr/bin/env bash
# The aarch64 release wheel as an aarch64 user gets it: installed (with numpy's aarch64 wheel) for
# Debian 12's arm64 CPython 3.11, which runs under qemu-aarch64 from a root of its own packages
# (taken from Debian's archive, unpacked, nothing installed on this machine), then checks there:
# the aarch64 builds of the MLP fixtures (scripts/make_aarch64_fixtures.py) byte-equal to the
# x86_64 builds' outputs, two builds sharing weights under four threads, a refused input, and the
# wheel's tool.
#   scripts/test_wheel_aarch64.sh [WHEEL]    (default: dist/tvmrt-*-manylinux_2_28_aarch64.whl)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
wheel=${1:-$(ls dist/tvmrt-*-manylinux_2_28_aarch64.whl 2>/dev/null | tail -1)}
[ -f "$wheel" ] || { echo "no aarch64 wheel (scripts/build_wheels.sh makes it)" >&2; exit 1; }
# Every ELF file in it is aarch64's: an x86-64 module would import as if absent, falling back to ctypes.
scripts/wheel/check_machines.py "$wheel" aarch64
command -v qemu-aarch64 >/dev/null || {
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq qemu-user >/dev/null
}
root=$repo/target/aarch64-python
if [ ! -f "$root/.complete" ]; then
  echo "== an arm64 CPython 3.11 from Debian 12's packages, in $root"
  rm -rf "$root"
  mkdir -p "$root/debs"
  python3 - "$root" <<'EOF'
import lzma, sys, urllib.request
root = sys.argv[1]
mirror = "http://deb.debian.org/debian"
# CPython and what it, ctypes, numpy's wheel and the package load (no dependency solving: a fixed
# set, the interpreter's Depends and what its stdlib modules link).
wanted = """libc6 libgcc-s1 libstdc++6 zlib1g libexpat1 libffi8 libbz2-1.0 liblzma5 libssl3 libcrypt1 libuuid1
libsqlite3-0 libncursesw6 libtinfo6 libreadline8 libzstd1 python3.11-minimal libpython3.11-minimal
libpython3.11-stdlib""".split()
index = lzma.decompress(urllib.request.urlopen(f"{mirror}/dists/bookworm/main/binary-arm64/Packages.xz").read())
found = {}
for stanza in index.decode().split("\n\n"):
    fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
    if fields.get("Package") in wanted:
        found[fields["Package"]] = fields["Filename"]
missing = set(wanted) - set(found)
assert not missing, missing
for name, path in found.items():
    with open(f"{root}/debs/{name}.deb", "wb") as f:
        f.write(urllib.request.urlopen(f"{mirror}/{path}").read())
EOF
  for d in "$root"/debs/*.deb; do dpkg-deb -x "$d" "$root"; done
  rm -rf "$root/debs"
  touch "$root/.complete"
fi
site=$repo/target/aarch64-site
rm -rf "$site"
echo "== installing $(basename "$wheel") and numpy for cp311 aarch64 (pip --target)"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --target "$site" --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 \
  --python-version 3.11 --implementation cp --only-binary=:all: "$wheel" "numpy<2.3"
py() {
  qemu-aarch64 -L "$root" -E PYTHONPATH="$site" -E PYTHONHOME="$root/usr" -E TVM_NUM_THREADS=2 \
    "$root/usr/bin/python3.11" "$@"
}
fx=$repo/target/aarch64-fixtures
if [ ! -f "$fx/mlp_unbound_b8/lib.so" ]; then
  echo "== the aarch64 fixtures (TVM 0.16, as scripts/aarch64.sh builds them)"
  command -v aarch64-linux-gnu-gcc >/dev/null || {
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null
  }
  eval "$(scripts/tvm_env.sh)"
  TVM_FFI=ctypes PYTHONPATH="$TVM_WHEEL_DIR" "$TVM_PYTHON" scripts/make_aarch64_fixtures.py "$fx"
fi
echo "== the package under qemu-aarch64"
py - "$fx" <<'EOF'
import platform
import sys
import threading
from pathlib import Path

import numpy as np
import tvmrt

assert platform.machine() == "aarch64", platform.machine()
from tvmrt import _ffi

assert _ffi._fast is not None, "the wheel's compiled call module (tvmrt/_fast.c) did not load"
fixtures = Path(sys.argv[1])


def read(d, words, at):
    nd = int(words[at + 1])
    shape = tuple(int(x) for x in words[at + 2 : at + 2 + nd])
    return np.fromfile(d / words[at + 2 + nd], dtype=np.dtype(words[at])).reshape(shape)


def fixture(name):
    d = fixtures / name
    ins, outs = {}, []
    for line in (d / "manifest.txt").read_text().splitlines():
        w = line.split()
        if w[0] == "input":
            ins[w[1]] = read(d, w, 2)
        elif w[0] == "output":
            outs.append(read(d, w, 1))
    return d, ins, outs


for name in ["mlp_b1", "mlp_unbound_b1", "mlp_unbound_b8"]:
    d, ins, outs = fixture(name)
    got = tvmrt.Model(d).run(ins)
    assert [g.tobytes() for g in got] == [o.tobytes() for o in outs], name
    print("  ", name, "byte-equal to the x86_64 build's outputs")

# Two builds on one copy of the weights, called from four threads at once.
b1 = tvmrt.Model(fixtures / "mlp_unbound_b1")
b8 = b1.variant(fixtures / "mlp_unbound_b8")
cases = [(b1, *fixture("mlp_unbound_b1")[1:]), (b8, *fixture("mlp_unbound_b8")[1:])]
wrong = []


def work(k):
    m, ins, outs = cases[k % 2]
    for _ in range(10):
        if m.run(ins)[0].tobytes() != outs[0].tobytes():
            wrong.append(k)


threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not wrong, wrong
print("   four threads on two builds sharing weights: every answer right")
try:
    b1.run(data=np.zeros((2, 2), "float32"))
    raise SystemExit("a wrong shape was taken")
except ValueError as e:
    print("   a wrong shape refused:", str(e).splitlines()[0][:80])
print("tvmrt", tvmrt.__version__, "on", platform.machine(), "from", tvmrt.library_path())
EOF
echo "== the wheel's tool under qemu-aarch64"
qemu-aarch64 -L "$root" -E TVM_NUM_THREADS=1 "$site/bin/tvmrt" run "$fx/mlp_b1" --repeat 2 | grep "matches the reference"
