# SPDX-License-Identifier: Apache-2.0
"""bench/plot.py on recorded bench JSONs (no GPU): PNGs come out, peers are matched."""

import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def load_plot_module():
    spec = importlib.util.spec_from_file_location("openmla_bench_plot", ROOT / "bench" / "plot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plot_writes_roofline_and_bars_with_a_peer(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "plot.py"), str(DATA / "bench_h200_format2.json"),
         "--compare", str(DATA / "bench_peer_flashmla.json"), "--out", str(tmp_path / "h200")],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    for name in ("h200_roofline.png", "h200_bars.png"):
        png = (tmp_path / name).read_bytes()
        assert png.startswith(PNG_SIGNATURE) and len(png) > 20_000, name


def test_peer_figures_follow_from_our_work():
    plot = load_plot_module()
    ours = plot.load_bench(DATA / "bench_h200_format2.json")
    (peer,) = plot.load_peers(DATA / "bench_peer_flashmla.json", ours)
    assert peer["name"] == "FlashMLA" and len(peer["cases"]) == 16
    case = "dense b=128 h_q=128 s_q=2 s_k=16384~ p=64"  # given as 664 TFLOP/s
    assert abs(peer["cases"][case]["tflops"] - 664) < 1e-6
    mine = next(c for c in ours["cases"] if c["case"] == case)
    assert abs(peer["cases"][case]["us"] - mine["flops"] / 664e12 * 1e6) < 1e-6


def test_format_1_case_names_give_the_shape():
    plot = load_plot_module()
    fields = plot.fields_from_name("dense b=32 h_q=128 s_q=4 s_k=1024 graph p=64")
    assert fields == {"family": "dense", "dtype": "bf16", "b": 32, "h_q": 128, "s_q": 4, "s_k": 1024.0,
                      "page": 64, "topk": 0, "graph": True, "variable_lengths": False}
    fields = plot.fields_from_name("sparse b=128 h_q=8 s_q=1 topk=2048 ctx=32768")
    assert (fields["family"], fields["dtype"], fields["topk"], fields["s_k"]) == ("sparse", "fp8", 2048, 32768.0)
    assert plot.fields_from_name("dense b=4 h_q=8 s_q=1 s_k=4096~ p=16 fp16")["dtype"] == "fp16"
    # The bench's dense FP8 cases; compare.py names them "fp8 dense ...". Either way a BF16 peer must not match.
    bench_fp8 = "dense b=128 h_q=16 s_q=1 s_k=16384~ p=64 fp8"
    assert plot.fields_from_name(bench_fp8)["dtype"] == "fp8"
    assert plot.match_key(bench_fp8) == plot.match_key("fp8 dense b=128 h_q=16 s_q=1 s_k=16384~")
    assert plot.match_key(bench_fp8) != plot.match_key("dense b=128 h_q=16 s_q=1 s_k=16384~ p=64")


def test_compare_py_output_is_matched_by_shape(tmp_path):
    """bench/compare.py's JSON (made up figures here): peers per library, names in its own form."""
    import json

    plot = load_plot_module()
    ours = plot.load_bench(DATA / "bench_h200_format2.json")
    compare = {
        "info": {"device": "test", "copy_gbps": 4000.0, "bf16_gemm_tflops": 700.0},
        "cases": [
            {"group": "dense_long", "name": "dense b=128 h_q=128 s_q=2 s_k=16384~ causal",
             "openmla": {"us": 2000.0, "tflops": 550.0, "gbps": 1100.0},
             "flash_mla": {"us": 1800.0, "tflops": 610.0, "gbps": 1200.0}},
            {"group": "sparse_narrow", "name": "sparse b=128 h_q=16 s_q=2 topk=2048 (peer padded to 64)",
             "openmla": {"us": 170.0, "tflops": 100.0, "gbps": 2000.0},
             "flash_mla": {"us": 400.0, "tflops": 40.0, "gbps": 900.0}},
            {"group": "prefill", "name": "prefill s_q=4096 s_kv=8192 h_q=128 topk=2048",
             "flash_mla": {"us": 900.0, "tflops": 500.0, "gbps": 100.0}},
        ],
    }
    path = tmp_path / "compare.json"
    path.write_text(json.dumps(compare))
    (peer,) = plot.load_peers(path, ours)
    assert peer["name"] == "FlashMLA"
    assert set(peer["cases"]) == {"dense b=128 h_q=128 s_q=2 s_k=16384~ p=64",
                                  "sparse b=128 h_q=16 s_q=2 topk=2048 ctx=32768"}
    assert peer["cases"]["dense b=128 h_q=128 s_q=2 s_k=16384~ p=64"]["us"] == 1800.0
    # As the main input: OpenMLA's figures from it, its peers drawn beside them.
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "plot.py"), str(path), "--out",
                             str(tmp_path / "cmp")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "2 cases, FlashMLA: 2" in result.stdout


def test_compare_py_own_context_sparse_case_matches_the_bench_case():
    """compare.py's sparse_hbm cases (each request its own 32768 tokens) name their context as the bench does."""
    plot = load_plot_module()
    own = "sparse b=128 h_q=16 s_q=1 topk=2048 ctx=32768 each (peer padded to 64)"
    assert plot.fields_from_name(own)["s_k"] == 32768.0
    assert plot.match_key(own) == plot.match_key("sparse b=128 h_q=16 s_q=1 topk=2048 ctx=32768") is not None
