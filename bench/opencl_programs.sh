#!/usr/bin/env bash
# Programs compiled once, against upstream v0.16 built with OpenCL (../shared/upstream): milliseconds
# of load + programs + create + load_params + the first run (c_tests/cxx/precompiled_programs.cc
# --time, the way upstream's rtvm uses opencl.Get/SetPreCompiledPrograms), pocl's own kernel cache
# off (POCL_KERNEL_CACHE=0), each figure from ROUNDS processes alternating the runtimes:
#   cold: every program built from source;
#   blob: the library's own blob set first (rtvm --pre-compiled, the second launch);
#   cache: ours only, TVM_RT_OPENCL_PROGRAM_CACHE warm (no host code).
#   bench/opencl_programs.sh [ROUNDS]   (builds the benchmark models on first use)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-5}
eval "$(scripts/tvm_env.sh)"
upstream=${TVM_UPSTREAM_SHARED:-$repo/../shared/upstream}
[ -f "$upstream/libtvm_runtime.so" ] || { echo "no upstream OpenCL runtime in $upstream" >&2; exit 1; }
models=target/bench-models-cl
need=()
for m in mobilenet_cl resnet18_unbound_cl_b1; do [ -f $models/$m/lib.so ] || need+=($m); done
if [ ${#need[@]} -gt 0 ]; then
  TVM_FFI=ctypes PYTHONPATH="$TVM_WHEEL_DIR" "$TVM_PYTHON" scripts/make_opencl_fixtures.py build --bench \
    --out $models --only "$(IFS=,; echo "${need[*]}")"
fi
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

ours() { LD_LIBRARY_PATH=$repo/target/release "$@" 2>/dev/null | tail -1; }
theirs() { LD_LIBRARY_PATH=$upstream "$@" 2>/dev/null | tail -1; }

row() {  # row LABEL "ours figures" "upstream figures"
  python3 - "$@" <<'PY'
import statistics, sys
label, o, u = sys.argv[1], [float(x) for x in sys.argv[2].split()], sys.argv[3].split()
mo = statistics.median(o)
if u:
    u = [float(x) for x in u]
    mu = statistics.median(u)
    print(f"| {label} | {mo:.0f} ({min(o):.0f}-{max(o):.0f}) | {mu:.0f} ({min(u):.0f}-{max(u):.0f}) | {mo / mu:.2f} |")
else:
    print(f"| {label} | {mo:.0f} ({min(o):.0f}-{max(o):.0f}) | - | - |")
PY
}

echo "| $(nproc) cores, pocl with its cache off: ms of load + programs + create + load_params + first run | ours: median (min-max) | upstream | ours / upstream |"
echo "|---|---|---|---|"
for m in mobilenet_cl resnet18_unbound_cl_b1; do
  dir=$models/$m
  # The blobs, written once by each library (untimed).
  ours "$host" --time "$dir" "$work/$m.ours.bin" >/dev/null
  theirs "$host" --time "$dir" "$work/$m.upstream.bin" >/dev/null
  cold_o=() cold_u=() blob_o=() blob_u=() fill_o=() warm_o=()
  for r in $(seq "$rounds"); do
    cold_o+=("$(ours "$host" --time "$dir" -)")
    cold_u+=("$(theirs "$host" --time "$dir" -)")
    blob_o+=("$(ours "$host" --time "$dir" "$work/$m.ours.bin")")
    blob_u+=("$(theirs "$host" --time "$dir" "$work/$m.upstream.bin")")
    fill_o+=("$(TVM_RT_OPENCL_PROGRAM_CACHE=$work/cache-$m-$r ours "$host" --time "$dir" -)")
    warm_o+=("$(TVM_RT_OPENCL_PROGRAM_CACHE=$work/cache-$m-$r ours "$host" --time "$dir" -)")
  done
  row "$m: cold (every program built)" "${cold_o[*]}" "${cold_u[*]}"
  row "$m: the library's own blob set first (written after a first run)" "${blob_o[*]}" "${blob_u[*]}"
  row "$m: ours, program cache on and empty (builds, exports, stores)" "${fill_o[*]}" ""
  row "$m: ours, program cache warm (no host code)" "${warm_o[*]}" ""
done
