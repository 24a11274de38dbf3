#!/usr/bin/env sh
# Configures, builds and runs an example as its own CMake project against an installed package.
# usage: run_example.sh SOURCE_DIR BUILD_DIR INSTALL_PREFIX ARGS...
set -eu
src=$1 build=$2 prefix=$3
shift 3
cmake -S "$src" -B "$build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build" >/dev/null
exe=$(find "$build" -maxdepth 1 -type f -perm -u+x -name 'run_model*' | head -n 1)
"$exe" "$@"
