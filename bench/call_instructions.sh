#!/usr/bin/env bash
# Instructions per call of each C entry point a host calls per request (bench/call_costs.c's
# cases), this runtime against upstream v0.16.0 (../shared/upstream), counted by valgrind's
# callgrind. Counts are deterministic: unlike times on a noisy machine they need no alternation,
# and they show a change of a few instructions. Each count is the difference between two runs of
# the same case with different loop lengths, so loading the model and the rest of the set-up
# cancel out. Instructions are not time: a locked instruction or a cache miss costs more than an
# add. bench/call_costs.sh's times stay the measure. This script shows where a change moved the
# work, and what a call does beyond upstream's.
#   bench/call_instructions.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
eval "$(scripts/tvm_env.sh)"
models=target/bench-models
. bench/lib.sh
call_costs_driver
upstream=$(upstream_opencl)
model=tests/fixtures/multi_io
short=2000 long=12000
# Instructions the driver executes with LIB's library for CASE looped N times (one round).
count() {
  ONLY=$2 TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    target/bench/call_costs $model $models/chain200 x "$3" 1 2>&1 >/dev/null |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
nodes=$(LD_LIBRARY_PATH=target/release ONLY=none target/bench/call_costs $model $models/chain200 x 1 1 | awk '{print $1}')
cases="funccall set_name set_index zero_copy get_output get_into from_bytes to_bytes alloc_free retain_free run_node"
out=$(mktemp)
for c in $cases; do
  for lib in "$upstream" target/release; do
    a=$(count "$lib" $c $short)
    b=$(count "$lib" $c $long)
    [ -n "$a" ] && [ -n "$b" ] || { echo "callgrind gave no count for $c on $lib" >&2; exit 1; }
    echo "$c $lib $a $b" >>"$out"
  done
done
python3 - "$out" "$upstream" "$nodes" $short $long <<'EOF'
import sys
path, upstream, nodes, short, long_ = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
names = {
    "funccall": "`TVMFuncCall(get_num_outputs)`",
    "set_name": "`set_input(name, DLTensor*)`",
    "set_index": "`set_input(index, DLTensor*)`",
    "zero_copy": "`set_input_zero_copy(name, DLTensor*)`",
    "get_output": "`get_output(0)` returning an NDArray, then `TVMArrayFree`",
    "get_into": "`get_output(0, DLTensor*)` (a copy into the host's)",
    "from_bytes": "`TVMArrayCopyFromBytes`",
    "to_bytes": "`TVMArrayCopyToBytes`",
    "alloc_free": "`TVMArrayAlloc` + `TVMArrayFree`",
    "retain_free": "`TVMObjectRetain` + `TVMObjectFree`",
    "run_node": f"a run of a {nodes}-node chain, per node (its kernels included)",
}
per = {}
for line in open(path):
    case, lib, a, b = line.split()
    # The driver runs the chain a twentieth as often as the other cases.
    calls = (long_ - short) // 20 * nodes if case == "run_node" else long_ - short
    per[(case, lib == upstream)] = (int(b) - int(a)) / calls
print("| instructions per call | upstream v0.16 | this runtime | ratio |")
print("|---|---|---|---|")
for case, name in names.items():
    u, o = per[(case, True)], per[(case, False)]
    print(f"| {name} | {u:.0f} | {o:.0f} | {o / u:.2f}x |")
EOF
rm -f "$out"
