#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the GPU test suite, compute-sanitizer,
# the demo and the benchmark, from binaries built here and carried in devbin/.
# Usage: scripts/device_run.sh [bench filter]   (logs and JSON go to $OUT)
set -uo pipefail
OUT="${OUT:-/tmp/openmla-out}"; mkdir -p "$OUT"
bin=devbin
# cuBLAS (bench's GEMM ceiling) from the toolkit, or from a pip wheel when absent.
libdir=$(dirname "$(find /usr/local/cuda*/ /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
[ -n "$libdir" ] && export LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "== gpu tests"
"$bin/openmla_gpu_tests" --gtest_brief=1 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
echo "== demo"
"$bin/openmla_demo" 2>&1 | tee "$OUT/demo.log"
if [ "${SANITIZE:-1}" = 1 ]; then
  echo "== memcheck"
  compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/openmla_gpu_tests" --gtest_brief=1 \
    --gtest_filter="${MEMCHECK_FILTER:-*}" > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?"; tail -4 "$OUT/memcheck.log"
  echo "== racecheck"
  compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/openmla_gpu_tests" --gtest_brief=1 \
    --gtest_filter="${RACECHECK_FILTER:-*Combine*}" > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$?"; tail -4 "$OUT/racecheck.log"
fi
if [ "${BENCH:-1}" = 1 ]; then
  echo "== bench"
  "$bin/openmla_bench" --json "$OUT/bench.json" ${1:+--filter "$1"} 2>&1 | tee "$OUT/bench.log"
fi
