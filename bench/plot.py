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
bytes (the same work). bench/compare.py's --json output works too (one peer per library it timed);
cases are matched by shape, whatever the form of their names. Peers are drawn as hollow markers
joined to ours, and as bars beside ours. NOTE: a peer's figure compares only when it was timed the
same way (graph replay or not, L2 flushed, same GPU); compare.py times every library in one process.

Reads the bench's format 2 (shape in fields) and format 1 (shape only in the "case" string, as
in docs/bench/ before format 2), and bench/compare.py's output (OpenMLA's figures and its peers),
so older runs plot too.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# ---- loading ---------------------------------------------------------------------------------

def fields_from_name(name: str) -> dict:
    """The shape fields of a case name: the bench's ("dense b=128 h_q=16 s_q=1 s_k=4096~ p=64", "... p=64 fp8",
    "sparse b=128 h_q=8 s_q=1 topk=2048 ctx=32768") or bench/compare.py's ("dense b=1 h_q=16 s_q=4
    s_k=1024 causal", "fp8 dense ...", "sparse b=64 h_q=8 s_q=1 topk=2048 (peer padded to 64)")."""
    words = name.split(" (")[0].split()
    dtype = None
    if words and words[0] == "fp8":
        dtype, words = "fp8", words[1:]
    if not words or words[0] not in ("dense", "sparse"):
        return {}
    family, values, flags = words[0], {}, set()
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if sep:
            values[key] = value
        else:
            flags.add(word)
    try:
        s_k_text = values.get("s_k", "0")
        sparse = family == "sparse"
        return {
            "family": family,
            "dtype": dtype or ("fp8" if sparse or "fp8" in flags else "fp16" if "fp16" in flags else "bf16"),
            "b": int(values["b"]),
            "h_q": int(values["h_q"]),
            "s_q": int(values["s_q"]),
            "s_k": float(values.get("ctx", 0) if sparse else s_k_text.rstrip("~")),
            "page": int(values.get("p", 64)),
            "topk": int(values.get("topk", 0)),
            "graph": "graph" in flags,
            "variable_lengths": s_k_text.endswith("~"),
        }
    except (KeyError, ValueError):
        return {}


def match_key(name: str) -> tuple | None:
    """What two runs of the same work share, whatever the tool named it (dense: the nominal s_k)."""
    f = fields_from_name(name)
    if not f:
        return None
    s_k = 0 if f["family"] == "sparse" else f["s_k"]
    return (f["family"], f["dtype"], f["b"], f["h_q"], f["s_q"], s_k, f["variable_lengths"], f["topk"], f["page"])


# bench/compare.py names the libraries it timed beside OpenMLA.
PEER_NAMES = {"flash_mla": "FlashMLA", "vllm_fp8": "vLLM FP8 fork"}


def is_compare_json(data: dict) -> bool:
    """bench/compare.py's output: {"info": {...}, "cases": [{"name", "group", "<library>": {...}}]}."""
    return "info" in data and all("name" in c for c in data.get("cases", []))


def bench_from_compare(data: dict) -> dict:
    """OpenMLA's figures of a bench/compare.py JSON in the bench's format (ceilings from its info)."""
    info = data["info"]
    cases = []
    for case in data["cases"]:
        ours = case.get("openmla", {})
        if "us" not in ours or not fields_from_name(case["name"]):
            continue
        cases.append({"case": case["name"], "us": ours["us"], "tflops": ours["tflops"], "gbps": ours["gbps"]})
    return {"name": "OpenMLA", "device": info.get("device", "?"), "copy_gbps": info["copy_gbps"],
            "gemm_tflops": info["bf16_gemm_tflops"], "cases": cases}


def load_bench(path: str | Path) -> dict:
    """The bench JSON with every case in format 2 (fields filled from the name when missing).
    A bench/compare.py JSON is read as OpenMLA's figures from it."""
    data = json.loads(Path(path).read_text())
    if is_compare_json(data):
        data = bench_from_compare(data)
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


def _peer_figures(path, name: str, entries: list[tuple[str, dict]], ours: dict) -> dict:
    """{our case name: {"us", "tflops", "gbps"}} from (peer case name, figures) pairs matched by shape."""
    by_key = {match_key(case["case"]): case for case in ours["cases"]}
    matched = {}
    for peer_name, figures in entries:
        mine = by_key.get(match_key(peer_name))
        if mine is None:
            continue
        if "us" in figures:
            us = float(figures["us"])
        elif "tflops" in figures:
            us = mine["flops"] / (float(figures["tflops"]) * 1e12) * 1e6
        elif "gbps" in figures:
            us = mine["bytes"] / (float(figures["gbps"]) * 1e9) * 1e6
        else:
            raise ValueError(f"{path}: case '{peer_name}' has none of us, tflops, gbps")
        matched[mine["case"]] = {
            "us": us,
            "tflops": mine["flops"] / (us * 1e-6) / 1e12,
            "gbps": mine["bytes"] / (us * 1e-6) / 1e9,
        }
    return {"name": name, "cases": matched}


def load_peers(path: str | Path, ours: dict) -> list[dict]:
    """A comparison JSON's peers, each {"name", "cases": {our case name: figures}}, matched to our
    cases by shape (the names may differ in form). Either a plain list of a peer's figures,
    {"name": ..., "cases": [{"case": ..., "us" | "tflops" | "gbps": ...}]}, or bench/compare.py's
    output (one peer per library it timed beside OpenMLA)."""
    data = json.loads(Path(path).read_text())
    if is_compare_json(data):
        libraries = sorted({lib for case in data["cases"] for lib, r in case.items()
                            if isinstance(r, dict) and "us" in r and lib != "openmla"})
        return [_peer_figures(path, PEER_NAMES.get(lib, lib),
                              [(c["name"], c[lib]) for c in data["cases"] if "us" in c.get(lib, {})], ours)
                for lib in libraries]
    entries = [(case["case"], case) for case in data.get("cases", [])]
    return [_peer_figures(path, data.get("name", Path(path).stem), entries, ours)]


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
    peers = [peer for path in args.compare for peer in load_peers(path, data)]
    if not args.compare and is_compare_json(json.loads(Path(args.bench_json).read_text())):
        peers = load_peers(args.bench_json, data)  # compare.py's own peers
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
