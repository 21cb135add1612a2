#!/usr/bin/env bash
# Configure and build OpenMLA (library, demo, bench, tests) into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
JOBS="${OPENMLA_JOBS:-$(nproc)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$JOBS"
