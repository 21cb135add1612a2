#!/usr/bin/env bash
# Runs on the GPU machine (device tool): sparse GPU tests, memcheck / racecheck
# on the sparse tests (MEMCHECK=0 / RACECHECK=0 skip), the sparse bench cases,
# and optional probes in devbin/. Logs to $OUT.
set -uo pipefail
libdir=$(dirname "$(find /usr/local/cuda*/ /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}"
B=devbin
[ -x $B/cluster_probe ] && $B/cluster_probe
timeout 200 $B/openmla_gpu_tests --gtest_brief=1 --gtest_filter="${TF:-*Sparse*}" > $OUT/sparse_tests.log 2>&1
echo "sparse tests rc=$?"; grep -E "PASSED|FAILED|Failure|error" $OUT/sparse_tests.log | head -20
if [ "${BENCH:-1}" = 1 ]; then
  timeout 200 $B/openmla_bench --filter sparse --json $OUT/bench_sparse.json > $OUT/bench_sparse.log 2>&1
  grep -E "^device|^sparse" $OUT/bench_sparse.log
fi
if [ "${MEMCHECK:-1}" = 1 ]; then
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 $B/openmla_gpu_tests --gtest_brief=1 \
    --gtest_filter="${TF:-*Sparse*}" > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
  grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | tail -3
fi
if [ "${RACECHECK:-1}" = 1 ]; then
  timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 $B/openmla_gpu_tests --gtest_brief=1 \
    --gtest_filter="${RACE_TF:-*Sparse*h16_split*:*Sparse*h64_split*:*Sparse*h128_s2_split*:*Sparse*h8_s2_nosplit*}" > $OUT/racecheck.log 2>&1; echo "racecheck rc=$?"
  grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | tail -3
fi
