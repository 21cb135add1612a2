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


def test_target_arguments():
    parse = load_module().parse_target
    assert parse(["576", "128", "8192"]) == ([(576, 128, 8192)], 4, False)
    assert parse(["576", "128", "32768", "2", "fp8"]) == ([(576, 128, 32768)], 2, True)
    assert parse(["576", "128", "32768", "576", "64", "32768", "2"]) == ([(576, 128, 32768), (576, 64, 32768)], 2,
                                                                          False)
    for bad in (["576", "128"], ["576", "128", "32768", "576", "64"], ["576", "128", "x"], ["576", "128", "8192", "0"]):
        try:
            parse(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")
    result = subprocess.run([sys.executable, str(SCRIPT), "target", "576", "128"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 2 and "triples" in result.stderr


HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n')


def launch_rows(launch_id: int, kernel: str, cycles: int) -> str:
    prefix = f'"{launch_id}","1","python3","h","{kernel}","1","7","(384, 1, 1)","(2, 66, 1)","0","9.0","m",'
    return (prefix + f'"sm__cycles_elapsed.max","cycle","{cycles:,}"\n' +
            prefix + '"gpu__time_duration.sum","ns","3,000,000"\n')


def test_table_splits_launches_by_the_targets_shapes(tmp_path):
    ours, theirs = "void openmla::prefill_sparse_alternate_blocks_kernel<576>(openmla::KernelParams)", "sparse_attn_fwd"
    text = "# shape 576 128 32768: openmla 2, flash_mla 2\n# shape 576 16 32768: openmla 2, flash_mla 0\n" + HEADER
    # launch order: shape 1 OpenMLA, shape 1 FlashMLA, shape 2 OpenMLA
    for launch_id, (kernel, cycles) in enumerate([(ours, 6_500_000), (ours, 6_520_000), (theirs, 6_230_000),
                                                  (theirs, 6_250_000), (ours, 2_000_000), (ours, 2_020_000)]):
        text += launch_rows(launch_id, kernel, cycles)
    path = tmp_path / "multi.csv"
    path.write_text(text)
    result = subprocess.run([sys.executable, str(SCRIPT), "table", str(path)], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3, lines
    assert "[576 128 32768]  openmla   launches 2  Mcycles 6.510" in lines[0]
    assert "[576 128 32768]  flash_mla launches 2  Mcycles 6.240" in lines[1]
    assert "[576 16 32768]  openmla   launches 2  Mcycles 2.010" in lines[2]

    # A call that launched two matching kernels: the counts no longer match, so the whole file is reported.
    path.write_text(text.replace("openmla 2, flash_mla 0", "openmla 1, flash_mla 0"))
    result = subprocess.run([sys.executable, str(SCRIPT), "table", str(path)], capture_output=True, text=True,
                            check=False)
    lines = result.stdout.splitlines()
    assert "do not match" in lines[0] and "launches 4" in lines[1] and "launches 2" in lines[2]


def test_target_runs_each_shape_and_announces_its_calls(monkeypatch, capsys):
    import types

    made = []
    fake_compare = types.SimpleNamespace(
        prefill_inputs=lambda s_q, h_q, s_kv, d_qk=576, fp8_cache=False: {"h_q": h_q, "fp8": fp8_cache},
        openmla_prefill=lambda x: (lambda: made.append(("openmla", x["h_q"]))),
        flash_mla_prefill=lambda x: None if x["h_q"] not in (64, 128) or x["fp8"] else
        (lambda: made.append(("flash_mla", x["h_q"]))))
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: made.append("sync")))
    monkeypatch.setitem(sys.modules, "compare", fake_compare)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    assert load_module().main(["target", "576", "128", "32768", "576", "16", "32768", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == ["# shape 576 128 32768: openmla 2, flash_mla 2",
                                                    "# shape 576 16 32768: openmla 2, flash_mla 0"]
    assert made == [("openmla", 128)] * 2 + ["sync"] + [("flash_mla", 128)] * 2 + ["sync"] + \
        [("openmla", 16)] * 2 + ["sync"]
