#!/usr/bin/env bash
# Runs on the GPU machine (device tool): GPU tests (filter TF), the graph-replay
# bench cases under a sweep of --min-part-cost (COSTS, FILTER) and an ncu
# breakdown of schedule / attention / combine at b=1 (NCU_COST). Logs to $OUT.
set -uo pipefail
libdir=$(dirname "$(find /usr/local/cuda*/ /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}"
B=devbin
timeout 200 $B/openmla_gpu_tests --gtest_brief=1 --gtest_filter="${TF:-*Dense*:*Schedule*:*Combine*}" > $OUT/gpu_tests.log 2>&1; echo "tests rc=$?"; tail -3 $OUT/gpu_tests.log
for m in ${COSTS:-8 2 1}; do
 echo "== mpc $m"; timeout 60 $B/openmla_bench --filter "${FILTER:-graph}" --min-part-cost $m --iters ${ITERS:-30} | grep "^dense"
done
timeout 120 ncu --clock-control none -k 'regex:decode_dense|schedule|combine' --launch-skip 6 --launch-count 3 \
  --section SpeedOfLight --section WarpStateStats $B/openmla_bench --filter "b=1 h_q=16 s_q=1 s_k=1024 graph" --iters 20 --min-part-cost ${NCU_COST:-1} > $OUT/ncu_b.log 2>&1
grep -E "^  [a-z_].*\(|Duration|Elapsed Cycles|SM Active|Warp Cycles Per Issued|cycles being stalled" $OUT/ncu_b.log | cut -c1-140
