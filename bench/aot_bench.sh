#!/usr/bin/env bash
# The AOT executor: this runtime against upstream's AOT executor on the same artefacts, and against
# the graph executor on a graph build of the same network, with one C driver (bench/aot_bench.c),
# alternating the runtimes in processes of their own ROUNDS times per figure; then the memory of K
# executors of one artefact on each runtime (USMP builds hold their weights in the constant pool,
# which upstream copies into every executor).
#   bench/aot_bench.sh [ROUNDS] [K]   (builds the benchmark models on first use, a few minutes)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-5}
k=${2:-4}
eval "$(scripts/tvm_env.sh)"
export TOPHUB_LOCATION=NONE TVM_FFI=ctypes
models=target/bench-models-aot
for m in mlp_aot mlp_aot_usmp mlp_graph resnet18_aot resnet18_aot_usmp resnet18_graph; do
  [ -f $models/$m/lib.so ] || PYTHONPATH=$TVM_WHEEL_DIR "$TVM_PYTHON" scripts/make_aot_fixtures.py --bench --only $m --out $models
done
cargo build --release --quiet
mkdir -p target/bench
cc -O2 -o target/bench/aot_bench bench/aot_bench.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" -ldl \
  -L target/release -ltvm_runtime
ours=$repo/target/release
. bench/lib.sh
upstream=$(upstream_opencl)
# As lib.sh's `alternate`, a run that fails (upstream's USMP MLP corrupts its heap and aborts)
# counting for nothing: its side prints "-".
alternate() {
  local field=$1
  shift
  O="" U=""
  for _ in $(seq "$rounds"); do
    # shellcheck disable=SC2086
    O+="$( (env ${OURS_ENV:-} LD_LIBRARY_PATH="$ours" "$@" 2>/dev/null || true) | tail -1 | cut -d' ' -f"$field") "
    # shellcheck disable=SC2086
    U+="$( (env ${UPSTREAM_ENV:-} LD_LIBRARY_PATH="$upstream" "$@" 2>/dev/null || true) | tail -1 | cut -d' ' -f"$field") "
  done
}

echo "| figure | ours: median (min-max) | upstream: median (min-max) | ratio of medians |"
echo "|---|---|---|---|"
for net in mlp resnet18; do
  n=$([ $net = mlp ] && echo 2001 || echo 51)
  for kind in aot aot_usmp; do
    OURS_ENV="TVM_NUM_THREADS=1" UPSTREAM_ENV="TVM_NUM_THREADS=1" alternate 1 target/bench/aot_bench latency $models/${net}_$kind $n
    row "$net, $kind: run, us (1 thread)" 2
  done
  # The graph executor on ours against the AOT executor on ours: "upstream" here is the AOT build.
  O="" U=""
  for _ in $(seq "$rounds"); do
    O+="$(env TVM_NUM_THREADS=1 LD_LIBRARY_PATH="$ours" target/bench/aot_bench graph $models/${net}_graph $n | tail -1) "
    U+="$(env TVM_NUM_THREADS=1 LD_LIBRARY_PATH="$ours" target/bench/aot_bench latency $models/${net}_aot $n | tail -1) "
  done
  row "$net: the graph executor's run against the AOT executor's, both ours, us" 2
done
for net in mlp resnet18; do
  for kind in aot aot_usmp; do
    alternate 1 target/bench/aot_bench memory $models/${net}_$kind "$k"
    row "$net, $kind: resident kB with one executor run" 0
    alternate 2 target/bench/aot_bench memory $models/${net}_$kind "$k"
    row "$net, $kind: resident kB per further executor ($k in all)" 0
  done
done
