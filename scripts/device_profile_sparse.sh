#!/usr/bin/env bash
# Runs on the GPU machine (device tool): ncu profiles (full set, per-SASS stall
# samples) of the sparse FP8 decode kernel on two bench cases, plus the sparse
# bench for reference. Optional: devbin_alt/ holds a variant build; its dense
# latency cases are timed interleaved with devbin/'s (ALT_FILTER). Logs to $OUT.
set -uo pipefail
libdir=$(dirname "$(find /usr/local/cuda*/ /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}"
B=devbin
if [ -d devbin_alt ]; then
  timeout 120 devbin_alt/openmla_gpu_tests --gtest_brief=1 --gtest_filter="${ALT_TF:-*Dense*}" > $OUT/alt_tests.log 2>&1
  echo "alt tests rc=$?"; grep -E "PASSED|FAILED" $OUT/alt_tests.log | head -5
  for r in 1 2 3; do for d in $B devbin_alt; do
    echo "== $d"; timeout 60 $d/openmla_bench --filter "${ALT_FILTER:-graph}" --iters 50 | grep "^dense"
  done; done
fi
timeout 200 $B/openmla_bench --filter sparse --json $OUT/bench_sparse.json > $OUT/bench_sparse.log 2>&1
grep -E "^device|^sparse" $OUT/bench_sparse.log
for c in ${CASES:-h_q=16:s_q=1 h_q=64:s_q=2}; do
  tag=${c//[^a-z0-9]/}
  timeout 200 ncu --clock-control none --set full --import-source no -k 'regex:decode_sparse' --launch-skip 3 --launch-count 1 \
    -o /tmp/ncu_$tag $B/openmla_bench --filter "sparse b=128 ${c//:/ } " --iters 20 > /tmp/ncu_$tag.run 2>&1
  echo "ncu $c rc=$?"; tail -2 /tmp/ncu_$tag.run
  ncu -i /tmp/ncu_$tag.ncu-rep --page details > /tmp/ncu_${tag}_details.txt 2>&1
  ncu -i /tmp/ncu_$tag.ncu-rep --page source --csv --print-source sass > $OUT/ncu_${tag}_source.csv 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|Warp Cycles Per Issued|Issue Slots Busy|Tensor|Shared Memory|Executed Ipc" /tmp/ncu_${tag}_details.txt | head -24
  ls -la $OUT/ncu_${tag}_source.csv
done
