#!/usr/bin/env bash
# Triton: ResNet-18 served by the tvm backend against the usual way (Triton's Python backend running
# TVM's GraphModule on upstream's runtime v0.16), 4 instances each, perf_analyzer over HTTP and gRPC;
# then dynamic batching over b1 and b8 builds against the b1 build alone (bench/triton_bench.py).
# usage: bench/triton_bench.sh [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
eval "$(scripts/tvm_env.sh)"
eval "$(scripts/triton_server.sh)"
upstream=${TVM_UPSTREAM_SHARED:-$repo/../shared/upstream}
need=()
for m in resnet18_unbound resnet18_unbound_b8; do
  [ -f target/bench-models/$m/lib.so ] || need+=($m)
done
[ ${#need[@]} -eq 0 ] || scripts/make_fixtures.sh --bench --only "$(IFS=,; echo "${need[*]}")"
cargo build --release --quiet -p triton-tvm
# perf_analyzer: the binary tritonclient 2.50's wheel carries (the registry's perf-analyzer is a
# placeholder), its two libraries found under the names it asks for in the server's folder.
perf=target/triton/perf
if [ ! -f $perf/.complete ]; then
  rm -rf $perf && mkdir -p $perf/libs
  python3 -m pip download -q --no-deps "tritonclient==2.50.0" -d $perf/wheel
  python3 -c "import zipfile, glob; zipfile.ZipFile(glob.glob('$perf/wheel/*.whl')[0]).extract('tritonclient-2.50.0.data/data/bin/perf_analyzer', '$perf')"
  mv $perf/tritonclient-2.50.0.data/data/bin/perf_analyzer $perf/ && chmod +x $perf/perf_analyzer
  ln -s "$(ls "$TRITON_LIBS"/libb64-*.so.0d)" $perf/libs/libb64.so.0d
  ln -s "$(ls "$TRITON_LIBS"/libcudart-*.so.12*)" $perf/libs/libcudart.so.12
  rm -rf $perf/wheel $perf/tritonclient-2.50.0.data
  touch $perf/.complete
fi
# The Python backend's stub embeds CPython 3.11: TVM's Python (the 0.16 wheel) needs numpy<2 and
# its few pure-Python dependencies beside it.
stub=target/triton/stub-site
if [ ! -f $stub/.complete ]; then
  python3 -m pip install -q --target $stub "numpy<2" decorator attrs psutil typing_extensions cloudpickle scipy
  touch $stub/.complete
fi
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GB; TVM_NUM_THREADS=1 on the usual side"
PERF_ANALYZER=$repo/$perf/perf_analyzer PERF_LIBS=$repo/$perf/libs TRITON_TVM_BACKEND=$repo/target/release/libtriton_tvm.so \
  python3 bench/triton_bench.py target/bench-models "$upstream" "$TVM_WHEEL_DIR" "$repo/$stub" "${1:-3}" "${2:-10}"
