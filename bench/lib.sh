# What the benchmark scripts share: upstream's OpenCL build and the OpenCL benchmark models, then
# alternating the two runtimes in processes of their own and printing a table row. Source it from
# the repository's root; `alternate` reads `rounds`, `ours` (the folder of this library) and
# `upstream` (the folder of upstream's).

# upstream_opencl: the folder of upstream's library built with OpenCL ($TVM_UPSTREAM_SHARED, else
# ../shared/upstream); exits saying so when it is not there.
upstream_opencl() {
  local dir=${TVM_UPSTREAM_SHARED:-$PWD/../shared/upstream}
  [ -f "$dir/libtvm_runtime.so" ] || { echo "no upstream OpenCL runtime in $dir" >&2; exit 1; }
  echo "$dir"
}

# opencl_models MODEL...: builds the OpenCL benchmark models missing from target/bench-models-cl
# with TVM's wheel (scripts/tvm_env.sh's environment).
opencl_models() {
  local need=() m
  for m in "$@"; do [ -f "target/bench-models-cl/$m/lib.so" ] || need+=("$m"); done
  [ ${#need[@]} -eq 0 ] && return
  TVM_FFI=ctypes PYTHONPATH="$TVM_WHEEL_DIR" "$TVM_PYTHON" scripts/make_opencl_fixtures.py build --bench \
    --out target/bench-models-cl --only "$(IFS=,; echo "${need[*]}")"
}

# vm_bench_driver: builds bench/vm_bench.c (against upstream's header, linked to this library; the
# dynamic linker picks the runtime), the library, and the benchmark VM models both VM scripts run
# (the control model's loop and the NMS head, on first use). Needs scripts/tvm_env.sh's environment.
vm_bench_driver() {
  local m
  for m in loop nms; do
    [ -f "target/bench-models-vm/$m/code.ro" ] || PYTHONPATH="$TVM_WHEEL_DIR" "$TVM_PYTHON" \
      scripts/make_vm_fixtures.py --bench --only $m --out target/bench-models-vm
  done
  cargo build --release --quiet
  mkdir -p target/bench
  cc -O2 -o target/bench/vm_bench bench/vm_bench.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" -ldl \
    -L target/release -ltvm_runtime
}

# call_costs_driver: builds bench/call_costs.c (against upstream's header, linked to this library;
# the dynamic linker picks the runtime), the library, and the chain-of-200-operators model it runs
# (on first use), for bench/call_costs.sh and bench/call_instructions.sh. Needs scripts/tvm_env.sh's
# environment.
call_costs_driver() {
  [ -f target/bench-models/chain200/lib.so ] || scripts/make_fixtures.sh --bench --only chain200
  cargo build --release --quiet
  mkdir -p target/bench
  cc -O2 -o target/bench/call_costs bench/call_costs.c -I"$TVM_UPSTREAM_INCLUDE" -I"$TVM_DLPACK_INCLUDE" -ldl \
    -L target/release -ltvm_runtime
}

# alternate FIELD CMD...: runs CMD `rounds` times on each runtime, alternating, and sets O and U to
# the figures (space separated): field FIELD (space separated) of the last line CMD prints. Extra
# environment for one side: OURS_ENV / UPSTREAM_ENV ("NAME=value ...").
alternate() {
  local field=$1
  shift
  O="" U=""
  for _ in $(seq "$rounds"); do
    # shellcheck disable=SC2086
    O+="$(env ${OURS_ENV:-} LD_LIBRARY_PATH="$ours" "$@" 2>/dev/null | tail -1 | cut -d' ' -f"$field") "
    # shellcheck disable=SC2086
    U+="$(env ${UPSTREAM_ENV:-} LD_LIBRARY_PATH="$upstream" "$@" 2>/dev/null | tail -1 | cut -d' ' -f"$field") "
  done
}

# row LABEL [DECIMALS] [MINIMA]: a table row of O and U: each side's median (min-max), the ratio of
# the medians, and with MINIMA=minima the ratio of the minima too. An empty U prints "-" there.
row() {
  python3 - "$1" "${2:-1}" "${3:-}" "$O" "$U" <<'PY'
import statistics, sys
label, decimals, minima = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "minima"
o = [float(x) for x in sys.argv[4].split()]
u = [float(x) for x in sys.argv[5].split()]
f = lambda v: f"{v:.{decimals}f}"
side = lambda v: f"{f(statistics.median(v))} ({f(min(v))}-{f(max(v))})"
cells = [label, side(o)]
if u:
    cells += [side(u), f"{statistics.median(o) / statistics.median(u):.3f}"]
    if minima:
        cells.append(f"{min(o) / min(u):.3f}")
else:
    cells += ["-", "-"] + (["-"] if minima else [])
print("| " + " | ".join(cells) + " |")
PY
}
