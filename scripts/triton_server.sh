#!/usr/bin/env bash
# Fetches Triton Inference Server 2.51 as the nvidia-pytriton 0.7.0 wheel carries it (the server
# binary, its libraries and the Python backend; no containers), once, into target/triton/server,
# and prints `export` lines for it:
#   eval "$(scripts/triton_server.sh)"   ->  TRITONSERVER, TRITON_LIBS, TRITON_PYTHON_BACKEND
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$repo/target/triton/server
if [ ! -f "$dir/.complete" ]; then
  rm -rf "$dir" && mkdir -p "$dir"
  python3 -m pip download -q --no-deps "nvidia-pytriton==0.7.0" -d "$dir/wheel" >&2
  python3 - "$dir" <<'PY'
import sys, zipfile, glob, os
d = sys.argv[1]
with zipfile.ZipFile(glob.glob(f"{d}/wheel/*.whl")[0]) as z:
    for m in z.infolist():
        n = m.filename
        if n.startswith(("pytriton/tritonserver/bin/", "pytriton/tritonserver/backends/", "nvidia_pytriton.libs/",
                         "pytriton/tritonserver/python_backend_stubs/")):
            z.extract(m, d)
for f in glob.glob(f"{d}/pytriton/tritonserver/bin/*") + glob.glob(f"{d}/pytriton/tritonserver/python_backend_stubs/*/*"):
    os.chmod(f, 0o755)
PY
  rm -rf "$dir/wheel"
  touch "$dir/.complete"
fi
echo "export TRITONSERVER=$dir/pytriton/tritonserver/bin/tritonserver"
echo "export TRITON_LIBS=$dir/nvidia_pytriton.libs"
echo "export TRITON_PYTHON_BACKEND=$dir/pytriton/tritonserver/backends/python"
echo "export TRITON_PYTHON_STUBS=$dir/pytriton/tritonserver/python_backend_stubs"
