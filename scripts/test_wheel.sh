#!/usr/bin/env bash
# The Python package as users get it: builds the wheel (pip wheel ./python), checks it (ruff over
# all the repository's Python, mypy, the stripped library inside, its size), then installs it into
# fresh venvs of the oldest and the newest CPython the machine has (pyenv's 3.9 and 3.13 where
# present) with numpy 1.x and 2.x, and runs python/tests against the installed package (TVM's own
# package beside it, from tvm_env.sh).
#   scripts/test_wheel.sh              everything
#   scripts/test_wheel.sh --one        the newest Python only (quicker)
#   TVMRT_WHEEL=dist/...whl scripts/test_wheel.sh    a wheel built before (scripts/build_wheels.sh)
#   TVMRT_SDIST=dist/tvmrt-<version>.tar.gz           also the source archive, built by pip in a fresh
#                                                     venv (scripts/build_release.sh makes it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
one=0
[ "${1:-}" = "--one" ] && one=1
eval "$(scripts/tvm_env.sh)"
out=$repo/target/wheel-test
rm -rf "$out"
mkdir -p "$out/dist"

# An interpreter of a version: pyenv's, else one on PATH.
python_of() {
  local v=$1 p
  if command -v pyenv >/dev/null && p=$(pyenv prefix "$v" 2>/dev/null); then
    echo "$p/bin/python3"
    return
  fi
  for p in $(ls -d /root/.pyenv/versions/"$v"* 2>/dev/null); do echo "$p/bin/python3"; return; done
  command -v "python$v" || true
}

builder=$(python_of 3.13)
[ -n "$builder" ] || builder=python3
"$builder" -m venv "$out/build-venv"
"$out/build-venv/bin/pip" install -q --upgrade pip ruff mypy numpy
if [ -n "${TVMRT_WHEEL:-}" ]; then
  echo "== testing $TVMRT_WHEEL"
  cp "$TVMRT_WHEEL" "$out/dist/"
else
  echo "== building the wheel"
  "$out/build-venv/bin/pip" wheel -q ./python --no-deps -w "$out/dist"
fi
wheel=$(ls "$out"/dist/tvmrt-*.whl)
# python/README.md's first example, as a user copies it.
awk '/^\*\*`example.py`\*\*$/ {f = 1; next} f && /^```python$/ {on = 1; next} on && /^```$/ {exit} on' \
  python/README.md > "$out/example.py"
grep -q "tvmrt.Model" "$out/example.py"
echo "   $(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB"
# Every ELF file in it is for this machine (a module of another machine would not load, silently).
scripts/wheel/check_machines.py "$wheel" "$(uname -m)"
# What is in it: the library stripped (no debug sections), the tool, the package typed.
"$out/build-venv/bin/python" - "$wheel" <<'EOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
lib = [n for n in names if n.endswith("_lib/libtvm_runtime.so")]
assert lib, names
data = z.read(lib[0])
# Section names: no .debug_* section (the strings also occur in the code's own data).
import struct
shoff, = struct.unpack_from("<Q", data, 0x28)
shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
def section(i):
    return struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
names_at = section(shstrndx)[4]
def name(i):
    start = names_at + section(i)[0]
    return data[start:data.index(b"\0", start)].decode()
sections = [name(i) for i in range(shnum)]
assert not [s for s in sections if s.startswith(".debug")], f"debug sections left: {sections}"
assert any(n.endswith(".data/scripts/tvmrt") for n in names), names
assert "tvmrt/py.typed" in names
assert "tvmrt/_fast.abi3.so" in names, "no compiled call module (tvmrt/_fast.c)"
print(f"   library {len(data) / 1e6:.2f} MB, tool {z.getinfo([n for n in names if n.endswith('scripts/tvmrt')][0]).file_size / 1e6:.2f} MB")
EOF
echo "== ruff and mypy"
# The package with its own settings (python/pyproject.toml), the rest of the repository's Python
# (scripts, benchmarks, TVM-side tests) with .ruff.toml's.
"$out/build-venv/bin/ruff" check --quiet .
(cd python && "$out/build-venv/bin/ruff" format --check . >/dev/null && "$out/build-venv/bin/mypy" tvmrt)

# (python version, numpy requirement, calls) triples: numpy 2 needs 3.9+ (2.0 is the last for 3.9),
# and 3.13 has no numpy 1.x. Calls: "fast" through the wheel's compiled module (tvmrt/_fast.c),
# "ctypes" with it left out (TVMRT_NO_FAST_CALLS=1, as where it cannot load: free-threaded
# builds, PyPy), so both paths pass the whole suite.
combos=("3.13 numpy>=2 fast")
if [ $one = 0 ]; then
  combos+=("3.9 numpy<2 fast" "3.9 numpy>=2,<2.1 ctypes")
fi
ran=0
for c in "${combos[@]}"; do
  read -r v req calls <<<"$c"
  py=$(python_of "$v")
  if [ -z "$py" ]; then
    echo "== NOTE: no Python $v here; skipped"
    continue
  fi
  venv="$out/venv-$v-${req//[^0-9a-z]/_}"
  no_fast=0
  [ "$calls" = ctypes ] && no_fast=1
  echo "== Python $("$py" -V 2>&1 | cut -d' ' -f2) with $req, calls by $calls: a fresh venv, the wheel installed, pytest"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "$wheel" "$req" pytest hypothesis ml_dtypes
  # The compiled module loads where it should, and is left out where asked.
  (cd "$out" && TVMRT_NO_FAST_CALLS=$no_fast "$venv/bin/python" -c \
    "import sys; from tvmrt import _ffi; sys.exit((_ffi._fast is None) != ($no_fast == 1))")
  # Outside the source tree, so the installed package is the one imported.
  (cd "$out" && env -u TVMRT_LIBRARY -u PYTHONPATH PATH="$venv/bin:$PATH" TVM_PYTHON="$TVM_PYTHON" TVMRT_NO_FAST_CALLS=$no_fast \
    TVM_WHEEL_DIR="$TVM_WHEEL_DIR" TVMRT_TEST_PLUGIN="${TVMRT_TEST_PLUGIN:-$repo/build/libtvmrt_test_plugin.so}" \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "$repo/python/tests")
  # python/README.md's first example as written, from the repository's root, with nothing but the
  # venv and the system's own tools on PATH: no Rust, no compiler needed.
  (cd "$repo" && env -i HOME="$HOME" PATH="$venv/bin:/usr/bin:/bin" sh -c \
    '! command -v cargo >/dev/null || echo "   NOTE: cargo is in /usr/bin here"; python "$1"' _ "$out/example.py" \
    | tee "$out/example.log")
  grep -q "^\[TensorInfo('data', float32\[1, 1, 28, 28\])\] (1, 10)$" "$out/example.log"
  ran=$((ran + 1))
done
[ $ran -gt 0 ] || { echo "no Python to test the wheel with" >&2; exit 1; }

if [ -n "${TVMRT_SDIST:-}" ]; then
  echo "== the source archive $(basename "$TVMRT_SDIST"): pip builds it in a fresh venv (cargo, as on a platform no wheel fits)"
  venv=$out/venv-sdist
  "$builder" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  # Its own target folder: the archive's workspace is another path than this clone's.
  CARGO_TARGET_DIR=$repo/target/sdist-build "$venv/bin/pip" install -q "$TVMRT_SDIST"
  (cd "$repo" && "$venv/bin/python" "$out/example.py" && "$venv/bin/tvmrt" --version \
    && "$venv/bin/python" -c "from tvmrt import _ffi; print('   compiled calls:', _ffi._fast is not None)")
fi

echo "== building from source where it cannot be done: a message saying what to do, at once"
# No cargo on PATH (a clone on a machine without Rust), then the package's folder alone (an sdist).
cannot() {  # WHAT DIR: pip must fail within a minute and print our message naming WHAT
  local log=$out/cannot.log
  if timeout 120 env PATH=/usr/bin:/bin "$out/build-venv/bin/pip" wheel -q --no-deps "$2" -w "$out/cannot" >"$log" 2>&1; then
    echo "pip built $2 without $1" >&2; exit 1
  fi
  grep -q "cannot build the runtime library here: .*$1" "$log" && grep -q "pip install tvmrt-<version>" "$log" \
    || { echo "no clear message without $1:" >&2; cat "$log" >&2; exit 1; }
  echo "   without $1: refused with the routes that work"
}
cannot cargo ./python
rm -rf "$out/python-alone" && cp -r python "$out/python-alone" && rm -rf "$out/python-alone/build"
cannot "Rust sources" "$out/python-alone"
echo "== the wheel passed on $ran interpreter(s)"
