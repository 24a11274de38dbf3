#!/usr/bin/env bash
# Models built with params unbound (what weight sharing across batch sizes needs): ResNet-18,
# MobileNet and SqueezeNet at batch 1 and 8, ours (by default weight-only operators fold once a
# second executor shares the weights; with folding for every executor, TVM_RT_FOLD_WEIGHTS=1; and
# with folding off) against upstream's runtime on the same compiled models.
#   bench/unbound.sh [ROUNDS [latency|memory]] > out.md   (both parts by default; builds the six
#   models on first use, a few minutes)
# Latency: per-process medians of runs, ROUNDS processes per runtime, the runtimes alternated; one
# thread against the wheel's runtime, two threads against ../shared/upstream (upstream's own pool).
# Memory: bench/unbound_memory.c grows executors sharing one set of weights, one at a time.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-7}
part=${2:-all}
eval "$(scripts/tvm_env.sh --no-venv)"
models=target/bench-models
nets=${NETS:-"resnet18 mobilenet squeezenet"}
need=()
for net in $nets; do
  for m in ${net}_unbound ${net}_unbound_b8; do [ -f $models/$m/lib.so ] || need+=("$m"); done
done
[ ${#need[@]} -eq 0 ] || scripts/make_fixtures.sh --bench --only "$(IFS=,; echo "${need[*]}")" >&2
cargo build --release --lib --quiet
mkdir -p target/bench
for driver in runtime_bench unbound_memory; do
  cc -O2 -o target/bench/$driver bench/$driver.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" \
    -L target/release -ltvm_runtime
done
ours=$repo/target/release
wheel=$(dirname "$TVM_UPSTREAM_RUNTIME")
native=$repo/../shared/upstream
[ -f "$native/libtvm_runtime.so" ] || native=$wheel

if [ "$part" != memory ]; then
echo "## Latency, ms per run (per-process medians: median (min-max) of $rounds processes)"
echo
echo "| model | threads | ours, folding | ours, folding off (a lone executor's default) | upstream | folding / upstream | folding off / upstream |"
echo "|---|---|---|---|---|---|---|"
for threads in 1 2; do
  up=$wheel; [ "$threads" = 2 ] && up=$native
  for net in $nets; do
    for b in 1 8; do
      dir=$models/${net}_unbound; [ $b = 8 ] && dir=${dir}_b8
      iters=15; [ $b = 8 ] && iters=5
      o=() f=() u=()
      for _ in $(seq "$rounds"); do
        o+=("$(TVM_RT_FOLD_WEIGHTS=1 TVM_NUM_THREADS=$threads LD_LIBRARY_PATH=$ours target/bench/runtime_bench latency "$dir" $iters)")
        f+=("$(TVM_RT_FOLD_WEIGHTS=0 TVM_NUM_THREADS=$threads LD_LIBRARY_PATH=$ours target/bench/runtime_bench latency "$dir" $iters)")
        u+=("$(TVM_NUM_THREADS=$threads LD_LIBRARY_PATH=$up target/bench/runtime_bench latency "$dir" $iters)")
      done
      python3 - "$net b$b" "$threads" "${o[*]}" "${f[*]}" "${u[*]}" <<'PY'
import statistics, sys
label, threads, *series = sys.argv[1:]
series = [[float(x) / 1000 for x in s.split()] for s in series]
med = [statistics.median(s) for s in series]
cells = [f"{m:.2f} ({min(s):.2f}-{max(s):.2f})" for m, s in zip(med, series)]
print(f"| {label} | {threads} | {' | '.join(cells)} | {med[0] / med[2]:.3f} | {med[1] / med[2]:.3f} |")
PY
    done
  done
done
echo
fi
[ "$part" = latency ] && exit 0

echo "## Memory"
echo
for net in $nets; do
  for b in 1 8; do
    other=$models/${net}_unbound; [ $b = 8 ] && other=${other}_b8
    for rt in ours ours-fold ours-nofold upstream; do
      lib=$ours fold=default
      [ $rt = upstream ] && lib=$wheel
      [ $rt = ours-fold ] && fold=1
      [ $rt = ours-nofold ] && fold=0
      echo "== $rt $net b$b"
      env $([ $fold = default ] || echo TVM_RT_FOLD_WEIGHTS=$fold) TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$lib \
        target/bench/unbound_memory 8 $models/${net}_unbound "$other"
    done
  done
done > target/bench/unbound_memory.txt
python3 bench/unbound_table.py target/bench/unbound_memory.txt
