#!/usr/bin/env python3
"""Kernel A/B by SM cycles under Nsight Compute: a sparse prefill case, OpenMLA and FlashMLA.

Why: bench/compare.py's times of a 2-4 ms compute-bound kernel moved by up to 7 % between runs of the
same build on the H200 (clocks left to the machine), which hides a 2 % change. ncu replays each launch
alone with the caches flushed, and the elapsed SM cycles of one kernel repeat within 0.3 %
(docs/performance.md, "Sparse prefill, session 24"). Cycles, not times: the two libraries run at
different clocks (FlashMLA's kernel ~4 % lower), and the clocks are never locked (--clock-control none).

Two modes:
  target D_QK H_Q S_KV [D_QK H_Q S_KV ...] [N] [fp8]
                             the process ncu profiles: for each shape in turn, builds
                             compare.prefill_inputs(4096, H_Q, S_KV, d_qk=D_QK), then calls OpenMLA N times
                             (default 4), then FlashMLA N times, and first prints a line
                             "# shape D_QK H_Q S_KV: openmla N, flash_mla N" (the calls it makes); with
                             `fp8`, the FP8-cache mode (656-byte pages of 64, d_qk 576; OpenMLA only, its
                             kernel at h_q 128 is decode_sparse_fp8_heads_on_m: add it to -k). Several shapes
                             in one process save the interpreter's and the inputs' start per shape.
  table CSV...               reads `ncu --csv --metrics ...` outputs and prints, per file, shape (when the
                             file holds the target's "# shape" lines and one launch per call) and library,
                             the mean / min / max of sm__cycles_elapsed.max and the mean time and clock,
                             and the mean DRAM bytes read and L2 hit rate when the CSV holds
                             dram__bytes_read.sum / lts__t_sector_hit_rate.pct

usage on the GPU machine (PYTHONPATH holding openmla, flash_mla, python/tests and bench):
  ncu --csv --clock-control none \\
      --metrics gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second \\
      -k 'regex:prefill_sparse_alternate|sparse_attn_fwd' \\
      python3 bench/ncu_cycles.py target 576 128 8192 576 64 32768 2 > cycles.csv
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


SHAPE_MARK = "# shape "


def parse_target(args: list) -> tuple:
    """target's arguments -> ([(d_qk, h_q, s_kv), ...], calls, fp8_cache); ValueError when malformed."""
    fp8_cache = bool(args) and args[-1] == "fp8"
    numbers = [int(a) for a in (args[:-1] if fp8_cache else args)]
    if len(numbers) < 3 or len(numbers) % 3 == 2:
        raise ValueError("target needs D_QK H_Q S_KV triples, then optionally N and fp8")
    calls = numbers.pop() if len(numbers) % 3 == 1 else 4
    if calls < 1:
        raise ValueError("N must be at least 1")
    return [tuple(numbers[i:i + 3]) for i in range(0, len(numbers), 3)], calls, fp8_cache


def run_target(shapes: list, calls: int, fp8_cache: bool = False) -> None:
    import torch

    import compare

    for d_qk, h_q, s_kv in shapes:
        inputs = compare.prefill_inputs(4096, h_q, s_kv, d_qk=d_qk, fp8_cache=fp8_cache)
        runs = [(name, make(inputs)) for name, make in (("openmla", compare.openmla_prefill),
                                                          ("flash_mla", compare.flash_mla_prefill))]
        counts = ", ".join(f"{name} {calls if call is not None else 0}" for name, call in runs)
        print(f"{SHAPE_MARK}{d_qk} {h_q} {s_kv}: {counts}", flush=True)
        for _, call in runs:
            if call is None:
                continue
            for _ in range(calls):
                call()
            torch.cuda.synchronize()
        del inputs, runs  # free this shape's tensors before the next shape's are built


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


def read_shapes(path: str) -> list:
    """The target's "# shape" lines: [(label, {library: calls}), ...] in the order it ran them."""
    shapes = []
    with open(path) as f:
        for line in f:
            if not line.startswith(SHAPE_MARK):
                continue
            label, _, counts = line[len(SHAPE_MARK):].strip().partition(":")
            calls = {}
            for item in counts.split(","):
                name, _, count = item.strip().rpartition(" ")
                if name:
                    calls[name] = int(count)
            shapes.append((label.strip(), calls))
    return shapes


def split_by_shape(by_library: dict, shapes: list) -> list:
    """[(label, {library: launches})] with each library's launches cut in launch order by the calls each
    shape made; [] when the counts do not match (a kernel launched more than once per call, or a launch
    that died), so the caller reports the whole file instead."""
    for library, launches in by_library.items():
        if sum(calls.get(library, 0) for _, calls in shapes) != len(launches):
            return []
    out, taken = [], collections.Counter()
    for label, calls in shapes:
        group = {}
        for library, launches in by_library.items():
            n = calls.get(library, 0)
            if n:
                group[library] = launches[taken[library]:taken[library] + n]
                taken[library] += n
        out.append((label, group))
    return out


def print_table(paths: list) -> None:
    for path in paths:
        by_library = read_launches(path)
        if not by_library:
            print(f"{path}  no completed launch (see the ncu log in the file)")
            continue
        shapes = read_shapes(path)
        groups = split_by_shape(by_library, shapes) if len(shapes) > 1 else []
        if len(shapes) > 1 and not groups:
            print(f"{path}  launches do not match the target's calls per shape: the whole file below")
        for label, group in groups or [("", by_library)]:
            print_libraries(f"{path} [{label}]" if label else path, group)


def print_libraries(name: str, by_library: dict) -> None:
    for library, launches in sorted(by_library.items(), reverse=True):
        cycles = [m[CYCLES] / 1e6 for m in launches]
        micros = [m.get(TIME_NS, 0.0) / 1e3 for m in launches]
        mhz = [m.get(CLOCK_HZ, 0.0) / 1e6 for m in launches]
        extra = ""
        if all(DRAM_READ in m for m in launches):
            extra += f"  DRAM read GB {sum(m[DRAM_READ] for m in launches) / len(launches) / 1e9:.3f}"
        if all(L2_HIT in m for m in launches):
            extra += f"  L2 hit % {sum(m[L2_HIT] for m in launches) / len(launches):.1f}"
        print(f"{name}  {library:9s} launches {len(launches)}  Mcycles {sum(cycles) / len(cycles):.3f} "
              f"(min {min(cycles):.3f}, max {max(cycles):.3f})  us {sum(micros) / len(micros):.0f}  "
              f"MHz {sum(mhz) / len(mhz):.0f}{extra}")


def main(argv: list) -> int:
    if argv and argv[0] == "target":
        try:
            shapes, calls, fp8_cache = parse_target(argv[1:])
        except ValueError as error:
            print(f"ncu_cycles.py: {error}\n\n{__doc__}", file=sys.stderr)
            return 2
        run_target(shapes, calls, fp8_cache)
        return 0
    if len(argv) >= 2 and argv[0] == "table":
        print_table(argv[1:])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
