"""The committed *_pb2 modules match the .proto files, and carry the fields
pylance 14 writes that older Lance sources lack."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_generated_modules_are_fresh(tmp_path):
    pytest.importorskip("grpc_tools")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_protos.py"), "--out", str(tmp_path)], check=True)
    gen = tmp_path / "format" / "protos"
    committed = os.path.join(ROOT, "format", "protos")
    names = sorted(p.name for p in gen.iterdir() if p.suffix in (".py", ".pyi"))
    assert names, "generator produced nothing"
    stale = [n for n in names if not filecmp.cmp(gen / n, os.path.join(committed, n), shallow=False)]
    assert not stale, f"stale generated modules (run scripts/gen_protos.py): {stale}"


def test_pylance14_fields_present():
    from format.protos import encodings21_pb2

    assert encodings21_pb2.MiniBlockLayout.DESCRIPTOR.fields_by_name["has_large_chunk"].number == 10
    assert encodings21_pb2.AllNullLayout.DESCRIPTOR.fields_by_name["constant_value"].number == 6
