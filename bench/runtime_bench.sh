#!/usr/bin/env bash
# Ours vs upstream TVM 0.16's runtime (the hhb-tvm wheel) on the same compiled models under the same C
# driver (bench/runtime_bench.c), alternating the two runtimes in separate processes, ROUNDS times
# per figure; prints medians, spread (min-max of the per-process medians) and ratios (ours / upstream).
#   bench/runtime_bench.sh [ROUNDS]      (builds the benchmark models on first use, ~10 minutes)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-5}
eval "$(scripts/tvm_env.sh --no-venv)"
models=target/bench-models
need=()
for m in resnet18 resnet18_unbound mobilenet squeezenet chain200 lstm_big; do [ -f $models/$m/lib.so ] || need+=($m); done
[ ${#need[@]} -eq 0 ] || scripts/make_fixtures.sh --bench --only "$(IFS=,; echo "${need[*]}")"
cargo build --release --quiet
mkdir -p target/bench
cc -O2 -o target/bench/runtime_bench bench/runtime_bench.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" \
  -L target/release -ltvm_runtime
ours=$repo/target/release
upstream=$(dirname "$TVM_UPSTREAM_RUNTIME")

. bench/lib.sh

# measure LABEL THREADS MODE MODEL [ITERATIONS]: alternate the runtimes, print one table row.
measure() {
  local label=$1 threads=$2 mode=$3 model=$4 iters=${5:-21}
  OURS_ENV="TVM_NUM_THREADS=$threads" UPSTREAM_ENV="TVM_NUM_THREADS=$threads" \
    alternate 1 target/bench/runtime_bench "$mode" "$model" "$iters"
  row "$label" 3 minima
}

echo "| figure | ours: median (min-max) | upstream: median (min-max) | ratio of medians | ratio of minima |"
echo "|---|---|---|---|---|"
mlp=tests/fixtures/mlp_b1
for t in 1 2; do
  measure "MLP latency, us, $t thread(s)" $t latency $mlp 201
  measure "ResNet-18 latency, us, $t thread(s)" $t latency $models/resnet18 11
  measure "MobileNet latency, us, $t thread(s)" $t latency $models/mobilenet 21
  measure "SqueezeNet latency, us, $t thread(s)" $t latency $models/squeezenet 21
  measure "LSTM (unrolled, 32 steps) latency, us, $t thread(s)" $t latency $models/lstm_big 21
done
measure "dispatch per operator node (chain of 200 tiny ops), ns" 1 dispatch $models/chain200 101
measure "TVMFuncCall (get_num_outputs), ns" 1 funccall $mlp 21
measure "set_input (3136 B NDArray), ns" 1 set_input $mlp 21
measure "get_output into an NDArray (40 B), ns" 1 get_output $mlp 21
measure "create + load_params ResNet-18 (unbound weights, 46.8 MB), ms" 1 load $models/resnet18_unbound
for rt in ours upstream; do
  dir=$ours; [ $rt = upstream ] && dir=$upstream
  peaks=()
  for _ in $(seq "$rounds"); do
    peaks+=("$(TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$dir target/bench/runtime_bench load $models/resnet18_unbound | cut -d' ' -f2)")
  done
  echo "peak memory during create + load_params of ResNet-18 ($rt): ${peaks[*]} kB above the process holding the params blob"
done
TVM_NUM_THREADS=1 target/release/tvmrt run $models/resnet18_unbound --repeat 1 --json \
  | python3 -c "import json,sys; m=json.load(sys.stdin)['memory']; w, a = m['weights_owned'] + m['weights_shared'], m['activations']; print(f'ResNet-18 weights + pool: {w} + {a} bytes = {(w + a) // 1024} kB')"
