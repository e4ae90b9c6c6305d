"""The README's Python code blocks work as written: each ```python block is
run in a fresh interpreter in an empty directory (the Spark block, which
needs a SparkSession, is marked ```python spark and only compiled)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
_BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.M | re.S)


def _blocks() -> list[tuple[str, str]]:
    with open(README) as f:
        return [(m.group(1).strip(), m.group(2)) for m in _BLOCK.finditer(f.read())]


def test_readme_has_python_blocks():
    assert len([b for b in _blocks() if not b[0]]) >= 1


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_readme_python_block_runs(index, tmp_path):
    tag, code = _blocks()[index]
    if tag == "spark":
        compile(code, f"README block {index}", "exec")
        return
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"README block {index} failed:\n{code}\n{out.stdout}\n{out.stderr}"
