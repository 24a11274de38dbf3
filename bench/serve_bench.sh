#!/usr/bin/env bash
# Ray Serve: ResNet-18 by tvmrt.serve in shapes of replicas x runs in flight against the usual way (TVM's
# Python on upstream's runtime v0.16, each of 4 replicas loading its model): 16 clients, node
# memory (sum of the replicas' PSS), requests/s, p50/p99 (bench/serve_bench.py).
# usage: bench/serve_bench.sh [ROUNDS] [SECONDS] [shapes|batching [resnet18|wide_mlp]]
# (`batching`: the batch-1 build alone against batching over the batch-1 and batch-8 builds)
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/tvm_env.sh)"
upstream=${TVM_UPSTREAM_SHARED:-$PWD/../shared/upstream}
need=()
case "${3:-shapes} ${4:-resnet18}" in
  *" wide_mlp") models=(wide_mlp wide_mlp_b8) ;;
  "batching "*) models=(resnet18_unbound resnet18_unbound_b8) ;;
  *) models=(resnet18_unbound) ;;
esac
for m in "${models[@]}"; do
  [ -f target/bench-models/$m/lib.so ] || need+=($m)
done
[ ${#need[@]} -eq 0 ] || scripts/make_fixtures.sh --bench --only "$(IFS=,; echo "${need[*]}")"
venv=target/serve-bench-venv
if [ ! -f $venv/.complete ]; then
  py=$( (command -v pyenv >/dev/null && pyenv prefix 3.11 2>/dev/null | head -1) || true)
  "${py:+$py/bin/}python3" -m venv $venv
  # The usual side runs TVM's Python (the hhb wheel, numpy<2) in the same interpreter.
  $venv/bin/pip install -q --upgrade pip
  $venv/bin/pip install -q "ray[serve]" "numpy<2" decorator attrs psutil typing_extensions cloudpickle tornado scipy
  touch $venv/.complete
fi
$venv/bin/pip wheel -q ./python --no-deps -w target/serve-bench-dist
$venv/bin/pip install -q --force-reinstall --no-deps target/serve-bench-dist/tvmrt-*.whl
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GB; TVM_NUM_THREADS=1 in every replica"
env -u PYTHONPATH -u TVMRT_LIBRARY RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 $venv/bin/python bench/serve_bench.py \
  target/bench-models "$upstream" "$TVM_WHEEL_DIR" "${1:-3}" "${2:-20}" "${3:-shapes}" "${4:-resnet18}"
