#!/usr/bin/env bash
# What each C entry point a host calls per request costs, this runtime against upstream v0.16.0
# (../shared/upstream, built from source), the same driver (bench/call_costs.c) in processes of
# their own, alternated ROUNDS times: medians with (min-max), and the ratio of the medians. Each
# process reports the least of 7 timed loops per case (noise only adds).
#   bench/call_costs.sh [ROUNDS]       (builds the chain-of-200-operators model on first use)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-7}
eval "$(scripts/tvm_env.sh)"
models=target/bench-models
. bench/lib.sh
call_costs_driver
upstream=$(upstream_opencl)
model=tests/fixtures/multi_io
out=$(mktemp -d)
for _ in $(seq "$rounds"); do
  TVM_NUM_THREADS=1 LD_LIBRARY_PATH=target/release target/bench/call_costs $model $models/chain200 x >>"$out/ours"
  TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$upstream target/bench/call_costs $model $models/chain200 x >>"$out/upstream"
done
python3 - "$out/ours" "$out/upstream" <<'EOF'
import statistics, sys
cases = [
    "`TVMFuncCall(get_num_outputs)`",
    "`set_input(name, DLTensor*)`",
    "`set_input(index, DLTensor*)`",
    "`set_input_zero_copy(name, DLTensor*)`",
    "`get_output(0)` returning an NDArray, then `TVMArrayFree`",
    "`get_output(0, DLTensor*)` (a copy into the host's)",
    "`TVMArrayCopyFromBytes`",
    "`TVMArrayCopyToBytes`",
    "`TVMArrayAlloc` + `TVMArrayFree`",
    "`TVMObjectRetain` + `TVMObjectFree`",
    "a run of a 200-operator chain, per node",
]
def read(path):
    rows = [list(map(float, line.split())) for line in open(path) if line.strip()]
    for r in rows:
        r[10] /= r[11]  # the run, per node
    return rows
ours, up = read(sys.argv[1]), read(sys.argv[2])
size = int(ours[0][12])
print(f"| ns per call ({size}-byte tensors) | upstream v0.16: median (min-max) | this runtime | ratio |")
print("|---|---|---|---|")
side = lambda v: f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
for k, case in enumerate(cases):
    o, u = [r[k] for r in ours], [r[k] for r in up]
    print(f"| {case} | {side(u)} | {side(o)} | {statistics.median(o) / statistics.median(u):.2f}x |")
EOF
rm -rf "$out"
