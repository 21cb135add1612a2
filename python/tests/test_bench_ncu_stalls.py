# SPDX-License-Identifier: Apache-2.0
"""bench/ncu_stalls.py on an excerpt of a recorded ncu source page (no GPU): the sparse prefill
kernel's two largest mbarrier waits of session 24, one with its retry branch scheduled 40
instructions after the try-wait."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "ncu_stalls.py"
EXCERPT = ROOT / "tests" / "data" / "ncu_source_prefill_excerpt.csv"

sys.path.insert(0, str(ROOT / "bench"))
import ncu_stalls  # noqa: E402


def test_waits_are_summed_per_barrier_offset():
    lines = ncu_stalls.read_source(str(EXCERPT))
    assert len(lines) == 48 and sum(l["samples"] for l in lines) == 41687
    waits = ncu_stalls.barrier_waits(lines)
    # 0x385b8: the kSeIssued hand-off (WG1's wait), try-wait 81 + retry branch 19120 samples.
    # 0x38378: tile_free[0][0] (the gather's wait), its retry branch 40 instructions down.
    assert dict(waits) == {"0x385b8": 19201, "0x38378": 18244}


def test_report_lists_sites_barriers_and_opcodes():
    result = subprocess.run([sys.executable, str(SCRIPT), str(EXCERPT), "--top", "2", "--ops", "2"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "48 instructions, 41687 stall samples" in out
    assert "ed730    19120" in out and "long_sb 18821" in out
    assert "0x385b8    19201" in out
    assert "BRA" in out.split("opcodes")[1]


def test_a_file_without_sass_lines_fails(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text('"Kernel Name","k"\n"Address","Source","Warp Stall Sampling (All Samples)"\n')
    result = subprocess.run([sys.executable, str(SCRIPT), str(empty)], capture_output=True, text=True, check=False)
    assert result.returncode == 1 and "no SASS lines" in result.stderr
