#!/usr/bin/env python3
"""A/B of two OpenMLA builds from bench/compare.py JSON files, with the peer beside both.

    python3 bench/ab_compare.py --new new1.json new2.json --old old1.json old2.json [--markdown]

Each side is one or more runs of the same groups (one process per run, the sides' runs alternating in
time, so that clock drift falls on both). Per case: OpenMLA's mean time over each side's runs, the gain
(old time / new time, > 1: the new build is faster) and, where a peer ran (FlashMLA, or the vLLM fork for
dense FP8), its mean over all runs of both sides and the speed of each build beside it (peer time /
OpenMLA time). Per group: the geomean gain, the geomean speed of each build and its worst case.
A run in which OpenMLA failed on a case (an "error" entry) is named, and the case is compared over the
runs that have it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Dict, List, Optional

OURS = "openmla"


def load_run(path: str) -> Dict[str, dict]:
    """name -> case of one compare.py JSON."""
    with open(path) as f:
        return {case["name"]: case for case in json.load(f)["cases"]}


def time_of(case: dict, library: str) -> Optional[float]:
    result = case.get(library)
    return result.get("us") if isinstance(result, dict) else None


def peer_of(case: dict) -> Optional[str]:
    """The first library beside OpenMLA that timed this case."""
    for key, value in case.items():
        if key not in ("group", "name", OURS) and isinstance(value, dict) and "us" in value:
            return key
    return None


def mean(values: List[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def geomean(values: List[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def compare(new_runs: List[Dict[str, dict]], old_runs: List[Dict[str, dict]]) -> Dict[str, List[dict]]:
    """group -> rows (name, new, old, gain, peer, peer_us, speed_new, speed_old), in the first new run's order."""
    groups: Dict[str, List[dict]] = {}
    for name, case in new_runs[0].items():
        new = mean([t for run in new_runs if name in run for t in [time_of(run[name], OURS)] if t])
        old = mean([t for run in old_runs if name in run for t in [time_of(run[name], OURS)] if t])
        if new is None or old is None:
            continue
        peer = peer_of(case)
        peer_us = None
        if peer is not None:
            peer_us = mean([t for run in new_runs + old_runs if name in run for t in [time_of(run[name], peer)] if t])
        groups.setdefault(case["group"], []).append(dict(
            name=name, new=new, old=old, gain=old / new, peer=peer, peer_us=peer_us,
            speed_new=peer_us / new if peer_us else None, speed_old=peer_us / old if peer_us else None))
    return groups


def failures(paths: List[str], runs: List[Dict[str, dict]]) -> List[str]:
    lines = []
    for path, run in zip(paths, runs):
        failed = [c for c in run.values() if isinstance(c.get(OURS), dict) and "error" in c[OURS]]
        if failed:
            lines.append(f"# {path}: OpenMLA did not run {len(failed)} case(s), first: {failed[0]['name']}: "
                         f"{failed[0][OURS]['error']}")
    return lines


def summary(rows: List[dict]) -> str:
    text = f"gain geomean {geomean([r['gain'] for r in rows]):.4f}"
    speeds = [r for r in rows if r["speed_new"]]
    if speeds:
        text += (f"; beside {speeds[0]['peer']}: geomean new {geomean([r['speed_new'] for r in speeds]):.3f} "
                 f"old {geomean([r['speed_old'] for r in speeds]):.3f}, worst new "
                 f"{min(r['speed_new'] for r in speeds):.3f} old {min(r['speed_old'] for r in speeds):.3f}")
    return text


def render(groups: Dict[str, List[dict]], markdown: bool) -> str:
    out = []
    for group, rows in groups.items():
        if markdown:
            out += [f"**{group}**", "", "| case | new µs | old µs | gain | peer µs | speed new | speed old |",
                    "|---|---|---|---|---|---|---|"]
            for r in rows:
                peer = (f"{r['peer_us']:.1f} | {r['speed_new']:.3f} | {r['speed_old']:.3f}" if r["peer_us"]
                        else "| |")
                out.append(f"| {r['name']} | {r['new']:.1f} | {r['old']:.1f} | {r['gain']:.3f} | {peer} |")
            out += ["", summary(rows), ""]
        else:
            out.append(f"== {group}")
            for r in rows:
                line = f"{r['name'][:58]:58s} new {r['new']:8.1f} old {r['old']:8.1f} gain {r['gain']:5.3f}"
                if r["peer_us"]:
                    line += (f" | peer {r['peer_us']:8.1f} speed new {r['speed_new']:5.3f} "
                             f"old {r['speed_old']:5.3f}")
                out.append(line)
            out.append("  " + summary(rows))
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new", nargs="+", required=True, help="compare.py JSON files of the new build")
    parser.add_argument("--old", nargs="+", required=True, help="compare.py JSON files of the old build")
    parser.add_argument("--markdown", action="store_true", help="tables for docs/performance.md")
    args = parser.parse_args(argv)
    new_runs = [load_run(p) for p in args.new]
    old_runs = [load_run(p) for p in args.old]
    for line in failures(args.new + args.old, new_runs + old_runs):
        print(line, file=sys.stderr)
    groups = compare(new_runs, old_runs)
    if not groups:
        print("ab_compare.py: no case was timed by OpenMLA on both sides", file=sys.stderr)
        return 1
    print(render(groups, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
