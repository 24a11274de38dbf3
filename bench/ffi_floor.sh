#!/usr/bin/env bash
# ctypes (the package's route into the library) against a compiled module over CPython's stable
# ABI, per call, on the bundled MLP: bench/ffi_floor.py in ROUNDS processes, medians with
# (min-max). The extension (bench/ffi_floor.c) is compiled here with the interpreter's headers.
#   bench/ffi_floor.sh [ROUNDS] [PYTHON]     (PYTHON: an interpreter with numpy; default python3)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-5}
py=${2:-python3}
cargo build --release --quiet --lib
ext=$(mktemp -d)
trap 'rm -rf "$ext"' EXIT
include=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
cc -O2 -shared -fPIC -I"$include" bench/ffi_floor.c -o "$ext/ffi_floor.abi3.so"
for _ in $(seq "$rounds"); do
  TVMRT_LIBRARY=target/release/libtvm_runtime.so TVM_NUM_THREADS=1 PYTHONPATH=python \
    "$py" bench/ffi_floor.py tests/fixtures/mlp_b1 "$ext" >>"$ext/out"
done
"$py" - "$ext/out" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, us = line.rstrip("\n").split("\t")
    rows.setdefault(name, []).append(float(us))
print("| us per call | median (min-max) |")
print("|---|---|")
for name, v in rows.items():
    print(f"| {name} | {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}) |")
PY
