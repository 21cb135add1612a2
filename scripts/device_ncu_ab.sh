#!/usr/bin/env bash
# A/B of dense kernel builds by cycle counts (ncu, clocks left alone as the
# device notes ask, so cycles shift a little with the clock the GPU runs at):
# for each VARIANT ("dir" or "dir:ENV=VAL") and bench CASE, the attention
# kernel's gpc__cycles_elapsed.max (median of 3 launches) and tensor-pipe use.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
libdir=$(dirname "$(find /usr/local/cuda*/ /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}"
IFS='|' read -ra cases <<< "${CASES:-dense b=128 h_q=128 s_q=2 s_k=16384~ p=64|dense b=128 h_q=64 s_q=2 s_k=16384~ p=64|dense b=128 h_q=16 s_q=1 s_k=16384~ p=64}"
for c in "${cases[@]}"; do
  for v in ${VARIANTS:-devbin_alt devbin}; do
    b=${v%%:*}; envs=""; [ "$v" != "$b" ] && envs=${v#*:}
    env $envs timeout 120 ncu --clock-control none --metrics gpc__cycles_elapsed.max,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
      -k "regex:${KREGEX:-decode_dense}" --launch-skip 2 --launch-count 3 --csv $b/openmla_bench --filter "$c" --iters 20 > /tmp/ncu_ab.csv 2>/dev/null
    python3 - "$v" "$c" <<'PY'
import csv, sys, statistics
rows = [r for r in csv.reader(open('/tmp/ncu_ab.csv')) if len(r) > 10]
hdr = rows[0]; data = rows[1:]
mi, vi = hdr.index('Metric Name'), hdr.index('Metric Value')
cyc = [float(r[vi].replace(',', '')) for r in data if r[mi] == 'gpc__cycles_elapsed.max']
ten = [float(r[vi].replace(',', '')) for r in data if r[mi].startswith('sm__pipe_tensor')]
print(f"{sys.argv[2][:42]:42s} {sys.argv[1]:28s} cycles {statistics.median(cyc) if cyc else 0:>12,.0f}  tensor {statistics.median(ten) if ten else 0:5.1f}%")
PY
  done
done
