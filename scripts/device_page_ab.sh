#!/usr/bin/env bash
# Runs on the GPU machine (device tool): page-size A/B of dense builds at the compute-bound case.
# For each round, every VARIANT (a folder with openmla_bench and openmla_gpu_tests, e.g. devbin and
# devbin_alt) runs h_q=128 s_q=2 s_k=16384 at pages 16 / 32 / 64 / 128 back to back, so ratios to
# page 64 compare cases of one round (the clock drifts with power between rounds). Each variant other
# than the first is first run through the dense and graph tests (one line per test, so a hang shows
# which test it was).
# Env: VARIANTS (default "devbin devbin_alt"), ROUNDS (default 2), EXTRA (more bench filters, '|'-separated).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
libdir=$(dirname "$(find /usr/local/cuda*/ /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}"
read -ra variants <<< "${VARIANTS:-devbin devbin_alt}"
for v in "${variants[@]:1}"; do
  timeout 90 "$v/openmla_gpu_tests" --gtest_filter="*Dense*:*Graph*" > "$OUT/${v}_tests.log" 2>&1
  echo "$v tests rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$OUT/${v}_tests.log" | head -3; tail -1 "$OUT/${v}_tests.log" | cut -c1-150
done
IFS='|' read -ra extra <<< "${EXTRA:-}"
for r in $(seq "${ROUNDS:-2}"); do
  for v in "${variants[@]}"; do
    echo "-- $v round $r"
    timeout 40 "$v/openmla_bench" --filter "dense b=128 h_q=128 s_q=2 s_k=16384~" --iters 20 | grep -E '^dense'
    for c in "${extra[@]}"; do timeout 30 "$v/openmla_bench" --filter "$c" --iters 20 | grep -E '^dense'; done
  done
done
