#!/usr/bin/env bash
# Ours vs upstream v0.16 built with OpenCL (../shared/upstream/libtvm_runtime.so) on the same models
# built for OpenCL, on the same OpenCL device (pocl's CPU device here), under one C driver
# (bench/opencl_bench.c), alternating the runtimes in separate processes ROUNDS times per figure;
# prints medians, spread (min-max of the per-process figures) and ratios (ours / upstream).
#   bench/opencl_bench.sh [ROUNDS] [all|buffers|textures|device]
# (builds the benchmark models on first use, ~15 minutes; `textures`: the rows of the texture
# builds for TVM's Adreno target only; `device`: the device bytes of ResNet-18's executors and its
# batch-4 variant only, two models)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
rounds=${1:-5}
part=${2:-all}
eval "$(scripts/tvm_env.sh)"
. bench/lib.sh
upstream=$(upstream_opencl)
models=target/bench-models-cl
if [ "$part" = device ]; then
  opencl_models resnet18_unbound_cl_b1 resnet18_unbound_cl_b4
else
  opencl_models mlp_cl mobilenet_cl resnet18_unbound_cl_b1 resnet18_unbound_cl_b4 mobilenet_tex_cl \
    resnet18_tex_cl_b1 resnet18_tex_cl_b4
fi
cargo build --release --quiet
mkdir -p target/bench
cc -O2 -o target/bench/opencl_bench bench/opencl_bench.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" \
  -L target/release -ltvm_runtime -ldl
# Device bytes as a GPU would hold them: the counting OpenCL shim, given to ours by name and to
# upstream's (which opens `libOpenCL.so`) as that name first on its library path; the shim forwards
# to the real loader (libOpenCL.so.1).
cc -O1 -shared -fPIC -o target/bench/libopencl_shim.so c_tests/opencl_shim.c -ldl -lpthread
mkdir -p target/bench/shim-as-loader
ln -sf ../libopencl_shim.so target/bench/shim-as-loader/libOpenCL.so
shim=$repo/target/bench/libopencl_shim.so
ours=$repo/target/release

# measure LABEL FIELD ARGS...: alternate the runtimes, print one table row of output field FIELD
# (FOLD=1 in the environment: ours folds even a lone executor).
measure() {
  local label=$1 field=$2
  shift 2
  OURS_ENV="${FOLD:+TVM_RT_FOLD_WEIGHTS=$FOLD}" alternate "$field" target/bench/opencl_bench "$@"
  row "$label" 1
}

# measure_device LABEL FIELD ARGS...: as `measure`, counting live device bytes.
measure_device() {
  local label=$1 field=$2 up=$upstream
  shift 2
  upstream="$repo/target/bench/shim-as-loader:$up" OURS_ENV="TVM_RT_OPENCL_LIBRARY=$shim DEVICE_BYTES=$shim" \
    UPSTREAM_ENV="DEVICE_BYTES=$shim" alternate "$field" target/bench/opencl_bench "$@"
  row "$label" 0
}

echo "| figure (OpenCL device 0: $(clinfo -l 2>/dev/null | sed -n 's/.*Device #0: //p' | head -1)) | ours: median (min-max) | upstream: median (min-max) | ours / upstream |"
echo "|---|---|---|---|"
if [ "$part" = textures ] || [ "$part" = all ]; then
  # Texture builds (TVM's Adreno target): MobileNet with unbound params, ResNet-18 with its
  # weights bound (the wheel cannot build ResNet's pooling in texture memory with them unbound),
  # both given to `create` + load_params / share_params by the driver.
  tex_mobilenet=$models/mobilenet_tex_cl
  tex_r18=$models/resnet18_tex_cl_b1
  measure "MobileNet (texture build) latency, us" 1 latency $tex_mobilenet 5
  measure "ResNet-18 (texture build) latency, us" 1 latency $tex_r18 5
  measure_device "texture MobileNet: device bytes of the first executor (alone), kB" 1 share $tex_mobilenet 4
  measure_device "texture MobileNet: device bytes of the second, sharing its weights, kB" 2 share $tex_mobilenet 4
  measure_device "texture MobileNet: device bytes per additional executor (K = 4), kB" 3 share $tex_mobilenet 4
  measure_device "texture ResNet-18: device bytes of the first executor (alone), kB" 1 share $tex_r18 4
  measure_device "texture ResNet-18: device bytes of the second, sharing its weights, kB" 2 share $tex_r18 4
  measure_device "texture ResNet-18: device bytes per additional executor (K = 4), kB" 3 share $tex_r18 4
  measure_device "texture ResNet-18: device bytes of a batch-4 build sharing the batch-1 weights, kB" 2 share \
    $tex_r18 2 $models/resnet18_tex_cl_b4
fi
[ "$part" = textures ] && exit 0
if [ "$part" != device ]; then
  measure "MLP latency (runtime overhead per run), us" 1 latency $models/mlp_cl 101
  measure "MobileNet latency, us" 1 latency $models/mobilenet_cl 11
  measure "ResNet-18 (unbound params) latency, a lone executor (ours: unfolded, the default), us" 1 latency \
    $models/resnet18_unbound_cl_b1 5
  FOLD=1 measure "ResNet-18 (unbound params) latency, folding on the device (ours: TVM_RT_FOLD_WEIGHTS=1), us" 1 \
    latency $models/resnet18_unbound_cl_b1 5
  measure "create + load_params + first run (programs built) ResNet-18, ms" 1 load $models/resnet18_unbound_cl_b1
  measure "VmData of the first ResNet-18 executor (alone), kB" 1 share $models/resnet18_unbound_cl_b1 4
  measure "VmData of the second, sharing its weights (ours: folding's results, once), kB" 2 share \
    $models/resnet18_unbound_cl_b1 4
  measure "VmData per additional ResNet-18 executor after the second (K = 4), kB" 3 share $models/resnet18_unbound_cl_b1 4
  measure "VmData of a batch-4 build sharing the batch-1 weights, kB" 2 share $models/resnet18_unbound_cl_b1 2 \
    $models/resnet18_unbound_cl_b4
fi

measure_device "device bytes of the first ResNet-18 executor (alone), kB" 1 share $models/resnet18_unbound_cl_b1 4
measure_device "device bytes of the second, sharing its weights, kB" 2 share $models/resnet18_unbound_cl_b1 4
measure_device "device bytes per additional ResNet-18 executor after the second (K = 4), kB" 3 share \
  $models/resnet18_unbound_cl_b1 4
measure_device "device bytes of a batch-4 build sharing the batch-1 weights, kB" 2 share \
  $models/resnet18_unbound_cl_b1 2 $models/resnet18_unbound_cl_b4
