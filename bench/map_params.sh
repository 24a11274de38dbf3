#!/usr/bin/env bash
# Mapped vs copied weights on ResNet-18 (unbound params, 45 MB): create + load time of ours and
# upstream's runtime, and the proportional set size of K processes running the model from one
# mapped file: the aligned params, or the prepared ones (with the derived weights, folded, from
# `tvmrt prepare-params`).    bench/map_params.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
eval "$(scripts/tvm_env.sh --no-venv)"
models=target/bench-models
[ -f $models/resnet18_unbound/lib.so ] || scripts/make_fixtures.sh --bench --only resnet18_unbound
cargo build --release --quiet
mkdir -p target/bench
cc -O2 -o target/bench/map_params bench/map_params.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" \
  -L target/release -ltvm_runtime
model=$models/resnet18_unbound
aligned=target/bench/resnet18.aligned.params
target/release/tvmrt align-params $model/params.bin $aligned >/dev/null
ours=$repo/target/release
upstream=$(dirname "$TVM_UPSTREAM_RUNTIME")
export TVM_NUM_THREADS=1
run() { LD_LIBRARY_PATH=$1 target/bench/map_params "${@:2}"; }
rounds=15
echo "== create + load_params, median of $rounds rounds (ms), page cache warm"
up=$(run $upstream time $model $model/params.bin copy $rounds)
oc=$(run $ours time $model $model/params.bin copy $rounds)
om=$(run $ours time $model $aligned map $rounds)
echo "upstream, copied: $up"
echo "ours, copied:     $oc  (ratio to upstream $(python3 -c "print(f'{$oc/$up:.3f}')"))"
echo "ours, mapped:     $om  (ratio to upstream $(python3 -c "print(f'{$om/$up:.3f}')"))"
prepared=target/bench/resnet18.prepared.params
target/release/tvmrt prepare-params $model --out $prepared >/dev/null
op=$(run $ours time $model $prepared map $rounds)
echo "ours, prepared:   $op  (ratio to upstream $(python3 -c "print(f'{$op/$up:.3f}')"); mapped, folded, nothing computed at load)"
echo "== PSS per process (kB), K processes running the model at once"
for mode in map prepared copy; do
  for k in 1 2 4; do
    sync=$(mktemp -d)
    for i in $(seq 0 $((k - 1))); do
      params=$aligned how=$mode
      [ $mode = copy ] && params=$model/params.bin
      [ $mode = prepared ] && params=$prepared how=map
      run $ours pss $model $params $how $sync $k $i > $sync/out-$i &
    done
    while [ "$(cat $sync/out-* 2>/dev/null | wc -l)" -lt $k ]; do sleep 0.1; done
    touch $sync/done
    wait
    echo "ours, $mode, K=$k: $(cat $sync/out-* | tr '\n' ' ')"
    rm -rf $sync
  done
done
TVM_NUM_THREADS=1 target/release/tvmrt run $model --map-params --repeat 1 --json --params $aligned \
  | python3 -c "import json,sys; m=json.load(sys.stdin)['memory']; print('memory report (bytes):', m)"
