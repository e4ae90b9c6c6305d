"""``catalog/table/``: the operation modules take a ``TableSnapshot``, never a
``Table``, and a snapshot is a value that does not change under its holder."""

from __future__ import annotations

import ast
import dataclasses
import os

import pyarrow as pa
import pytest

import tessera
from tessera.catalog.table import Table
from tessera.catalog.table.snapshot import TableSnapshot

PACKAGE = os.path.dirname(os.path.abspath(tessera.catalog.table.__file__))


def _imported(path: str) -> set[str]:
    """The relative module names ``path`` imports from its own package (``.x``), anywhere in it."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize(
    "name", sorted(f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py") and f not in ("__init__.py", "table.py"))
)
def test_no_operation_module_imports_table(name):
    assert "table" not in _imported(os.path.join(PACKAGE, f"{name}.py"))


def test_a_write_moves_the_table_to_a_new_snapshot_and_leaves_the_old_one(tmp_path):
    t = Table.create(str(tmp_path / "t"), pa.table({"a": pa.array([1, 2], pa.int64())}))
    before = t.snapshot
    t.append(pa.table({"a": pa.array([3], pa.int64())}))
    assert t.snapshot is not before and t.snapshot.version == before.version + 1
    assert before.version == 1 and [f.physical_rows for f in before.fragments] == [2]
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.mfile = t.snapshot.mfile  # type: ignore[misc]
    assert isinstance(before, TableSnapshot) and before.schema == t.schema
