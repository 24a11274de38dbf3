#!/usr/bin/env bash
# What one call of a Relax function costs a C++ host on tvm-ffi (bench/relax_calls.cc, built
# against the apache-tvm-ffi wheel's headers): upstream TVM 0.27's libtvm_runtime.so against this
# one, on `y = x + c` (made once with TVM 0.27's compiler: bench/relax_add_model.py), sides
# alternated, 5 rounds of 100,000 calls each (the best of 5 runs per round), TVM_NUM_THREADS=1;
# then callgrind's instructions per call on each side (the difference of two run lengths).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
venv=${TVM_VENV:-$repo/.tvm-cache/relax/venv027}
site=$(echo "$venv"/lib/python3*/site-packages)
ffi=$site/tvm_ffi
upstream=$site/tvm/lib
out=$repo/target/bench-relax-calls
model=$repo/.tvm-cache/bench/relax_add/add.so
mkdir -p "$out" "$(dirname "$model")"
[ -f "$model" ] || "$venv/bin/python" bench/relax_add_model.py "$model"
cargo build --release --quiet
cp -f target/release/libtvm_runtime.so "$out/"
build() {
  g++ -std=c++17 -O2 -I"$ffi/include" bench/relax_calls.cc -o "$out/calls_$1" -Wl,--no-as-needed "$2" \
    "$ffi/lib/libtvm_ffi.so" -Wl,-rpath,"$(dirname "$2"):$ffi/lib" -pthread
}
build ours "$out/libtvm_runtime.so"
build upstream "$upstream/libtvm_runtime.so"
declare -A ns
for round in 1 2 3 4 5; do
  for side in upstream ours; do
    ns[$side]+="$(TVM_NUM_THREADS=1 "$out/calls_$side" "$model" 100000) "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | sed -n 3p; }
for side in upstream ours; do
  echo "$side: ${ns[$side]}ns per call; median $(echo "${ns[$side]}" | median)"
done
echo "ours / upstream: $(python3 -c "print(round($(echo "${ns[ours]}" | median) / $(echo "${ns[upstream]}" | median), 2))")x"
if command -v valgrind >/dev/null; then
  for side in upstream ours; do
    total() {
      TVM_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg.$side.$1" "$out/calls_$side" "$model" "$1" >/dev/null 2>&1
      callgrind_annotate "$out/cg.$side.$1" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
    }
    a=$(total 2000)
    b=$(total 6000)
    echo "$side: $(((b - a) / 20000)) instructions per call (callgrind)"
  done
fi
