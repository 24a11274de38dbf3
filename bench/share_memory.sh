#!/usr/bin/env bash
# Weight-sharing memory benchmark: ours vs upstream TVM 0.16's runtime on the same model.
#   bench/share_memory.sh        (builds the ResNet-18 models on first use, a few minutes)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
eval "$(scripts/tvm_env.sh --no-venv)"
models=target/bench-models
if [ ! -f $models/resnet18_unbound/lib.so ] || [ ! -f $models/resnet18_unbound_b8/lib.so ]; then
  scripts/make_fixtures.sh --bench --only resnet18_unbound,resnet18_unbound_b8
fi
cargo build --release --lib --quiet
mkdir -p target/bench
cc -O2 -o target/bench/share_memory bench/share_memory.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" \
  -L target/release -ltvm_runtime
upstream_dir=$(dirname "$TVM_UPSTREAM_RUNTIME")
for k in 1 2 4 8; do
  for rt in ours upstream; do
    libdir=$repo/target/release; [ $rt = upstream ] && libdir=$upstream_dir
    echo "== $rt, K=$k, resnet18 (batch 1)"
    TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$libdir target/bench/share_memory $models/resnet18_unbound $k
  done
done
for rt in ours upstream; do
  libdir=$repo/target/release; [ $rt = upstream ] && libdir=$upstream_dir
  echo "== $rt, batch 1 + batch 8 sharing weights"
  TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$libdir target/bench/share_memory $models/resnet18_unbound 2 $models/resnet18_unbound_b8
done
echo "== ours, batch 1 + batch 8 sharing weights and one activation arena"
TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$repo/target/release target/bench/share_memory $models/resnet18_unbound 2 \
  $models/resnet18_unbound_b8 arena
