"""The README's Python example runs as written (on the CPU reference without a GPU)."""

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs():
    text = README.read_text()
    section = text[text.index("## Python"):]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(example.strip().splitlines()) <= 12
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, str(README), "exec"), {})
    assert "torch.Size([4, 1, 128, 512]) torch.Size([4, 128, 1])" in printed.getvalue()
