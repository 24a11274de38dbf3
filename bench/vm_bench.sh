#!/usr/bin/env bash
# The Relay VM: this runtime against upstream's on the same executables, the same C driver
# (bench/vm_bench.c), alternating the runtimes in processes of their own ROUNDS times per figure.
# Upstream is v0.16.0 built from source with OpenCL (../shared/upstream, as in every benchmark
# here): it refuses any version string but its own, so the driver sets the executables' (built by
# the hhb-tvm wheel, "0.16.dev0") to its "0.16.0" for it.
#   bench/vm_bench.sh [ROUNDS]      (builds the benchmark VM models on first use, a minute or two)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-5}
eval "$(scripts/tvm_env.sh)"
export TOPHUB_LOCATION=NONE TVM_FFI=ctypes
models=target/bench-models-vm
models_cl=target/bench-models-vm-cl
[ -f $models/resnet18/code.ro ] || PYTHONPATH=$TVM_WHEEL_DIR "$TVM_PYTHON" scripts/make_vm_fixtures.py --bench --out $models
[ -f $models_cl/mlp_big_dyn/code.ro ] || PYTHONPATH=$TVM_WHEEL_DIR "$TVM_PYTHON" scripts/make_vm_fixtures.py \
  --bench --opencl --build-only --only mlp_big_dyn --out $models_cl
. bench/lib.sh
vm_bench_driver
ours=$repo/target/release
upstream=$(upstream_opencl)

echo "| figure | ours: median (min-max) | upstream: median (min-max) | ratio of medians |"
echo "|---|---|---|---|"
OURS_ENV="TVM_NUM_THREADS=1" UPSTREAM_ENV="TVM_NUM_THREADS=1 VM_VERSION=0.16.0" alternate 1 target/bench/vm_bench latency $models/resnet18 21
row "ResNet-18 through the VM, per invoke, us, 1 thread" 0
OURS_ENV="TVM_NUM_THREADS=2" UPSTREAM_ENV="TVM_NUM_THREADS=2 VM_VERSION=0.16.0" alternate 1 target/bench/vm_bench latency $models/resnet18 21
row "ResNet-18 through the VM, per invoke, us, 2 threads" 0
for rows in 1 8 64; do
  OURS_ENV="TVM_NUM_THREADS=1" UPSTREAM_ENV="TVM_NUM_THREADS=1 VM_VERSION=0.16.0" \
    alternate 1 target/bench/vm_bench latency $models/mlp_big_dyn 301 $rows
  row "dynamic-batch MLP (784-1024-1024-10), batch $rows, per invoke, us" 1
done
for n in 20000 99990; do
  OURS_ENV="TVM_NUM_THREADS=1" UPSTREAM_ENV="TVM_NUM_THREADS=1 VM_VERSION=0.16.0" alternate 1 target/bench/vm_bench loop $models/loop $n
  row "a Relay loop of $n iterations (one invoke, a frame per iteration), ms" 0
done
# The VM's own work per invoke: the dynamic MLP fixture (16-8), whose kernels take a few hundred
# instructions.
OURS_ENV="TVM_NUM_THREADS=1" UPSTREAM_ENV="TVM_NUM_THREADS=1 VM_VERSION=0.16.0" \
  alternate 1 target/bench/vm_bench latency tests/fixtures/vm/0.16/mlp_dyn 2001 1
row "dynamic MLP fixture (16-8), batch 1, per set_input + invoke, us" 2
# Control flow and data-dependent shapes, where an invoke is mostly the VM's own work: the control
# model's case 2 (n = 0: its If on the data, the loop not entered), case 0 (the If and 3 loop
# iterations), and the NMS head (valid counts, NMS, argwhere, take: shapes known at run time).
for c in "loop 2|relay.If on the data (control model, n = 0)" "loop 0|relay.If and 3 loop iterations (control model, n = 3)" \
  "nms 0|NMS head (16 boxes, 15 kept)"; do
  set -- ${c%%|*}
  OURS_ENV="TVM_NUM_THREADS=1" UPSTREAM_ENV="TVM_NUM_THREADS=1 VM_VERSION=0.16.0" \
    alternate 1 target/bench/vm_bench case $models/$1 2001 $2
  row "${c#*|}, per set_input + invoke, us" 2
done
OURS_ENV="TVM_NUM_THREADS=1" UPSTREAM_ENV="TVM_NUM_THREADS=1 VM_VERSION=0.16.0" alternate 1 target/bench/vm_bench random $models/mlp_big_dyn 200
row "200 invokes of random batch (1-64): resident kB after the first 20" 0
OURS_ENV="TVM_NUM_THREADS=1" UPSTREAM_ENV="TVM_NUM_THREADS=1 VM_VERSION=0.16.0" alternate 2 target/bench/vm_bench random $models/mlp_big_dyn 200
row "... resident kB after all 200" 0
OURS_ENV="TVM_NUM_THREADS=1" UPSTREAM_ENV="TVM_NUM_THREADS=1 VM_VERSION=0.16.0" alternate 3 target/bench/vm_bench random $models/mlp_big_dyn 200
row "... peak resident kB" 0

# OpenCL: device bytes through the counting shim (bench/opencl_bench.sh does the same for graphs).
if [ -e /etc/OpenCL/vendors/pocl.icd ]; then
  cc -O1 -shared -fPIC -o target/bench/libopencl_shim.so c_tests/opencl_shim.c -ldl -lpthread
  mkdir -p target/bench/shim-as-loader
  ln -sf ../libopencl_shim.so target/bench/shim-as-loader/libOpenCL.so
  shim=$repo/target/bench/libopencl_shim.so
  up_cl=$(upstream_opencl)
  for field in 1 2; do
    upstream="$repo/target/bench/shim-as-loader:$up_cl" \
      OURS_ENV="VM_DEVICE=opencl TVM_RT_OPENCL_LIBRARY=$shim DEVICE_BYTES=$shim" \
      UPSTREAM_ENV="VM_DEVICE=opencl DEVICE_BYTES=$shim VM_VERSION=0.16.0" \
      alternate $field target/bench/vm_bench vms $models_cl/mlp_big_dyn 4
    [ $field = 1 ] && row "OpenCL (pocl), dynamic MLP: device kB of the first VM" 0
    [ $field = 2 ] && row "OpenCL (pocl), dynamic MLP: device kB per VM after the first (K = 4)" 0
  done
fi

# Four processes loading one ResNet-18 VM file: what each after the first adds (PSS), ours with the
# constants mapped from one file (tvmrt.map_constants), upstream deserialising them into each.
pss_added() {  # LIBDIR [ENV...]: "PSS of one alone, added per process of four" in kB
  local lib=$1
  shift
  local one four
  one=$(pss_of 1 "$lib" "$@")
  four=$(pss_of 4 "$lib" "$@")
  python3 -c "print($one, round(($four - $one) / 3))"
}
pss_of() {  # N LIBDIR [ENV...]: the PSS sum (kB) of N resident processes
  local n=$1 lib=$2 pids=() total=0 fifo
  shift 2
  fifo=$(mktemp -u)
  mkfifo "$fifo"
  for _ in $(seq "$n"); do
    env "$@" TVM_NUM_THREADS=1 LD_LIBRARY_PATH="$lib" target/bench/vm_bench resident $models/resnet18 30 >"$fifo" &
    pids+=($!)
    read -r _ pid <"$fifo"
  done
  for p in "${pids[@]}"; do
    total=$((total + $(awk '/^Pss:/ {print $2}' /proc/"$p"/smaps_rollup)))
  done
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -f "$fifo"
  echo "$total"
}
consts=$(mktemp -d)/resnet18.vmconst
# One measurement per round gives both figures (pss_added prints "first added").
O1="" U1="" O2="" U2=""
for _ in $(seq "$rounds"); do
  read -r first added < <(pss_added "$ours" VM_MAP_CONSTANTS="$consts")
  O1+="$first " O2+="$added "
  read -r first added < <(pss_added "$upstream" VM_VERSION=0.16.0)
  U1+="$first " U2+="$added "
done
O=$O2 U=$U2 row "4 processes loading the ResNet-18 VM file: PSS kB each after the first adds" 0
O=$O1 U=$U1 row "... PSS kB of the first process alone" 0
rm -rf "$(dirname "$consts")"
