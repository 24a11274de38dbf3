#!/usr/bin/env sh
# Configures, builds and runs an example program as its own CMake project against an installed
# package. usage: run_example.sh SOURCE_DIR BUILD_DIR INSTALL_PREFIX PROGRAM ARGS...
set -eu
src=$1 build=$2 prefix=$3 program=$4
shift 4
cmake -S "$src" -B "$build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build" >/dev/null
exec "$build/$program" "$@"
