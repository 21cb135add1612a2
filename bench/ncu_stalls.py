#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-instruction source page.

Reads the CSV of `ncu -i REPORT --page source --csv --print-source sass` (one kernel) and prints:
  - the largest stall sites: address, samples, the three largest stall reasons, the instruction;
  - mbarrier waits by barrier: the samples of each `SYNCS.PHASECHK...TRYWAIT [UR+offset]` and of the
    branch that retries it, summed per shared-memory offset. Match the offsets to the kernel's shared
    storage (offsetof on the host) to name the barriers;
  - per opcode: instructions executed and stall samples.
Sessions 23 and 24 read the prefill kernel's waits this way (docs/performance.md).

usage: python3 bench/ncu_stalls.py SOURCE.csv [--top N] [--ops N]
"""

from __future__ import annotations

import argparse
import collections
import csv
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
TRYWAIT = re.compile(r"SYNCS\.PHASECHK\S*TRYWAIT\s+(P\d),\s*\[(?:U?R\d+|URZ)?\+?(0x[0-9a-f]+)?\]")
OPCODE = re.compile(r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def number(text: str) -> int:
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return 0


def read_source(path: str) -> list:
    """The SASS lines in address order: dicts with addr, sass, samples, executed and stall_* columns."""
    with open(path) as f:
        lines = f.read().splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if header_at is None:
        return []
    rows = list(csv.reader(lines[header_at:]))
    header = rows[0]
    stall_columns = [c for c in header if c.startswith("stall_") and "Not Issued" not in c]
    out = []
    for row in rows[1:]:
        cells = dict(zip(header, row))
        try:
            address = int(cells["Address"], 16)
        except (KeyError, ValueError):
            continue
        out.append({
            "addr": address,
            "sass": cells.get("Source", "").strip(),
            "samples": number(cells.get(SAMPLES, "0")),
            "executed": number(cells.get(EXECUTED, "0")),
            "stalls": {c[len("stall_"):]: number(cells[c]) for c in stall_columns},
        })
    return out


def barrier_waits(lines: list) -> dict:
    """shared-memory offset of the waited mbarrier -> samples of its try-wait and the retry branch."""
    waits = collections.Counter()
    for i, line in enumerate(lines):
        match = TRYWAIT.search(line["sass"])
        if not match:
            continue
        predicate, offset = match.group(1), match.group(2) or "0x0"
        waits[offset] += line["samples"]
        # The branch that retries on the try-wait's predicate: ptxas may schedule up to a few dozen
        # independent instructions between the two.
        retry = re.compile(r"@!" + predicate + r"\s+BRA\b")
        for follower in lines[i + 1:i + 48]:
            if retry.match(follower["sass"]):
                waits[offset] += follower["samples"]
                break
    return waits


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source_csv")
    parser.add_argument("--top", type=int, default=20, help="stall sites to list (default 20)")
    parser.add_argument("--ops", type=int, default=20, help="opcodes to list (default 20)")
    args = parser.parse_args(argv)
    lines = read_source(args.source_csv)
    if not lines:
        print(f"{args.source_csv}: no SASS lines (not a --page source --csv export?)", file=sys.stderr)
        return 1
    total = sum(line["samples"] for line in lines)
    print(f"{len(lines)} instructions, {total} stall samples, "
          f"{sum(line['executed'] for line in lines)} instructions executed")

    print(f"\n## the {args.top} largest stall sites")
    for line in sorted(lines, key=lambda l: -l["samples"])[:args.top]:
        reasons = ", ".join(f"{k} {v}" for k, v in collections.Counter(line["stalls"]).most_common(3) if v)
        print(f"{line['addr'] & 0xfffff:6x} {line['samples']:8d} {100.0 * line['samples'] / max(total, 1):5.1f} %"
              f"  [{reasons}]  {line['sass'][:70]}")

    print("\n## mbarrier waits (try-wait and its retry branch) by shared-memory offset")
    for offset, samples in barrier_waits(lines).most_common():
        print(f"{offset:>10s} {samples:8d} {100.0 * samples / max(total, 1):5.1f} %")

    print(f"\n## the {args.ops} opcodes with most samples (executed, samples)")
    executed, samples = collections.Counter(), collections.Counter()
    for line in lines:
        match = OPCODE.match(line["sass"])
        if match:
            executed[match.group(1)] += line["executed"]
            samples[match.group(1)] += line["samples"]
    for op, count in samples.most_common(args.ops):
        print(f"{op:12s} {executed[op]:14d} {count:8d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
