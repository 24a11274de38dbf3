#!/usr/bin/env bash
# Throughput of K host threads, each running its own executor of one model, on our runtime and on
# upstream's own v0.16 build (../shared/upstream, native thread pool), alternated ROUNDS times per
# row; prints runs per second (median and range over rounds) and the ratio ours / upstream.
#   bench/throughput.sh [ROUNDS] [MODEL_DIR...]   (default: the convnet and LSTM fixtures, and
#   ResNet-18 with unbound params when target/bench-models has it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-3}
shift || true
eval "$(scripts/tvm_env.sh --no-venv)"
upstream=${TVM_UPSTREAM_SHARED:-$repo/../shared/upstream}
[ -f "$upstream/libtvm_runtime.so" ] || upstream=$(dirname "$TVM_UPSTREAM_RUNTIME")
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=(tests/fixtures/convnet tests/fixtures/lstm_seq16)
  [ -f target/bench-models/resnet18_unbound/lib.so ] && models+=(target/bench-models/resnet18_unbound)
fi
cargo build --release --quiet --lib
mkdir -p target/bench
cc -O2 -o target/bench/throughput bench/throughput.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" \
  -L target/release -ltvm_runtime -lpthread
seconds=${SECONDS_PER_RUN:-2}
echo "upstream: $upstream"
echo "| model | TVM_NUM_THREADS | host threads | ours runs/s: median (min-max) | upstream runs/s | ours / upstream |"
echo "|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  for threads in 1 2; do
    for k in 1 2 4; do
      o=() u=()
      for _ in $(seq "$rounds"); do
        o+=("$(TVM_NUM_THREADS=$threads LD_LIBRARY_PATH=$repo/target/release target/bench/throughput "$m" $k "$seconds" | cut -d' ' -f1)")
        u+=("$(TVM_NUM_THREADS=$threads LD_LIBRARY_PATH=$upstream target/bench/throughput "$m" $k "$seconds" | cut -d' ' -f1)")
      done
      python3 - "$(basename "$m")" $threads $k "${o[*]}" "${u[*]}" <<'PY'
import statistics, sys
name, threads, k, o, u = sys.argv[1], sys.argv[2], sys.argv[3], [float(x) for x in sys.argv[4].split()], [float(x) for x in sys.argv[5].split()]
mo, mu = statistics.median(o), statistics.median(u)
print(f"| {name} | {threads} | {k} | {mo:.0f} ({min(o):.0f}-{max(o):.0f}) | {mu:.0f} ({min(u):.0f}-{max(u):.0f}) | {mo / mu:.2f} |")
PY
    done
  done
done
