#!/usr/bin/env python3
"""Kernel A/B by SM cycles under Nsight Compute: a sparse prefill case, OpenMLA and FlashMLA.

Why: bench/compare.py's times of a 2-4 ms compute-bound kernel moved by up to 7 % between runs of the
same build on the H200 (clocks left to the machine), which hides a 2 % change. ncu replays each launch
alone with the caches flushed, and the elapsed SM cycles of one kernel repeat within 0.3 %
(docs/performance.md, "Sparse prefill, session 24"). Cycles, not times: the two libraries run at
different clocks (FlashMLA's kernel ~4 % lower), and the clocks are never locked (--clock-control none).

Two modes:
  target D_QK H_Q S_KV [N] [fp8]
                             the process ncu profiles: builds compare.prefill_inputs(4096, H_Q, S_KV,
                             d_qk=D_QK), then calls OpenMLA N times (default 4), then FlashMLA N times;
                             with `fp8`, the FP8-cache mode (656-byte pages of 64, d_qk 576; OpenMLA only,
                             its kernel at h_q 128 is decode_sparse_fp8_heads_on_m: add it to -k)
  table CSV...               reads `ncu --csv --metrics ...` outputs and prints, per file and library,
                             the mean / min / max of sm__cycles_elapsed.max and the mean time and clock,
                             and the mean DRAM bytes read and L2 hit rate when the CSV holds
                             dram__bytes_read.sum / lts__t_sector_hit_rate.pct

usage on the GPU machine (PYTHONPATH holding openmla, flash_mla, python/tests and bench):
  ncu --csv --clock-control none \\
      --metrics gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second \\
      -k 'regex:prefill_sparse_alternate|sparse_attn_fwd' \\
      python3 bench/ncu_cycles.py target 576 128 8192 > cycles.csv
  python3 bench/ncu_cycles.py table cycles.csv
"""

from __future__ import annotations

import collections
import csv
import math
import sys

CYCLES = "sm__cycles_elapsed.max"
TIME_NS = "gpu__time_duration.sum"
CLOCK_HZ = "sm__cycles_elapsed.avg.per_second"
DRAM_READ = "dram__bytes_read.sum"
L2_HIT = "lts__t_sector_hit_rate.pct"


def run_target(d_qk: int, h_q: int, s_kv: int, calls: int, fp8_cache: bool = False) -> None:
    import torch

    import compare

    inputs = compare.prefill_inputs(4096, h_q, s_kv, d_qk=d_qk, fp8_cache=fp8_cache)
    for make in (compare.openmla_prefill, compare.flash_mla_prefill):
        call = make(inputs)
        if call is None:
            continue
        for _ in range(calls):
            call()
        torch.cuda.synchronize()


def library_of(kernel_name: str) -> str:
    ours = ("openmla::", "prefill_sparse", "decode_sparse_fp8")  # ncu prints names with or without namespaces
    return "openmla" if any(mark in kernel_name for mark in ours) else "flash_mla"


def read_launches(path: str) -> dict:
    """library -> list of {metric: value} per profiled launch, in launch order. A launch that did not
    complete (ncu writes its metrics as nan, e.g. after an illegal instruction) has no entry."""
    with open(path) as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if not rows:
        return {}
    header = rows[0]
    launch_col, kernel_col = header.index("ID"), header.index("Kernel Name")
    metric_col, value_col = header.index("Metric Name"), header.index("Metric Value")
    launches = collections.defaultdict(dict)
    for row in rows[1:]:
        try:
            value = float(row[value_col].replace(",", ""))
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        launches[(int(row[launch_col]), library_of(row[kernel_col]))][row[metric_col]] = value
    by_library = collections.defaultdict(list)
    for (_, library), metrics in sorted(launches.items()):
        if CYCLES in metrics:
            by_library[library].append(metrics)
    return by_library


def print_table(paths: list) -> None:
    for path in paths:
        by_library = read_launches(path)
        if not by_library:
            print(f"{path}  no completed launch (see the ncu log in the file)")
        for library, launches in sorted(by_library.items(), reverse=True):
            cycles = [m[CYCLES] / 1e6 for m in launches]
            micros = [m.get(TIME_NS, 0.0) / 1e3 for m in launches]
            mhz = [m.get(CLOCK_HZ, 0.0) / 1e6 for m in launches]
            extra = ""
            if all(DRAM_READ in m for m in launches):
                extra += f"  DRAM read GB {sum(m[DRAM_READ] for m in launches) / len(launches) / 1e9:.3f}"
            if all(L2_HIT in m for m in launches):
                extra += f"  L2 hit % {sum(m[L2_HIT] for m in launches) / len(launches):.1f}"
            print(f"{path}  {library:9s} launches {len(launches)}  Mcycles {sum(cycles) / len(cycles):.3f} "
                  f"(min {min(cycles):.3f}, max {max(cycles):.3f})  us {sum(micros) / len(micros):.0f}  "
                  f"MHz {sum(mhz) / len(mhz):.0f}{extra}")


def main(argv: list) -> int:
    fp8_cache = len(argv) > 1 and argv[0] == "target" and argv[-1] == "fp8"
    numbers = argv[1:-1] if fp8_cache else argv[1:]
    if argv and argv[0] == "target" and len(numbers) >= 3:
        run_target(int(numbers[0]), int(numbers[1]), int(numbers[2]), int(numbers[3]) if len(numbers) > 3 else 4,
                   fp8_cache)
        return 0
    if len(argv) >= 2 and argv[0] == "table":
        print_table(argv[1:])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
