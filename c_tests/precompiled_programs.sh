#!/usr/bin/env sh
# Pre-compiled OpenCL programs between the two libraries, rtvm's way (c_tests/cxx/precompiled_programs.cc):
# each library writes a blob and runs, each reads the other's and runs. This library reads with
# every source build failing (the OpenCL shim refuses clCreateProgramWithSource), so its run can
# only come from the blob's programs. Exit 77 (skip) without an OpenCL device.
# usage: precompiled_programs.sh HOST FIXTURE_DIR SHIM UPSTREAM_DIR WORK_DIR
set -eu
host=$1 fixture=$2 shim=$3 upstream=$4 work=$5
mkdir -p "$work"
rm -f "$work/ours.bin" "$work/upstream.bin"
run() {  # run LABEL [ENV=VALUE...] BLOB
  label=$1
  shift
  echo "== $label"
  set +e
  env "$@"
  rc=$?
  set -e
  [ $rc -eq 77 ] && exit 77
  [ $rc -eq 0 ] || { echo "FAILED: $label (exit $rc)"; exit 1; }
}
no_source_builds="TVM_RT_OPENCL_LIBRARY=$shim TVM_RT_CL_SHIM_FAIL=clCreateProgramWithSource:1+"
run "this library writes its programs" "$host" "$fixture" "$work/ours.bin"
run "upstream's library writes its programs" LD_LIBRARY_PATH="$upstream" "$host" "$fixture" "$work/upstream.bin"
# The same format and the same kernels: a program per kernel, by name.
python3 - "$work/ours.bin" "$work/upstream.bin" <<'PY'
import struct, sys
def entries(path):
    b = open(path, "rb").read()
    (n,), at, out = struct.unpack_from("<Q", b, 0), 8, {}
    for _ in range(n):
        (k,) = struct.unpack_from("<Q", b, at)
        name = b[at + 8 : at + 8 + k].decode()
        at += 8 + k
        (k,) = struct.unpack_from("<Q", b, at)
        out[name] = b[at + 8 : at + 8 + k]
        at += 8 + k
    assert at == len(b), f"{path}: {len(b) - at} bytes after the programs"
    return out
ours, upstream = entries(sys.argv[1]), entries(sys.argv[2])
assert sorted(ours) == sorted(upstream), f"kernels differ: {sorted(ours)} vs {sorted(upstream)}"
same = sum(ours[k] == upstream[k] for k in ours)
print(f"== {len(ours)} kernels in both blobs, {same} with identical binaries")
PY
# shellcheck disable=SC2086
run "this library reads its own, building no source" $no_source_builds "$host" "$fixture" "$work/ours.bin"
# shellcheck disable=SC2086
run "this library reads upstream's, building no source" $no_source_builds "$host" "$fixture" "$work/upstream.bin"
run "upstream's library reads this library's" LD_LIBRARY_PATH="$upstream" "$host" "$fixture" "$work/ours.bin"
# The proof that the shim's refusal bites: without a blob, this library cannot build the kernels.
echo "== this library without a blob, building no source (must fail)"
rm -f "$work/none.bin"
: >"$work/none.bin"
if env TVM_RT_OPENCL_LIBRARY="$shim" TVM_RT_CL_SHIM_FAIL=clCreateProgramWithSource:1+ "$host" "$fixture" "$work/none.bin" 2>"$work/none.err"; then
  echo "FAILED: ran without building any source"
  exit 1
fi
grep -q clCreateProgramWithSource "$work/none.err" || { cat "$work/none.err"; exit 1; }
echo "pre-compiled programs ok"
