#!/usr/bin/env bash
# A Python request with numpy in and out on a Relax model (`y = x + c`, bench/relax_add_model.py):
# TVM 0.27's own Python and runtime against `tvmrt.Model.run` on this runtime, both in TVM 0.27's
# venv (CPython 3.11), the package from source with its compiled call module built for that Python
# (and once without it: ctypes alone). Sides alternated, 5 rounds of N requests, TVM_NUM_THREADS=1.
#   bench/relax_python.sh [N]      (default 20000)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
n=${1:-20000}
venv=${TVM_VENV:-$repo/.tvm-cache/relax/venv027}
py=$venv/bin/python
model=$repo/.tvm-cache/bench/relax_add/add.so
out=$repo/target/bench-relax-python
[ -f "$model" ] || { mkdir -p "$(dirname "$model")"; "$py" bench/relax_add_model.py "$model"; }
cargo build --release --quiet
rm -rf "$out" && mkdir -p "$out"
cp -r python/tvmrt "$out/"
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
gcc -O2 -shared -fPIC -I"$inc" python/tvmrt/_fast.c -o "$out/tvmrt/_fast.abi3.so"
run() {
  local side=$1 fast=$2
  if [ "$side" = upstream ]; then
    TVM_NUM_THREADS=1 "$py" bench/relax_python.py upstream "$model" "$n"
  else
    TVM_NUM_THREADS=1 TVMRT_NO_FAST_CALLS=$fast PYTHONPATH="$out" TVMRT_LIBRARY="$repo/target/release/libtvm_runtime.so" \
      "$py" bench/relax_python.py tvmrt "$model" "$n"
  fi
}
declare -A us
for _ in 1 2 3 4 5; do
  us[upstream]+="$(run upstream 0) "
  us[tvmrt]+="$(run tvmrt 0) "
  us[ctypes]+="$(run tvmrt 1) "
done
python3 - "${us[upstream]}" "${us[tvmrt]}" "${us[ctypes]}" <<'PY'
import statistics, sys
names = ["TVM 0.27: vm['main'](tvm.runtime.tensor(x)).numpy()", "tvmrt: Model.run(x)", "tvmrt by ctypes alone: Model.run(x)"]
values = [[float(v) for v in a.split()] for a in sys.argv[1:]]
base = statistics.median(values[0])
print("| side | us per request: median (min-max) | / TVM 0.27's |")
print("|---|---|---|")
for name, v in zip(names, values):
    m = statistics.median(v)
    print(f"| {name} | {m:.2f} ({min(v):.2f}-{max(v):.2f}) | {m / base:.2f}x |")
PY
