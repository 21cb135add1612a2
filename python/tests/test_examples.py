"""examples/vllm_pattern.py runs: on the CPU its eager steps (61 layers reusing one metadata per step) are checked
against its torch reference; on a GPU the CUDA-graph part runs too."""

import importlib.util
import pathlib

import pytest
import torch

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "vllm_pattern.py"


def _example():
    spec = importlib.util.spec_from_file_location("vllm_pattern", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dialect", ["lazy", "tensor"])
def test_vllm_pattern_cpu(dialect, capsys):
    assert _example().main(["--device", "cpu", "--dialect", dialect, "--batch", "2", "--max-len", "130",
                            "--s-q", "2"]) == 0
    assert "61 layers x 2 steps" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.parametrize("dialect", ["lazy", "tensor"])
def test_vllm_pattern_gpu(dialect, capsys):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    assert _example().main(["--device", "cuda", "--dialect", dialect]) == 0
    assert "3 replays with new lengths match" in capsys.readouterr().out
