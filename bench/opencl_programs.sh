#!/usr/bin/env bash
# Programs compiled once, against upstream v0.16 built with OpenCL (../shared/upstream): milliseconds
# of load + programs + create + load_params + the first run (c_tests/cxx/precompiled_programs.cc
# --time, the way upstream's rtvm uses opencl.Get/SetPreCompiledPrograms), pocl's own kernel cache
# off (POCL_KERNEL_CACHE=0), each figure from ROUNDS processes alternating the runtimes:
#   cold: every program built from source;
#   blob: the library's own blob set first (rtvm --pre-compiled, the second launch);
#   cache: ours only, TVM_RT_OPENCL_PROGRAM_CACHE warm (no host code).
#   bench/opencl_programs.sh [ROUNDS] [MODEL...]   (default: mobilenet_cl resnet18_unbound_cl_b1;
#   mobilenet_tex_cl is the texture build; models are built on first use)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-5}
shift $(($# > 0 ? 1 : 0))
list=("$@")
[ ${#list[@]} -gt 0 ] || list=(mobilenet_cl resnet18_unbound_cl_b1)
eval "$(scripts/tvm_env.sh)"
. bench/lib.sh
upstream=$(upstream_opencl)
models=target/bench-models-cl
opencl_models "${list[@]}"
cargo build --release --quiet --lib
mkdir -p target/bench
dmlc=$(dirname "$TVM_UPSTREAM_INCLUDE")/dmlc-core/include
c++ -std=c++17 -O2 -DDMLC_USE_LOGGING_LIBRARY='<tvm/runtime/logging.h>' -I"$TVM_UPSTREAM_INCLUDE" \
  -I"$TVM_DLPACK_INCLUDE" -I"$dmlc" c_tests/cxx/precompiled_programs.cc -o target/bench/precompiled_programs \
  -Ltarget/release -ltvm_runtime
host=target/bench/precompiled_programs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export POCL_KERNEL_CACHE=0

ours=$repo/target/release
echo "| $(nproc) cores, pocl with its cache off: ms of load + programs + create + load_params + first run | ours: median (min-max) | upstream | ours / upstream |"
echo "|---|---|---|---|"
for m in "${list[@]}"; do
  dir=$models/$m
  # The blobs, written once by each library (untimed).
  LD_LIBRARY_PATH=$ours "$host" --time "$dir" "$work/$m.ours.bin" >/dev/null 2>&1
  LD_LIBRARY_PATH=$upstream "$host" --time "$dir" "$work/$m.upstream.bin" >/dev/null 2>&1
  alternate 1 "$host" --time "$dir" -
  row "$m: cold (every program built)" 0
  # Each library reads its own blob: the file name differs by side.
  blob_o="" blob_u=""
  for _ in $(seq "$rounds"); do
    blob_o+="$(LD_LIBRARY_PATH=$ours "$host" --time "$dir" "$work/$m.ours.bin" 2>/dev/null | tail -1) "
    blob_u+="$(LD_LIBRARY_PATH=$upstream "$host" --time "$dir" "$work/$m.upstream.bin" 2>/dev/null | tail -1) "
  done
  O=$blob_o U=$blob_u row "$m: the library's own blob set first (written after a first run)" 0
  fill="" warm=""
  for r in $(seq "$rounds"); do
    fill+="$(TVM_RT_OPENCL_PROGRAM_CACHE=$work/cache-$m-$r LD_LIBRARY_PATH=$ours "$host" --time "$dir" - 2>/dev/null | tail -1) "
    warm+="$(TVM_RT_OPENCL_PROGRAM_CACHE=$work/cache-$m-$r LD_LIBRARY_PATH=$ours "$host" --time "$dir" - 2>/dev/null | tail -1) "
  done
  O=$fill U="" row "$m: ours, program cache on and empty (builds, exports, stores)" 0
  O=$warm U="" row "$m: ours, program cache warm (no host code)" 0
done
