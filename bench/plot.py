#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draw an openmla_bench JSON: a roofline chart and a bar chart per case.

    python3 bench/plot.py RESULTS.json [--compare PEER.json ...] [--out PREFIX] [--filter TEXT]

writes PREFIX_roofline.png and PREFIX_bars.png (PREFIX defaults to RESULTS without .json).

- Roofline: achieved TFLOP/s against arithmetic intensity (FLOP per byte moved), log-log,
  under the copy-bandwidth and bf16-GEMM ceilings that the bench measured in the same run
  ("copy_gbps", "gemm_tflops"). Dense cases are circles, sparse ones squares.
- Bars: for each case, the fraction of its roofline bound reached (the lower of the two
  ceilings at the case's intensity), with the time and the binding figure written beside it.

A comparison JSON (--compare, repeatable) holds a peer's figures for some of the same cases:
    {"name": "FlashMLA", "cases": [{"case": "<the bench's case name>", "us": 172.8}, ...]}
Each case gives any one of "us", "tflops" or "gbps"; the others follow from our case's FLOPs and
bytes (the same work). Peers are drawn as hollow markers joined to ours, and as bars beside ours.

Reads the bench's format 2 (shape in fields) and format 1 (shape only in the "case" string, as
in docs/bench/ before format 2), so old runs plot too.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

# ---- loading ---------------------------------------------------------------------------------

_CASE_NAME = re.compile(
    r"^(?P<family>dense|sparse) b=(?P<b>\d+) h_q=(?P<h_q>\d+) s_q=(?P<s_q>\d+)"
    r"(?: s_k=(?P<s_k>\d+)(?P<var>~)?)?(?: topk=(?P<topk>\d+))?(?: ctx=(?P<ctx>\d+))?"
    r"(?P<graph> graph)?(?: p=(?P<page>\d+))?(?: (?P<dtype>fp16|bf16))?$"
)


def fields_from_name(name: str) -> dict:
    """The shape fields of a format-1 case name ("dense b=128 h_q=16 s_q=1 s_k=4096~ p=64")."""
    match = _CASE_NAME.match(name)
    if match is None:
        return {}
    g = match.groupdict()
    sparse = g["family"] == "sparse"
    return {
        "family": g["family"],
        "dtype": g["dtype"] or ("fp8" if sparse else "bf16"),
        "b": int(g["b"]),
        "h_q": int(g["h_q"]),
        "s_q": int(g["s_q"]),
        "s_k": float(g["ctx"] if sparse and g["ctx"] else g["s_k"] or 0),
        "page": int(g["page"] or 64),
        "topk": int(g["topk"] or 0),
        "graph": bool(g["graph"]),
        "variable_lengths": bool(g["var"]),
    }


def load_bench(path: str | Path) -> dict:
    """The bench JSON with every case in format 2 (fields filled from the name when missing)."""
    data = json.loads(Path(path).read_text())
    for key in ("copy_gbps", "gemm_tflops", "cases"):
        if key not in data:
            raise ValueError(f"{path}: not an openmla_bench JSON: no '{key}'")
    for case in data["cases"]:
        for key, value in fields_from_name(case.get("case", "")).items():
            case.setdefault(key, value)
        case.setdefault("kernel", "")
        # FLOPs and bytes of one call: from the figures when the JSON predates the fields.
        case.setdefault("flops", case["tflops"] * 1e12 * case["us"] * 1e-6)
        case.setdefault("bytes", case["gbps"] * 1e9 * case["us"] * 1e-6)
    data.setdefault("name", "OpenMLA")
    return data


def load_peer(path: str | Path, ours: dict) -> dict:
    """A comparison JSON matched to our cases by name: {case name: {"us", "tflops", "gbps"}}."""
    data = json.loads(Path(path).read_text())
    by_name = {case["case"]: case for case in ours["cases"]}
    matched = {}
    for case in data.get("cases", []):
        mine = by_name.get(case.get("case"))
        if mine is None:
            continue
        if "us" in case:
            us = float(case["us"])
        elif "tflops" in case:
            us = mine["flops"] / (float(case["tflops"]) * 1e12) * 1e6
        elif "gbps" in case:
            us = mine["bytes"] / (float(case["gbps"]) * 1e9) * 1e6
        else:
            raise ValueError(f"{path}: case '{case['case']}' has none of us, tflops, gbps")
        matched[mine["case"]] = {
            "us": us,
            "tflops": mine["flops"] / (us * 1e-6) / 1e12,
            "gbps": mine["bytes"] / (us * 1e-6) / 1e9,
        }
    return {"name": data.get("name", Path(path).stem), "cases": matched}


# ---- figures ---------------------------------------------------------------------------------


def intensity(case: dict) -> float:
    return case["flops"] / case["bytes"]  # FLOP per byte


def roof_tflops(data: dict, flop_per_byte: float) -> float:
    return min(data["gemm_tflops"], data["copy_gbps"] * flop_per_byte / 1e3)


def plot_roofline(data: dict, peers: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = data["cases"]
    xs = [intensity(c) for c in cases]
    lo = min(xs) / 3
    hi = max(xs + [data["gemm_tflops"] * 1e3 / data["copy_gbps"]]) * 3
    # The chart on the left, the key of numbered cases on the right.
    fig, (ax, key) = plt.subplots(1, 2, figsize=(15, 7.5), dpi=130, gridspec_kw={"width_ratios": [2.2, 1]})

    # Ceilings measured in the same run.
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [roof_tflops(data, x) for x in grid], color="black", lw=1.5)
    ridge = data["gemm_tflops"] * 1e3 / data["copy_gbps"]
    copy_x = lo * 1.5
    ax.text(copy_x, data["copy_gbps"] * copy_x / 1e3 * 0.55, f"copy {data['copy_gbps']:.0f} GB/s", fontsize=8)
    ax.text(ridge * 1.1, data["gemm_tflops"] * 1.04, f"bf16 GEMM {data['gemm_tflops']:.0f} TFLOP/s", fontsize=8)

    colors = {"dense": "tab:blue", "sparse": "tab:orange"}
    markers = {"dense": "o", "sparse": "s"}
    peer_colors = ["tab:red", "tab:green", "tab:purple", "tab:brown"]
    for family in ("dense", "sparse"):
        members = [c for c in cases if c["family"] == family]
        if members:
            ax.scatter([intensity(c) for c in members], [c["tflops"] for c in members], s=28,
                       color=colors[family], marker=markers[family], label=f"{data['name']} {family}", zorder=3)
    for number, case in enumerate(cases, start=1):
        ax.annotate(str(number), (intensity(case), case["tflops"]), fontsize=6, alpha=0.85,
                    xytext=(4, -2), textcoords="offset points")
    key.axis("off")
    rows = [f"{n:>2}  {c['case']}" for n, c in enumerate(cases, start=1)]
    key.text(0.0, 1.0, "\n".join(rows), va="top", ha="left", family="monospace",
             fontsize=min(7.5, 430 / max(len(rows), 1)), transform=key.transAxes)
    for index, peer in enumerate(peers):
        color = peer_colors[index % len(peer_colors)]
        first = True
        for case in cases:
            figures = peer["cases"].get(case["case"])
            if figures is None:
                continue
            x = intensity(case)
            ax.plot([x, x], [case["tflops"], figures["tflops"]], color=color, lw=0.8, alpha=0.6, zorder=2)
            ax.scatter([x], [figures["tflops"]], s=40, facecolors="none", edgecolors=color,
                       marker=markers[case["family"]], label=peer["name"] if first else None, zorder=4)
            first = False

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(c["tflops"] for c in cases) / 2, data["gemm_tflops"] * 1.6)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved TFLOP/s")
    title = f"{data['name']} on {data.get('device', '?')}: roofline (ceilings measured in the same run)"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_bars(data: dict, peers: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = data["cases"]
    series = [(data["name"], {c["case"]: c for c in cases}, "tab:blue")]
    peer_colors = ["tab:red", "tab:green", "tab:purple", "tab:brown"]
    for index, peer in enumerate(peers):
        series.append((peer["name"], peer["cases"], peer_colors[index % len(peer_colors)]))
    height = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(11, 0.24 * len(cases) * max(1, len(series) * 0.75) + 1.5), dpi=130)
    for row, case in enumerate(cases):
        x = intensity(case)
        roof = roof_tflops(data, x)
        memory_bound = data["copy_gbps"] * x / 1e3 < data["gemm_tflops"]
        for position, (name, figures_by_case, color) in enumerate(series):
            figures = figures_by_case.get(case["case"])
            if figures is None:
                continue
            y = row + (position - (len(series) - 1) / 2) * height
            fraction = figures["tflops"] / roof
            ax.barh(y, fraction, height=height * 0.9, color=color, label=name if row == 0 or position else None)
            figure = f"{figures['gbps']:.0f} GB/s" if memory_bound else f"{figures['tflops']:.0f} TFLOP/s"
            ax.text(fraction + 0.01, y, f"{figures['us']:.1f} us, {figure}", va="center", fontsize=6)
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels([f"{c['case']}  {n}" for n, c in enumerate(cases, start=1)], fontsize=7)
    ax.set_ylim(len(cases) - 0.5, -0.5)  # first case on top
    ax.set_xlim(0, 1.3)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlabel("fraction of the roofline bound (min of copy and GEMM ceilings at the case's intensity)")
    ax.set_title(f"{data['name']} on {data.get('device', '?')}: each case against its ceiling", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="lower right", fontsize=8)
    ax.grid(True, axis="x", alpha=0.25)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench_json", help="openmla_bench --json output")
    parser.add_argument("--compare", action="append", default=[], metavar="PEER_JSON",
                        help="a peer's figures for the same cases (repeatable)")
    parser.add_argument("--out", help="output prefix (default: bench_json without .json)")
    parser.add_argument("--filter", default="", help="only cases whose name contains this text")
    args = parser.parse_args(argv)

    data = load_bench(args.bench_json)
    data["cases"] = [c for c in data["cases"] if args.filter in c["case"]]
    if not data["cases"]:
        print(f"plot.py: no case of {args.bench_json} matches '{args.filter}'", file=sys.stderr)
        return 1
    peers = [load_peer(path, data) for path in args.compare]
    prefix = Path(args.out) if args.out else Path(args.bench_json).with_suffix("")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    roofline = prefix.parent / f"{prefix.name}_roofline.png"
    bars = prefix.parent / f"{prefix.name}_bars.png"
    plot_roofline(data, peers, roofline)
    plot_bars(data, peers, bars)
    print(f"wrote {roofline} and {bars} ({len(data['cases'])} cases"
          + "".join(f", {p['name']}: {len(p['cases'])}" for p in peers) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
