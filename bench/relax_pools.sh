#!/usr/bin/env bash
# bench/relax_pools.py with relax_memory.sh's interpreters (TVM 0.27's, which makes the model
# once, and the tvmrt package's).
exec "$(dirname "$0")/relax_memory.sh" relax_pools.py relax_burst
