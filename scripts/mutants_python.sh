#!/usr/bin/env bash
# Mutation tests of the Python package's input and lifetime code: mutmut changes one thing at a
# time (a condition, a constant, an argument, a message) in these files and runs the package's
# tests that reach it; a mutant they do not catch is a gap, or an equivalent change to argue for
# in writing (docs/development.md lists the arguments). mutmut works on a copy of python/ in a
# temporary folder, against this checkout's release library; its tests run in forked workers, so
# the OpenCL tests (a driver set up before a fork cannot be used after it) are left out.
# usage: scripts/mutants_python.sh [FILE...]   (paths under python/; default: the three below)
# Results: mutants.out/python-survivors.txt (each survivor's change).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(tvmrt/_tensors.py tvmrt/_executor.py tvmrt/_fork.py)
venv=.tvm-cache/mutmut-venv
if [ ! -x $venv/bin/mutmut ]; then
  py=$(pyenv prefix 3.13 2>/dev/null)/bin/python3
  [ -x "$py" ] || py=python3
  "$py" -m venv $venv
  $venv/bin/pip install -q mutmut pytest numpy hypothesis ml_dtypes
fi
cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r python "$work/python"
cp target/release/libtvm_runtime.so "$work/"
rm -rf "$work/python/build" "$work/python"/*.egg-info
only=$(printf '"%s", ' "${files[@]}")
cat >> "$work/python/pyproject.toml" <<TOML

[tool.mutmut]
source_paths = ["tvmrt"]
only_mutate = [${only%, }]
pytest_add_cli_args_test_selection = ["tests/test_inputs.py", "tests/test_vm.py", "tests/test_answers.py", "tests/test_errors.py", "tests/test_model.py", "tests/test_threads.py", "tests/test_migrating.py"]
pytest_add_cli_args = ["-q", "-p", "no:cacheprovider", "-k", "not opencl", "--deselect", "tests/test_model.py::test_a_folder_copied_elsewhere_runs"]
TOML
mkdir -p mutants.out
(
  cd "$work/python"
  export TVMRT_TEST_SOURCE=1 TVMRT_LIBRARY="$work/libtvm_runtime.so" TVMRT_FIXTURES="$repo/tests/fixtures" TVM_NUM_THREADS=1
  "$repo/$venv/bin/mutmut" run --max-children 2 >/dev/null 2>&1 || true
  "$repo/$venv/bin/mutmut" results --all true 2>/dev/null > "$work/all" || "$repo/$venv/bin/mutmut" results > "$work/all"
  grep -v ': killed' "$work/all" > "$work/survivors" || true
  echo "mutants: $(wc -l < "$work/all"), not killed: $(wc -l < "$work/survivors")"
  : > "$repo/mutants.out/python-survivors.txt"
  while read -r name status; do
    { echo "## ${name%:} ($status)"; "$repo/$venv/bin/mutmut" show "${name%:}" 2>/dev/null | grep '^[-+][^-+]'; } \
      >> "$repo/mutants.out/python-survivors.txt"
  done < "$work/survivors"
)
echo "each survivor's change: mutants.out/python-survivors.txt"
