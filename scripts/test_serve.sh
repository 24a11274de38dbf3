#!/usr/bin/env bash
# The Ray Serve module of the Python package (tvmrt[serve]) as users install it: the wheel with
# Ray in a fresh venv, then python/tests/test_serve*.py against it on a local Ray instance and on
# two Ray nodes of this machine, every address 127.0.0.1 (no dashboard).
#   scripts/test_serve.sh [WHEEL]      (default: the wheel scripts/test_wheel.sh built)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
wheel=${1:-$(ls target/wheel-test/dist/tvmrt-*.whl 2>/dev/null | head -1 || true)}
if [ -z "$wheel" ]; then
  mkdir -p target/serve-test/dist
  python3 -m pip wheel -q ./python --no-deps -w target/serve-test/dist
  wheel=$(ls target/serve-test/dist/tvmrt-*.whl)
fi
# Ray's newest Python here (3.11: its wheels and TVM's benchmark side share it).
py=$( (command -v pyenv >/dev/null && pyenv prefix 3.11 2>/dev/null | head -1) || true)
py=${py:+$py/bin/python3}
py=${py:-python3}
venv=target/serve-test/venv
if [ ! -x $venv/bin/python ] || [ ! -f $venv/.complete-2 ]; then
  rm -rf $venv
  "$py" -m venv $venv
  $venv/bin/pip install -q --upgrade pip
  # tritonclient: Triton's own client, unmodified, speaks the Open Inference Protocol to the replicas.
  $venv/bin/pip install -q "ray[serve]" requests pytest hypothesis "tritonclient[http]"
  touch $venv/.complete-2
fi
$venv/bin/pip install -q --force-reinstall --no-deps "$wheel"
$venv/bin/pip install -q "$wheel[serve]"
echo "== Ray Serve on $($venv/bin/python -c 'import ray; print("ray", ray.__version__)'), $(basename "$wheel")"
# RAY_BACKEND_LOG_LEVEL=error: Ray's core writes its warnings (an actor "is dead" once a test has
# stopped it on purpose) to the driver's stderr from threads of its own, past pytest's capture,
# into the middle of the progress line; the tests check every outcome they care about themselves.
(cd target/serve-test && env -u TVMRT_LIBRARY -u PYTHONPATH RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_BACKEND_LOG_LEVEL=error \
  "$repo/$venv/bin/python" -m pytest -q -p no:cacheprovider "$repo/python/tests/test_serve.py" \
  "$repo/python/tests/test_serve_protocol.py" "$repo/python/tests/test_serve_prepared.py" \
  "$repo/python/tests/test_serve_cluster.py")
