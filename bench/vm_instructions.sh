#!/usr/bin/env bash
# Instructions the Relay VM executes per invoke, this runtime against upstream v0.16.0
# (../shared/upstream), counted by valgrind's callgrind on bench/vm_bench.c and split by the object
# that ran them: the model's kernels (its lib.so), the runtime library, libc (malloc, free,
# memcpy), the C++ runtime (upstream's), the rest. Each figure is the difference between two runs
# of the same case at two lengths, divided by the difference in invokes (or loop iterations), so
# loading and set-up cancel out. Counts are deterministic; they are not time (bench/vm_bench.sh's
# alternated timings stay the measure), but show where an invoke's work goes outside the kernels.
#   bench/vm_instructions.sh
# Cases: the dynamic MLP fixture (tests/fixtures/vm/0.16/mlp_dyn, 16-8, batch 1: the VM's own
# work, its main a straight run of 65 instructions, the kernels a few hundred instructions) per
# set_input + invoke, the benchmark Relay loop (scripts/make_vm_fixtures.py --bench --only
# loop) per iteration, and per set_input + invoke the same control model's If with 3 iterations and
# the NMS head (--only nms).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
eval "$(scripts/tvm_env.sh)"
export TOPHUB_LOCATION=NONE TVM_FFI=ctypes
models=target/bench-models-vm
. bench/lib.sh
vm_bench_driver
upstream=$(upstream_opencl)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# count NAME LIB ARGS...: the per-object instruction counts of one run, into $out/NAME.
count() {
  local name=$1 lib=$2
  shift 2
  local version=""
  [ "$lib" = "$upstream" ] && version=0.16.0
  VM_VERSION=$version TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$lib valgrind --tool=callgrind \
    --callgrind-out-file="$out/$name.cg" target/bench/vm_bench "$@" >/dev/null 2>&1
  python3 bench/callgrind_objects.py "$out/$name.cg" >"$out/$name"
}

mlp=tests/fixtures/vm/0.16/mlp_dyn
for side in ours upstream; do
  lib=$repo/target/release
  [ $side = upstream ] && lib=$upstream
  count "mlp-$side-a" "$lib" latency $mlp 200 1
  count "mlp-$side-b" "$lib" latency $mlp 1200 1
  count "loop-$side-a" "$lib" loop $models/loop 2000
  count "loop-$side-b" "$lib" loop $models/loop 12000
  count "if-$side-a" "$lib" case $models/loop 200 0
  count "if-$side-b" "$lib" case $models/loop 1200 0
  count "nms-$side-a" "$lib" case $models/nms 200 0
  count "nms-$side-b" "$lib" case $models/nms 1200 0
done

python3 - "$out" <<'EOF'
import sys
from pathlib import Path

out = Path(sys.argv[1])


def kind(obj):
    if obj.endswith("/lib.so"):
        return "kernels"
    if obj.endswith("libtvm_runtime.so"):
        return "runtime"
    if "/libc.so" in obj:
        return "libc"
    if "libstdc++" in obj or "libgcc_s" in obj:
        return "C++ runtime"
    return "other"


def read(name):
    got = {}
    for line in (out / name).read_text().splitlines():
        obj, n = line.rsplit(" ", 1)
        got[kind(obj)] = got.get(kind(obj), 0) + int(n)
    return got


kinds = ["runtime", "libc", "C++ runtime", "kernels", "other"]
print("| case | side | outside the kernels | " + " | ".join(kinds) + " |")
print("|---|---|---|" + "---|" * len(kinds))
cases = (
    ("mlp", "dynamic MLP, batch 1, per set_input + invoke", 1000),
    ("loop", "Relay loop, per iteration", 10000),
    ("if", "relay.If and 3 loop iterations, per set_input + invoke", 1000),
    ("nms", "NMS head, per set_input + invoke", 1000),
)
for case, what, steps in cases:
    outside = {}
    for side in ("ours", "upstream"):
        a, b = read(f"{case}-{side}-a"), read(f"{case}-{side}-b")
        per = {k: (b.get(k, 0) - a.get(k, 0)) / steps for k in kinds}
        outside[side] = sum(v for k, v in per.items() if k != "kernels")
        cells = " | ".join(f"{per[k]:,.0f}" for k in kinds)
        print(f"| {what} | {side} | {outside[side]:,.0f} | {cells} |")
    print(f"| {what} | ours / upstream | {outside['ours'] / outside['upstream']:.2f}x | | | | | |")
EOF
