#!/usr/bin/env bash
# A pool of activation arenas against executors with their own (today's default) and upstream's
# runtime, in a server's shape: ResNet-18 at batch 1, 2, 4 and 8 and an LSTM at sequence lengths
# 8, 16, 32 and 64 (params unbound, one set of weights shared), four executors of each, two host
# threads running random executors for SECONDS; and one executor alone (the pool must not cost it).
#   bench/arena_pool.sh [ROUNDS [SECONDS]] > out.md   (3 rounds of 10 s; builds the models on first
#   use, a few minutes)
# Each round runs the three sides in turn, in processes of their own. Throughput counts samples (a
# batch-8 run is 8, a length-32 run 32) per second; memory is VmData at the end (all arenas made).
# The pool is the default one an upstream host gets with TVM_RT_ARENA_POOL=2: no new calls.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-3}
seconds=${2:-10}
eval "$(scripts/tvm_env.sh --no-venv)"
models=target/bench-models
resnet="resnet18_unbound:1 resnet18_unbound_b2:2 resnet18_unbound_b4:4 resnet18_unbound_b8:8"
lstm="lstm_s8:8 lstm_s16:16 lstm_s32:32 lstm_s64:64"
need=()
for m in $resnet $lstm; do [ -f "$models/${m%%:*}/lib.so" ] || need+=("${m%%:*}"); done
[ ${#need[@]} -eq 0 ] || scripts/make_fixtures.sh --bench --only "$(IFS=,; echo "${need[*]}")" >&2
cargo build --release --lib --quiet
mkdir -p target/bench
cc -O2 -o target/bench/arena_pool bench/arena_pool.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" \
  -L target/release -ltvm_runtime -lpthread
ours=$repo/target/release
upstream=$repo/../shared/upstream
[ -f "$upstream/libtvm_runtime.so" ] || upstream=$(dirname "$TVM_UPSTREAM_RUNTIME")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# case NAME THREADS PER_VARIANT MODEL:WEIGHT...: every side, alternated, `rounds` times.
case_() {
  local name=$1 threads=$2 per=$3
  shift 3
  local dirs=() m
  for m in "$@"; do dirs+=("$models/$m"); done
  for r in $(seq "$rounds"); do
    for side in pool own upstream; do
      local lib=$ours pool=0
      [ $side = pool ] && pool=2
      [ $side = upstream ] && lib=$upstream
      TVM_RT_ARENA_POOL=$pool TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$lib \
        target/bench/arena_pool "$seconds" "$threads" "$per" "${dirs[@]}" > "$out/$name.$side.$r"
    done
  done
}

case_ resnet 2 4 $resnet
case_ lstm 2 4 $lstm
case_ alone 1 1 resnet18_unbound:1

python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def runs(name, side):
    rows = []
    for r in range(1, rounds + 1):
        lines = open(f"{out}/{name}.{side}.{r}").read().splitlines()
        res = [l for l in lines if l.startswith("result ")][-1].split()[1:]
        rep = [json.loads(l[7:]) for l in lines if l.startswith("report ")]
        rows.append({"sps": float(res[1]), "data": int(res[3]) / 1024, "report": rep[-1] if rep else None})
    return rows
def cell(v, d=1):
    return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}-{max(v):.{d}f})"
titles = {"resnet": "ResNet-18 b1/b2/b4/b8, 4 executors each (16), 2 threads",
          "lstm": "LSTM lengths 8/16/32/64, 4 executors each (16), 2 threads",
          "alone": "ResNet-18 b1, one executor, 1 thread"}
print("| case | side | samples/s | VmData MB | samples/s vs own arenas | VmData vs own arenas | samples/s vs upstream | VmData vs upstream |")
print("|---|---|---|---|---|---|---|---|")
for name, title in titles.items():
    sides = {s: runs(name, s) for s in ("pool", "own", "upstream")}
    med = {s: (statistics.median(r["sps"] for r in v), statistics.median(r["data"] for r in v)) for s, v in sides.items()}
    for s, label in (("pool", "ours, pool of 2"), ("own", "ours, own arenas"), ("upstream", "upstream")):
        v = sides[s]
        ratios = [f"{med[s][0] / med[o][0]:.3f} | {med[s][1] / med[o][1]:.3f}" if s != o else "- | -" for o in ("own", "upstream")]
        print(f"| {title} | {label} | {cell([r['sps'] for r in v], 2)} | {cell([r['data'] for r in v])} | {' | '.join(ratios)} |")
print()
print("Pool figures (ours, pool of 2; executor 0's report, last round):")
print()
for name, title in titles.items():
    r = runs(name, "pool")[-1]["report"]
    own = runs(name, "own")[-1]["report"]
    p = r["pool"]
    waits = sum(x["report"]["pool"]["waits"] for x in runs(name, "pool"))
    leases = sum(x["report"]["pool"]["leases"] for x in runs(name, "pool"))
    waited = sum(x["report"]["pool"]["waited_ms"] for x in runs(name, "pool"))
    print(f"- {title}: {p['arenas']} arenas of {p['arena_bytes'] / 2**20:.1f} MiB for {p['members']} executors "
          f"(executor 0's own arena without the pool: {own['activation_arena'] / 2**20:.1f} MiB); "
          f"runs that waited for an arena: {waits} of {leases}, {waited:.0f} ms in all over {rounds} rounds; "
          f"weights shared {r['weights_shared'] / 2**20:.1f} MiB, derived {r['weights_derived'] / 2**20:.1f} MiB")
PY
