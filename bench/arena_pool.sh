#!/usr/bin/env bash
# A pool of activation arenas against executors with their own (today's default) and upstream's
# runtime, in a server's shape: ResNet-18 at batch 1, 2, 4 and 8, an LSTM and a small transformer
# at sequence lengths 8, 16, 32 and 64 (params unbound, one set of weights shared), four executors
# of each, two host threads running random executors for SECONDS; and one executor alone (the pool
# must not cost it).
#   bench/arena_pool.sh [ROUNDS [SECONDS [PART]]] > out.md   (3 rounds of 10 s, all; PART: all,
#   cpu, opencl, or one CPU case: resnet, lstm, transformer, alone;
#   builds the models on first use, a few minutes; the OpenCL part needs upstream's OpenCL build
#   and an OpenCL device)
# On OpenCL: ResNet-18 at batch 1 and 4 on device 0 for 3 x SECONDS (a run there takes about a
# second per image on pocl), memory counted as live device bytes (the counting shim between each
# runtime and the OpenCL library, as bench/opencl_bench.sh).
# Each round runs the three sides in turn, in processes of their own. Throughput counts samples (a
# batch-8 run is 8, a length-32 run 32) per second; memory is VmData at the end (all arenas made).
# The pool is the default one an upstream host gets with TVM_RT_ARENA_POOL=2: no new calls.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-3}
seconds=${2:-10}
part=${3:-all}
eval "$(scripts/tvm_env.sh --no-venv)"
. bench/lib.sh
models=target/bench-models
resnet="resnet18_unbound:1 resnet18_unbound_b2:2 resnet18_unbound_b4:4 resnet18_unbound_b8:8"
lstm="lstm_s8:8 lstm_s16:16 lstm_s32:32 lstm_s64:64"
transformer="transformer_s8:8 transformer_s16:16 transformer_s32:32 transformer_s64:64"
need=()
for m in $resnet $lstm $transformer; do [ -f "$models/${m%%:*}/lib.so" ] || need+=("${m%%:*}"); done
[ ${#need[@]} -eq 0 ] || scripts/make_fixtures.sh --bench --only "$(IFS=,; echo "${need[*]}")" >&2
cargo build --release --lib --quiet
mkdir -p target/bench
cc -O2 -o target/bench/arena_pool bench/arena_pool.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" \
  -L target/release -ltvm_runtime -lpthread -ldl
ours=$repo/target/release
upstream=$repo/../shared/upstream
[ -f "$upstream/libtvm_runtime.so" ] || upstream=$(dirname "$TVM_UPSTREAM_RUNTIME")
# The processes' outputs: a temporary folder, or ARENA_POOL_OUT (kept, and read again by the
# summary, so parts run separately print one table: the summary covers every case found there).
if [ -n "${ARENA_POOL_OUT:-}" ]; then
  out=$ARENA_POOL_OUT
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

# case NAME THREADS PER_VARIANT MODEL:WEIGHT...: every side, alternated, `rounds` times (MODELS,
# OURS_ENV, UPSTREAM_ENV and UPSTREAM_LIB from the caller, if set).
case_() {
  local name=$1 threads=$2 per=$3
  shift 3
  local dirs=() m
  for m in "$@"; do dirs+=("${MODELS:-$models}/$m"); done
  for r in $(seq "$rounds"); do
    for side in pool own upstream; do
      local lib=$ours pool=0 extra=${OURS_ENV:-}
      [ $side = pool ] && pool=2
      [ $side = upstream ] && lib=${UPSTREAM_LIB:-$upstream} extra=${UPSTREAM_ENV:-}
      # shellcheck disable=SC2086
      env $extra TVM_RT_ARENA_POOL=$pool TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$lib \
        target/bench/arena_pool "$seconds" "$threads" "$per" "${dirs[@]}" > "$out/$name.$side.$r"
    done
  done
}

cases=""
# A part: all, cpu, opencl, or one CPU case by name (resnet, lstm, transformer, alone).
runs_case() { [ "$part" = all ] || [ "$part" = cpu ] || [ "$part" = "$1" ]; }
runs_case resnet && case_ resnet 2 4 $resnet && cases="$cases resnet"
runs_case lstm && case_ lstm 2 4 $lstm && cases="$cases lstm"
runs_case transformer && case_ transformer 2 4 $transformer && cases="$cases transformer"
runs_case alone && case_ alone 1 1 resnet18_unbound:1 && cases="$cases alone"
if [ "$part" = all ] && ! [ -f "${TVM_UPSTREAM_SHARED:-$PWD/../shared/upstream}/libtvm_runtime.so" ]; then
  echo "arena_pool: no upstream OpenCL runtime: the OpenCL part is skipped" >&2
  part=cpu
fi
if [ "$part" = all ] || [ "$part" = opencl ]; then
  eval "$(scripts/tvm_env.sh)"
  opencl_models resnet18_unbound_cl_b1 resnet18_unbound_cl_b4
  cc -O1 -shared -fPIC -o target/bench/libopencl_shim.so c_tests/opencl_shim.c -ldl -lpthread
  mkdir -p target/bench/shim-as-loader
  ln -sf ../libopencl_shim.so target/bench/shim-as-loader/libOpenCL.so
  shim=$repo/target/bench/libopencl_shim.so
  # Programs compiled once per side: ours from its cache, upstream's from pocl's.
  MODELS=target/bench-models-cl UPSTREAM_LIB="$repo/target/bench/shim-as-loader:$(upstream_opencl)" \
    OURS_ENV="ARENA_DEVICE=4 DEVICE_BYTES=$shim TVM_RT_OPENCL_LIBRARY=$shim TVM_RT_OPENCL_PROGRAM_CACHE=$repo/target/bench/cl-cache" \
    UPSTREAM_ENV="ARENA_DEVICE=4 DEVICE_BYTES=$shim" seconds=$((seconds * 3)) \
    case_ opencl 2 4 resnet18_unbound_cl_b1:1 resnet18_unbound_cl_b4:4
  cases="$cases opencl"
fi

for c in resnet lstm transformer alone opencl; do
  [ -f "$out/$c.upstream.$rounds" ] && ! [[ " $cases " == *" $c "* ]] && cases="$cases $c"
done
python3 - "$out" "$rounds" $cases <<'PY'
import json, statistics, sys
out, rounds, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def runs(name, side):
    rows = []
    for r in range(1, rounds + 1):
        lines = open(f"{out}/{name}.{side}.{r}").read().splitlines()
        res = [l for l in lines if l.startswith("result ")][-1].split()[1:]
        rep = [json.loads(l[7:]) for l in lines if l.startswith("report ")]
        # Memory above the process's baseline (libraries and params blob loaded, no executor).
        rows.append({"sps": float(res[1]), "data": (int(res[3]) - int(res[5])) / 1024, "reports": rep})
    return rows
def cell(v, d=1):
    return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}-{max(v):.{d}f})"
titles = {"resnet": "ResNet-18 b1/b2/b4/b8, 4 executors each (16), 2 threads",
          "lstm": "LSTM lengths 8/16/32/64, 4 executors each (16), 2 threads",
          "transformer": "Transformer (2 layers, d 512, batch 8) lengths 8/16/32/64, 4 executors each (16), 2 threads",
          "alone": "ResNet-18 b1, one executor, 1 thread",
          "opencl": "OpenCL: ResNet-18 b1/b4, 4 executors each (8), 2 threads; memory: device bytes"}
titles = {k: v for k, v in titles.items() if k in cases}
print("| case | side | samples/s | memory MiB above the baseline (VmData; device bytes on OpenCL) | samples/s vs own arenas | memory vs own arenas | samples/s vs upstream | memory vs upstream |")
print("|---|---|---|---|---|---|---|---|")
for name, title in titles.items():
    sides = {s: runs(name, s) for s in ("pool", "own", "upstream")}
    med = {s: (statistics.median(r["sps"] for r in v), statistics.median(r["data"] for r in v)) for s, v in sides.items()}
    for s, label in (("pool", "ours, pool of 2"), ("own", "ours, own arenas"), ("upstream", "upstream")):
        v = sides[s]
        ratios = [f"{med[s][0] / med[o][0]:.3f} | {med[s][1] / med[o][1]:.3f}" if s != o else "- | -" for o in ("own", "upstream")]
        print(f"| {title} | {label} | {cell([r['sps'] for r in v], 2)} | {cell([r['data'] for r in v])} | {' | '.join(ratios)} |")
print()
print("Pool figures (ours, pool of 2, the executors' reports of the last round; the bound is the weights,")
print("the derived weights, 2 arenas of the largest member and every executor's inputs and outputs):")
print()
MiB = 2**20
for name, title in titles.items():
    last = runs(name, "pool")[-1]
    reps = last["reports"]
    p = reps[0]["pool"]
    own = runs(name, "own")[-1]["reports"]
    allp = runs(name, "pool")
    waits = sum(x["reports"][0]["pool"]["waits"] for x in allp)
    leases = sum(x["reports"][0]["pool"]["leases"] for x in allp)
    waited = sum(x["reports"][0]["pool"]["waited_ms"] for x in allp)
    weights = max(r["weights_shared"] + r["weights_owned"] for r in reps)
    derived = max(r["weights_derived"] for r in reps)
    io = sum(r["activations"] for r in reps)
    bound = weights + derived + 2 * p["arena_bytes"] + io
    own_arenas = sum(r["activation_arena"] for r in own)
    print(f"- {title}: {p['arenas']} arenas of {p['arena_bytes'] / MiB:.1f} MiB for {p['members']} executors "
          f"(without the pool their arenas take {own_arenas / MiB:.1f} MiB); bound {bound / MiB:.1f} MiB = weights "
          f"{weights / MiB:.1f} + derived {derived / MiB:.1f} + 2 arenas {2 * p['arena_bytes'] / MiB:.1f} + inputs "
          f"and outputs {io / MiB:.1f}, measured {statistics.median(r['data'] for r in allp):.1f} MiB above the "
          f"baseline; runs that waited for an arena: {waits} of {leases}, {waited:.0f} ms in all over {rounds} rounds")
PY
