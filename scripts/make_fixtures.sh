#!/usr/bin/env bash
# Regenerates the committed test models:      scripts/make_fixtures.sh
# Builds the large benchmark models on demand: scripts/make_fixtures.sh --bench [--only a,b] [--out DIR]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
eval "$("$repo/scripts/tvm_env.sh")"
out="$repo/tests/fixtures"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) args+=(--bench); out="$repo/target/bench-models" ;;
    --out) out="$2"; shift ;;
    --only) args+=(--only "$2"); shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
TVM_FFI=ctypes PYTHONPATH="$TVM_WHEEL_DIR" TVM_NUM_THREADS=1 \
  "$TVM_PYTHON" "$repo/scripts/make_fixtures.py" --out "$out" "${args[@]}"
