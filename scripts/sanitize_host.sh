#!/usr/bin/env bash
# ASan + UBSan over the host code: planner, validation, CPU reference, the CPU
# test suite and the C++ fuzz test, built from tests/host (no CUDA kernels, so
# no nvcc run) into ./build-asan, and run under ctest. Any report aborts the
# test that triggered it (-fno-sanitize-recover), so ctest fails.
#   scripts/sanitize_host.sh            # build + run
#   OPENMLA_JOBS=1 scripts/sanitize_host.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"  # FindCUDAToolkit: cuda_runtime_api.h only
JOBS="${OPENMLA_JOBS:-$(nproc)}"
BUILD="${OPENMLA_ASAN_BUILD:-build-asan}"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S tests/host -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPENMLA_HOST_SANITIZERS=ON \
  "${launcher[@]}" >/dev/null
cmake --build "$BUILD" -j "$JOBS"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)"
