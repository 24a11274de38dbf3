#!/usr/bin/env bash
# The Python package against TVM's own Python (its GraphModule on upstream's runtime, v0.16) and
# ONNX Runtime, in processes of their own, sides alternated round by round:
#   - a request's overhead on the smallest model (the MLP): set the input, run, copy the output
#     out, less the model's own run time;
#   - ResNet-18 at TVM_NUM_THREADS=1 from one and two Python threads on one tvmrt.Model;
#   - memory: one Model serving 4 threads against 4 GraphModules; the MLP on all three.
# usage: bench/python_bench.sh [ROUNDS]   (needs target/bench-models/resnet18: scripts/make_fixtures.sh --bench)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
eval "$(scripts/tvm_env.sh)"
upstream=${TVM_UPSTREAM_SHARED:-$PWD/../shared/upstream}
[ -f target/bench-models/resnet18/lib.so ] || scripts/make_fixtures.sh --bench --only resnet18
venv=target/bench-py
if [ ! -x $venv/bin/python ]; then
  "$TVM_PYTHON" -c 'import sys; print(sys.base_prefix)' >/dev/null
  "$(dirname "$(readlink -f "$TVM_PYTHON")")/python3" -m venv $venv 2>/dev/null || python3 -m venv $venv
  $venv/bin/pip install -q --upgrade pip
fi
# Checked every time: a venv made by an older version of this script may lack one.
$venv/bin/python -c 'import numpy, onnx, onnxruntime' 2>/dev/null || $venv/bin/pip install -q onnx onnxruntime numpy
$venv/bin/pip wheel -q ./python --no-deps -w target/bench-py-dist
$venv/bin/pip install -q --force-reinstall --no-deps target/bench-py-dist/tvmrt-*.whl
export TVM_NUM_THREADS=1
ours() { env -u PYTHONPATH $venv/bin/python bench/python_bench.py "$@"; }
theirs() {
  TVM_FFI=ctypes TVM_USE_RUNTIME_LIB=1 TVM_LIBRARY_PATH="$upstream" PYTHONPATH="$TVM_WHEEL_DIR" \
    "$TVM_PYTHON" bench/python_bench.py "$@"
}
stats() { python3 -c '
import statistics, sys
v = [float(x) for x in sys.argv[1].split()]
print(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")' "$1"; }
med() { python3 -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1].split()))' "$1"; }

echo "machine: $(nproc) cores, $(python3 -c 'import platform; print(platform.processor() or platform.machine())'); $rounds rounds, sides alternated"
mlp=tests/fixtures/mlp_b1
echo
echo "Per request on $mlp (set the input, run, copy the output out), us: median (min-max) of $rounds processes"
T="" R="" G="" O="" TM="" RM=""
for _ in $(seq "$rounds"); do
  read -r t tm < <(theirs overhead tvm $mlp); T+="$t "; TM+="$tm "
  read -r r rm < <(ours overhead tvmrt $mlp); R+="$r "; RM+="$rm "
  read -r g _ < <(ours overhead tvmrt-gm $mlp); G+="$g "
  read -r o _ < <(ours overhead ort tests/fixtures/mlp_unbound_b1); O+="$o "
done
echo "| | request | model's own run | overhead |"
echo "|---|---|---|---|"
mt=$(med "$TM"); mr=$(med "$RM")
echo "| TVM's GraphModule (upstream's runtime) | $(stats "$T") | $(stats "$TM") | $(python3 -c "print(f'{$(med "$T") - $mt:.2f}')") |"
echo "| tvmrt Model.run | $(stats "$R") | $(stats "$RM") | $(python3 -c "print(f'{$(med "$R") - $mr:.2f}')") |"
echo "| tvmrt set_input/run/get_output | $(stats "$G") | $(stats "$RM") | $(python3 -c "print(f'{$(med "$G") - $mr:.2f}')") |"
echo "| ONNX Runtime (the MLP exported to ONNX, 1 thread) | $(stats "$O") | - | - |"
python3 -c "
t, r, g, mt, mr = $(med "$T"), $(med "$R"), $(med "$G"), $mt, $mr
print(f'overhead ratio (tvmrt / TVM): Model.run {(r - mr) / (t - mt):.2f}x, GraphModule calls {(g - mr) / (t - mt):.2f}x')"

resnet=target/bench-models/resnet18
echo
echo "ResNet-18, TVM_NUM_THREADS=1, runs/s of one tvmrt.Model: median (min-max) of $rounds processes of 5 s"
ONE="" TWO=""
for _ in $(seq "$rounds"); do
  ONE+="$(ours threads $resnet 1 5) "
  TWO+="$(ours threads $resnet 2 5) "
done
echo "| 1 thread | $(stats "$ONE") |"
echo "| 2 threads | $(stats "$TWO") |"
python3 -c "print(f'speed-up: {$(med "$TWO") / $(med "$ONE"):.2f}x')"

echo
echo "Memory, MB (VmRSS at the end; growth from loading the model and serving): median of $rounds processes"
echo "| model | threads | side | VmRSS | growth |"
echo "|---|---|---|---|---|"
for m in $resnet $mlp; do
  A="" AG="" B="" BG="" C="" CG=""
  for _ in $(seq "$rounds"); do
    read -r a ag < <(ours memory tvmrt $m 4); A+="$a "; AG+="$ag "
    read -r b bg < <(theirs memory tvm $m 4); B+="$b "; BG+="$bg "
    if [ $m = $mlp ]; then read -r c cg < <(ours memory ort tests/fixtures/mlp_unbound_b1 4); C+="$c "; CG+="$cg "; fi
  done
  echo "| $(basename $m) | 4 | tvmrt (one Model) | $(stats "$A") | $(stats "$AG") |"
  echo "| $(basename $m) | 4 | TVM (4 GraphModules) | $(stats "$B") | $(stats "$BG") |"
  [ -n "$C" ] && echo "| $(basename $m) | 4 | ONNX Runtime (one session) | $(stats "$C") | $(stats "$CG") |"
  python3 -c "print(f'growth ratio tvmrt / TVM: {$(med "$AG") / $(med "$BG"):.2f}x, whole process {$(med "$A") / $(med "$B"):.2f}x')"
done
