#!/usr/bin/env bash
# Runs on the GPU machine (device tool): ncu profile (full set, per-SASS stall
# samples, SM-active spread) of the dense decode kernel on one bench case.
# Env: B (build folder, default devbin), CASE (bench filter). Logs to $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
B=${B:-devbin}
CASE=${CASE:-dense b=128 h_q=128 s_q=2 s_k=16384~ p=64}
tag=$(echo "$CASE" | tr -cd 'a-z0-9')
timeout 300 ncu --clock-control none --set full --import-source no \
  --metrics sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,smsp__cycles_active.avg \
  -k 'regex:decode_dense' --launch-skip 3 --launch-count 1 \
  -o /tmp/ncu_$tag $B/openmla_bench --filter "$CASE" --iters 20 > /tmp/ncu_$tag.run 2>&1
echo "ncu rc=$?"; tail -3 /tmp/ncu_$tag.run
ncu -i /tmp/ncu_$tag.ncu-rep --page details > $OUT/ncu_${tag}_details.txt 2>&1
ncu -i /tmp/ncu_$tag.ncu-rep --page raw --csv > $OUT/ncu_${tag}_raw.csv 2>&1
ncu -i /tmp/ncu_$tag.ncu-rep --page source --csv --print-source sass > $OUT/ncu_${tag}_source.csv 2>&1
grep -E "Duration|Throughput|Hit Rate|Warp Cycles Per Issued|Issue Slots Busy|Tensor|Shared|Ipc|sm__cycles_active|hmma|wavefronts" $OUT/ncu_${tag}_details.txt | head -40
