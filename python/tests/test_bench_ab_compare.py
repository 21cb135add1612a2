# SPDX-License-Identifier: Apache-2.0
"""bench/ab_compare.py on synthetic compare.py JSONs (no GPU): means, gains, the peer, failed runs."""

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_module():
    spec = importlib.util.spec_from_file_location("openmla_bench_ab_compare", ROOT / "bench" / "ab_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_run(path, ours, peer, error=None):
    """One compare.py JSON: two cases of group g, OpenMLA times `ours`, FlashMLA times `peer`."""
    cases = []
    for name, us, peer_us in zip(("case a", "case b"), ours, peer):
        mine = {"error": error} if error else {"us": us}
        cases.append({"group": "g", "name": name, "openmla": mine, "flash_mla": {"us": peer_us}})
    path.write_text(json.dumps({"info": {}, "cases": cases}))
    return str(path)


def test_means_gains_and_speeds(tmp_path):
    ab = load_module()
    new = [ab.load_run(write_run(tmp_path / f"new{i}.json", (9.0 + i, 20.0), (12.0, 30.0))) for i in (0, 2)]
    old = [ab.load_run(write_run(tmp_path / "old.json", (12.0, 20.0), (14.0, 30.0)))]
    (rows,) = ab.compare(new, old).values()
    a, b = rows
    assert a["new"] == 10.0 and a["old"] == 12.0 and abs(a["gain"] - 1.2) < 1e-12
    assert a["peer"] == "flash_mla" and abs(a["peer_us"] - (12 + 12 + 14) / 3) < 1e-12
    assert abs(a["speed_new"] - a["peer_us"] / 10.0) < 1e-12 and abs(a["speed_old"] - a["peer_us"] / 12.0) < 1e-12
    assert b["gain"] == 1.0
    assert f"gain geomean {math.sqrt(1.2):.4f}" in ab.summary(rows)


def test_a_failed_run_is_named_and_left_out(tmp_path):
    new = write_run(tmp_path / "new.json", (10.0, 20.0), (12.0, 30.0))
    good = write_run(tmp_path / "old1.json", (11.0, 22.0), (12.0, 30.0))
    failed = write_run(tmp_path / "old2.json", (0, 0), (12.0, 30.0), error="TypeError: unexpected keyword")
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "ab_compare.py"), "--new", new,
                             "--old", good, failed, "--markdown"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "old2.json: OpenMLA did not run 2 case(s), first: case a: TypeError" in result.stderr
    assert "| case a | 10.0 | 11.0 | 1.100 |" in result.stdout  # the old mean over the run that has it
    only_failed = subprocess.run([sys.executable, str(ROOT / "bench" / "ab_compare.py"), "--new", new,
                                  "--old", failed], capture_output=True, text=True, check=False)
    assert only_failed.returncode == 1 and "no case was timed by OpenMLA on both sides" in only_failed.stderr
