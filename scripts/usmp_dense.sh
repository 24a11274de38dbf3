#!/usr/bin/env bash
# Dense networks of several shapes, built with TVM 0.16's unified memory planner (tir.usmp) for
# three targets (generic x86-64, haswell, skylake-avx512), each run 30 times by the tool: every
# one must answer numpy's result (rtol and atol 1e-4) on every run, or be refused at load naming
# TVM's planner; never corrupt memory (the tool would crash or the answer differ). TVM sizes the
# kernels' vector buffers by their scalar element, so they store past the pools it plans
# (src/aot/overrun.rs). The avx512 builds run only where the CPU has AVX-512F.
#   scripts/usmp_dense.sh          (builds into target/usmp-dense once; about 2 minutes)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
out=target/usmp-dense
tvm_vars=$(scripts/tvm_env.sh)
eval "$tvm_vars"
TOPHUB_LOCATION=NONE TVM_FFI=ctypes PYTHONPATH=$TVM_WHEEL_DIR "$TVM_PYTHON" scripts/make_usmp_dense.py "$out"
cargo build --release --quiet -p tvmrt
tool=target/release/tvmrt
right=0 refused=0 skipped=0 failed=0
for d in "$out"/*/*/; do
  d=${d%/}
  if [[ $d == */avx512/* ]] && ! grep -qw avx512f /proc/cpuinfo; then
    skipped=$((skipped + 1))
    continue
  fi
  set +e
  said=$("$tool" run "$d/lib.so" --inputs "$d/inputs.npz" --expect "$d/want.npy" --rtol 1e-4 --atol 1e-4 \
    --repeat 30 2>&1)
  rc=$?
  set -e
  if [ $rc = 0 ] && grep -q "within tolerance" <<<"$said"; then
    right=$((right + 1))
  elif grep -q "rebuild without tir.usmp.enable" <<<"$said"; then
    refused=$((refused + 1))
    echo "   refused at load: $d"
  else
    failed=$((failed + 1))
    echo "FAILED (exit $rc): $d" >&2
    echo "$said" | tail -5 >&2
  fi
done
# The two shapes the review found, under valgrind: not one write outside memory the runtime owns.
if command -v valgrind >/dev/null; then
  for d in "$out"/haswell/b2_h1024 "$out"/haswell/b8_h256; do
    valgrind -q --error-exitcode=9 "$tool" run "$d/lib.so" --inputs "$d/inputs.npz" --expect "$d/want.npy" \
      --rtol 1e-4 --atol 1e-4 --repeat 3 >/dev/null || { echo "FAILED under valgrind: $d" >&2; failed=$((failed + 1)); }
  done
fi
echo "usmp dense: $right right, $refused refused at load naming why, $skipped skipped (no AVX-512), $failed wrong or crashed"
[ $failed = 0 ] && [ $((right + refused)) -gt 0 ]
