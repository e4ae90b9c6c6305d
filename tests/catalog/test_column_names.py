"""Top-level column names pylance cannot hold are refused, on every path that
introduces one, with nothing written.

pylance 14 refuses a top-level name with a ``.`` (``Top level field a.b cannot
contain `.```), and writes but cannot scan a table whose top-level name is
empty or holds a backtick (``No field named ...``).  Nested names may hold all
three, and pylance reads them: Tessera accepts them too.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import tessera
from tessera.catalog.errors import InvalidArgumentError, SchemaMismatchError

BAD = ["a.b", ".a", "a.", "a`b", ""]


def _files(root) -> list[str]:
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def _is_refused(exc: BaseException, name: str) -> None:
    assert isinstance(exc, SchemaMismatchError) and isinstance(exc, ValueError), type(exc)
    assert type(exc).__name__ == "InvalidColumnNameError"
    if name:
        assert repr(name) in str(exc)


@pytest.mark.parametrize("name", BAD)
def test_create_refuses(tmp_path, name):
    uri = str(tmp_path / "t")
    for data in (pa.table({"id": [1], name: [2]}), pa.schema([("id", pa.int64()), (name, pa.int64())])):
        with pytest.raises(SchemaMismatchError) as info:
            tessera.Table.create(uri, data)
        _is_refused(info.value, name)
        assert not os.path.exists(uri) or _files(uri) == []


def test_catalog_create_table_refuses_and_declares_nothing(tmp_path):
    cat = tessera.connect(warehouse=str(tmp_path / "wh"))
    cat.create_namespace("ns")
    with pytest.raises(SchemaMismatchError) as info:
        cat.create_table("ns.t", pa.table({"a.b": [1]}))
    _is_refused(info.value, "a.b")
    assert cat.list_tables("ns") == []
    cat.create_table("ns.t", pa.table({"a": [1]}))  # the name is free: nothing was declared


@pytest.fixture
def table(tmp_path):
    uri = str(tmp_path / "t")
    return tessera.Table.create(uri, pa.table({"a": [1, 2], "s": pa.array([{"x": 1}, {"x": 2}])}))


@pytest.mark.parametrize("name", ["x.y", "a`b"])
def test_rename_refuses(table, lance, name):
    before, files = table.version, _files(table.uri)
    with pytest.raises(SchemaMismatchError) as info:
        table.rename_column("a", name)
    _is_refused(info.value, name)
    with pytest.raises(InvalidArgumentError):  # as before: an empty name
        table.rename_column("a", "")
    assert tessera.Table.open(table.uri).version == before and _files(table.uri) == files
    assert lance.dataset(table.uri).to_table().column_names == ["a", "s"]


@pytest.mark.parametrize(
    "columns",
    [
        {"s.b": "a + 1"},
        {"ok": "a", "c`d": "a"},
        pa.table({"c.d": [1, 2]}),
        pa.table({"ok": [1, 2], "": [3, 4]}),
    ],
    ids=["expr-dot", "expr-backtick", "data-dot", "data-empty"],
)
def test_add_columns_refuses(table, lance, columns):
    before, files = table.version, _files(table.uri)
    with pytest.raises(SchemaMismatchError) as info:
        table.add_columns(columns)
    names = list(columns) if isinstance(columns, dict) else columns.column_names
    _is_refused(info.value, [n for n in names if n != "ok"][0])
    assert tessera.Table.open(table.uri).version == before and _files(table.uri) == files
    assert lance.dataset(table.uri).to_table().num_rows == 2


def test_overwrite_refuses(table):
    before, files = table.version, _files(table.uri)
    for data in (pa.table({"a.b": [1]}), pa.schema([("a`b", pa.int64())])):
        with pytest.raises(SchemaMismatchError) as info:
            table.overwrite(data)
        _is_refused(info.value, data.schema.names[0] if isinstance(data, pa.Table) else data.names[0])
    assert tessera.Table.open(table.uri).version == before and _files(table.uri) == files


def test_only_top_level_names_are_checked(tmp_path, lance):
    """Dots, backticks and empty names inside a struct or as a list's item:
    pylance writes and reads them, and so does Tessera; only the top level is
    refused.  A table pylance wrote with a backtick in a top-level name (which
    pylance itself cannot scan) is still read: the check guards names being
    introduced, not reads."""
    data = pa.table(
        {
            "id": [1, 2],
            "s": pa.array([{"x.y": 1, "a`b": "p", "": 1.5}, {"x.y": 2, "a`b": "q", "": 2.5}]),
            "l": pa.array([[1], [2, 3]], pa.list_(pa.field("it.em", pa.int64()))),
        }
    )
    uri = str(tmp_path / "nested")
    t = tessera.Table.create(uri, data)
    t.rename_column("id", "key")
    t.add_columns({"twice": "key * 2"})
    want = data.rename_columns(["key", "s", "l"]).append_column("twice", pa.array([2, 4]))
    assert t.to_arrow().equals(want)
    assert lance.dataset(uri).to_table().to_pylist() == want.to_pylist()
    with pytest.raises(SchemaMismatchError):
        t.add_columns({"s.x.y": "key"})

    uri = str(tmp_path / "odd")
    lance.write_dataset(pa.table({"id": [1], "a`b": [2]}), uri)
    assert tessera.Table.open(uri).to_arrow().to_pydict() == {"id": [1], "a`b": [2]}
