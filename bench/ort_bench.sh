#!/usr/bin/env bash
# A Python request on the package against ONNX Runtime's, as their users run them: CPython 3.13,
# the release wheel (dist/, scripts/build_wheels.sh makes it when missing) in a fresh venv beside
# ONNX Runtime's current release, each request in every form the package takes, sides in processes
# of their own, alternated round by round (bench/ort_bench.py says what each side runs).
#   bench/ort_bench.sh [ROUNDS] [REQUESTS]      (default 5 rounds of 3000 requests)
# Prints medians (min-max) of the rounds, and each side's ratio to ONNX Runtime's median; the
# `ctypes` rows leave the wheel's compiled call module out (TVMRT_NO_FAST_CALLS=1), as where it
# cannot load.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
count=${2:-3000}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
wheel=dist/tvmrt-$version-py3-none-manylinux_2_28_x86_64.whl
[ -f "$wheel" ] || TVMRT_WHEEL_ARCHES=x86_64 scripts/build_wheels.sh
py=$(pyenv prefix 3.13 2>/dev/null)/bin/python3
[ -x "$py" ] || py=python3
venv=target/ort-bench-venv
rm -rf $venv
"$py" -m venv $venv
$venv/bin/pip install -q --upgrade pip
$venv/bin/pip install -q "$wheel" onnx onnxruntime
sides=(ort ort-all tvmrt-kw tvmrt-pos tvmrt-dict tvmrt-ortform tvmrt-into tvmrt-kw-1 tvmrt-into-1 ctypes:tvmrt-kw ctypes:tvmrt-into)
declare -A got
for _ in $(seq "$rounds"); do
  for s in "${sides[@]}"; do
    no_fast=0 side=$s
    if [[ $s == ctypes:* ]]; then no_fast=1 side=${s#ctypes:}; fi
    got[$s]+="$(cd /tmp && TVMRT_NO_FAST_CALLS=$no_fast "$OLDPWD/$venv/bin/python" "$OLDPWD/bench/ort_bench.py" "$side" "$count") "
  done
done
echo "machine: $(nproc) cores; CPython $($venv/bin/python -c 'import platform; print(platform.python_version())'), onnxruntime $($venv/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)'), tvmrt $version (the wheel); $rounds rounds of $count requests, sides alternated"
echo "| side | us per request: median (min-max) | / ONNX Runtime's |"
echo "|---|---|---|"
ort=$(python3 -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1].split()))' "${got[ort]}")
for s in "${sides[@]}"; do
  python3 - "$s" "${got[$s]}" "$ort" <<'EOF'
import statistics, sys
side, values, ort = sys.argv[1], [float(x) for x in sys.argv[2].split()], float(sys.argv[3])
names = {
    "ort": "ONNX Runtime: sess.run(None, {'data': x}), 1 thread",
    "ort-all": "ONNX Runtime: the same, its default threads (every core)",
    "tvmrt-kw": "tvmrt: m.run(data=x)",
    "tvmrt-pos": "tvmrt: m.run(x)",
    "tvmrt-dict": "tvmrt: m.run({'data': x})",
    "tvmrt-ortform": "tvmrt: m.run(None, {'data': x})",
    "tvmrt-into": "tvmrt: m.run_into(outs, data=x)",
    "tvmrt-kw-1": "tvmrt: m.run(data=x), num_threads=1",
    "tvmrt-into-1": "tvmrt: m.run_into(outs, data=x), num_threads=1",
    "ctypes:tvmrt-kw": "tvmrt by ctypes alone: m.run(data=x)",
    "ctypes:tvmrt-into": "tvmrt by ctypes alone: m.run_into(outs, data=x)",
}
m = statistics.median(values)
print(f"| {names[side]} | {m:.2f} ({min(values):.2f}-{max(values):.2f}) | {m / ort:.2f}x |")
EOF
done
