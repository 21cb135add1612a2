# SPDX-License-Identifier: Apache-2.0
"""bench/ncu_cycles.py's table on recorded ncu output (no GPU): launches split by library, cycles
averaged, and a run whose launch died reported as such instead of as numbers."""

import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SCRIPT = ROOT / "bench" / "ncu_cycles.py"


def load_module():
    spec = importlib.util.spec_from_file_location("openmla_bench_ncu_cycles", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_launches_are_split_by_library_in_launch_order():
    # Recorded on the H200 (session 24): 4 OpenMLA launches, then 4 FlashMLA ones.
    launches = load_module().read_launches(str(DATA / "ncu_cycles_prefill_h200.csv"))
    assert sorted(launches) == ["flash_mla", "openmla"]
    assert [len(launches["openmla"]), len(launches["flash_mla"])] == [4, 4]
    assert [round(m["sm__cycles_elapsed.max"]) for m in launches["openmla"]] == [6378625, 6381858, 6386079, 6374199]
    assert round(launches["flash_mla"][0]["sm__cycles_elapsed.max"]) == 6106616


def test_table_prints_mean_min_max():
    result = subprocess.run([sys.executable, str(SCRIPT), "table", str(DATA / "ncu_cycles_prefill_h200.csv")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and "openmla" in lines[0] and "flash_mla" in lines[1]
    assert "launches 4  Mcycles 6.380 (min 6.374, max 6.386)" in lines[0]


def test_a_launch_that_died_is_not_a_number():
    # ncu writes nan for every metric of a launch that hit an illegal instruction.
    assert load_module().read_launches(str(DATA / "ncu_cycles_prefill_failed_launch.csv")) == {}
    result = subprocess.run([sys.executable, str(SCRIPT), "table", str(DATA / "ncu_cycles_prefill_failed_launch.csv")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "no completed launch" in result.stdout


def test_usage_without_arguments():
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "target D_QK H_Q S_KV" in result.stderr
