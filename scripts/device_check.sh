#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the whole GPU suite, compute-sanitizer
# memcheck / racecheck on subsets, then optional bench filters. Binaries in devbin/.
# Env: MEMCHECK_FILTER, RACECHECK_FILTER, BENCH_FILTERS (space-separated, "" = none),
#      PROBE_ARGS (";"-separated argument lists for devbin/latency_probe, if present). Logs to $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/openmla-out}"; mkdir -p "$OUT"
B=devbin
libdir=$(dirname "$(find /usr/local/cuda*/ /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}"
timeout 300 $B/openmla_gpu_tests --gtest_brief=1 > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc=$?"
grep -E "PASSED|FAILED|Failure" $OUT/gpu_tests.log | head -12
if [ -n "${MEMCHECK_FILTER:-}" ]; then
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 $B/openmla_gpu_tests --gtest_brief=1 \
    --gtest_filter="$MEMCHECK_FILTER" > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
  grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | tail -3
fi
if [ -n "${RACECHECK_FILTER:-}" ]; then
  timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 $B/openmla_gpu_tests --gtest_brief=1 \
    --gtest_filter="$RACECHECK_FILTER" > $OUT/racecheck.log 2>&1; echo "racecheck rc=$?"
  grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | tail -3
fi
if [ -x $B/latency_probe ] && [ -n "${PROBE_ARGS:-}" ]; then
  IFS=';' read -ra probes <<< "$PROBE_ARGS"
  for a in "${probes[@]}"; do timeout 60 $B/latency_probe $a; done
fi
for f in ${BENCH_FILTERS:-}; do
  timeout 300 $B/openmla_bench --filter "${f//_/ }" --json "$OUT/bench_${f//[^a-z0-9]/}.json" > "$OUT/bench_${f//[^a-z0-9]/}.log" 2>&1
  grep -E "^device|^dense|^sparse" "$OUT/bench_${f//[^a-z0-9]/}.log"
done
