#!/usr/bin/env bash
# Runs on the GPU machine (device tool): everything a kernel change must pass,
# in one call. Carry: devbin (tests, bench, demo built here), .cutlass (CuTe
# headers) and .whl (scikit-build-core / nanobind wheels; the machine is offline).
#   1. GPU test suite; 2. memcheck (whole suite) and racecheck (dense, sparse, combine subsets);
#   3. demo; 4. Python package built there and its tests; 5. the full bench (JSON to $OUT).
# Env: NATIVE=0 skips 1-3, PYTHON=0 skips 4, BENCH=0 skips 5.
set -uo pipefail
OUT="${OUT:-/tmp/openmla-out}"; mkdir -p "$OUT"
B=devbin
libdir=$(dirname "$(find /usr/local/cuda*/ /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ "${NATIVE:-1}" = 1 ]; then
timeout 300 $B/openmla_gpu_tests --gtest_brief=1 > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc=$?"
grep -E "PASSED|FAILED" $OUT/gpu_tests.log | head -8
timeout 420 compute-sanitizer --tool memcheck --error-exitcode 9 $B/openmla_gpu_tests --gtest_brief=1 \
  --gtest_filter="${MEMCHECK_FILTER:-*}" > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | tail -3
timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 $B/openmla_gpu_tests --gtest_brief=1 \
  --gtest_filter="${RACECHECK_FILTER:-*DecodeDense*heads_b3_sq2_hq16_*:*DecodeDense*heads_b3_sq2_hq64_*:*DecodeDense*sq_b2_sq67*:*DecodeDense*lengths*:*Sparse*h16*:*Combine*}" \
  > $OUT/racecheck.log 2>&1; echo "racecheck rc=$?"
grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | tail -3
timeout 60 $B/openmla_demo > $OUT/demo.log 2>&1; echo "demo rc=$?"; tail -3 $OUT/demo.log
fi
if [ "${PYTHON:-1}" = 1 ]; then
  ( python3 -m pip install --no-index --find-links .whl scikit-build-core nanobind > $OUT/pip.log 2>&1 &&
    OPENMLA_CUTLASS_INCLUDE_DIR=$PWD/.cutlass CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 300 \
      python3 -m pip install --no-build-isolation --no-deps . >> $OUT/pip.log 2>&1 ) ; echo "pip install rc=$?"
  (cd /tmp && timeout 300 python3 -m pytest -q "$OLDPWD/python/tests" > $OUT/pytest.log 2>&1); echo "pytest rc=$?"
  tail -3 $OUT/pytest.log
fi
if [ "${BENCH:-1}" = 1 ]; then
  timeout 400 $B/openmla_bench --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?"
  grep -E "^device|^dense|^sparse" $OUT/bench.log
fi
