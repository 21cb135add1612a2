"""Hostile-input fuzz through the Python API (fixed seeds, bounded): each batch
of cases runs in a child process (fuzz_cases.py), so a crash fails its batch
with the seed to replay instead of killing pytest.

Replay a batch:  PYTHONPATH=build/python:python/tests python3 python/tests/fuzz_cases.py SEED COUNT
"""

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
CASES_PER_BATCH = 200


@pytest.mark.parametrize("seed", [1, 2])
def test_fuzz_batch(seed):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), *sys.path) if p)
    proc = subprocess.run([sys.executable, str(HERE / "fuzz_cases.py"), str(seed), str(CASES_PER_BATCH)],
                          capture_output=True, text=True, env=env, timeout=300)
    report = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, f"fuzz batch {seed} exited with {proc.returncode}:\n{report}"
    assert f"fuzz batch {seed}: {CASES_PER_BATCH} cases, 0 failures" in proc.stdout, report
