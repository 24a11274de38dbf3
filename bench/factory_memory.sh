#!/usr/bin/env bash
# Executors made by one factory (bound params: the factory holds the weights), ours against
# upstream's runtime (the wheel's): VmData above the process with the library loaded, K = 1..8.
#   bench/factory_memory.sh    (builds ResNet-18 with bound params on first use)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
eval "$(scripts/tvm_env.sh --no-venv)"
models=target/bench-models
[ -f $models/resnet18/lib.so ] || scripts/make_fixtures.sh --bench --only resnet18
cargo build --release --lib --quiet
mkdir -p target/bench
cc -O2 -o target/bench/factory_memory bench/factory_memory.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" \
  -L target/release -ltvm_runtime
echo "| runtime | K=1 | K=2 | K=4 | K=8 | per added executor |"
echo "|---|---|---|---|---|---|"
for rt in ours upstream; do
  lib=$repo/target/release; [ $rt = upstream ] && lib=$(dirname "$TVM_UPSTREAM_RUNTIME")
  TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$lib target/bench/factory_memory $models/resnet18 8 | python3 -c "
import sys
vm = {int(k): int(v) for _, k, v in (l.split() for l in sys.stdin)}
mib = lambda k: (vm[k] - vm[0]) / 1024
print(f'| $rt | ' + ' | '.join(f'{mib(k):.1f}' for k in (1, 2, 4, 8)) + f' | {(vm[8] - vm[1]) / 7 / 1024:.2f} |')"
done
