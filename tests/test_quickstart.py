"""README's main job runs as written (in a fresh warehouse)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_quickstart_runs(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run(
        [sys.executable, os.path.join(root, "scripts", "quickstart.py"), str(tmp_path / "wh")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "none lost" in out and "multi-table transaction" in out and "history of shop.orders" in out
    assert "2,010 rows" in out
