#!/usr/bin/env bash
# The differential test: the same seeded sequences of C API calls (c_tests/diff/difftest.c) run on
# this library and on upstream's (../shared/upstream/libtvm_runtime.so), each in its own process;
# the transcripts (return codes, error classes, values, shapes, dtypes, bytes, which calls show
# the same memory) must be equal. Differences listed in docs/DIFFERENCES.md are not generated.
# usage: scripts/difftest.sh [FIRST_SEED [SEEDS [STEPS [KINDS]]]]   (defaults 1 20 400 0123)
# Without ../shared/upstream it says so and exits 0 (set TVM_UPSTREAM_SHARED to another folder).
# OURS_ENV="NAME=value ..." is extra environment for our side only (TVM_RT_ARENA_POOL=2: every
# executor draws its activations from a pool, which no host call may be able to tell).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
upstream=${TVM_UPSTREAM_SHARED:-$repo/../shared/upstream}
if [ ! -f "$upstream/libtvm_runtime.so" ]; then
  echo "difftest: skipped: no upstream libtvm_runtime.so in $upstream (set TVM_UPSTREAM_SHARED to enable)"
  exit 0
fi
first=${1:-1} seeds=${2:-20} steps=${3:-400} kinds=${4:-0123}
eval "$(scripts/tvm_env.sh --no-venv)"
cargo build --release --lib --quiet
out=target/difftest
mkdir -p "$out"
cc -std=c11 -O1 -Wall -Wextra -Werror -Wno-unused-parameter -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" \
  c_tests/diff/difftest.c -o "$out/difftest" -Ltarget/release -ltvm_runtime
differ=0
for seed in $(seq "$first" $((first + seeds - 1))); do
  for side in ours upstream; do
    lib=$repo/target/release
    [ "$side" = upstream ] && lib=$upstream
    # Upstream may crash while tearing down after the last step; the transcript ends with "end".
    extra=""
    [ "$side" = ours ] && extra=${OURS_ENV:-}
    # shellcheck disable=SC2086
    env $extra TVM_NUM_THREADS=1 LD_LIBRARY_PATH=$lib "$out/difftest" tests/fixtures "$seed" "$steps" "$kinds" \
      >"$out/$side.$seed.txt" 2>"$out/$side.$seed.err" || true
  done
  if ! diff -q "$out/upstream.$seed.txt" "$out/ours.$seed.txt" >/dev/null; then
    differ=$((differ + 1))
    echo "seed $seed: transcripts differ (diff $out/upstream.$seed.txt $out/ours.$seed.txt):"
    diff "$out/upstream.$seed.txt" "$out/ours.$seed.txt" | head -8 || true
  fi
done
echo "difftest: $((seeds - differ)) passed, $differ failed"
[ "$differ" -eq 0 ]
