"""Bad inputs to tables: typed errors and nothing changed on disk."""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np
import pyarrow as pa
import pytest

from catalog import Table
from catalog import errors as E
from format import manifest as mf


def _snapshot(root: str) -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture
def table(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, pa.table({"i": np.arange(100), "s": [str(x) for x in range(100)]}))
    t.append(pa.table({"i": np.arange(100, 110), "s": ["x"] * 10}))
    return path


def _latest_manifest(path: str) -> str:
    d = os.path.join(path, "_versions")
    names = [n for n in os.listdir(d) if n.endswith(".manifest")]
    return os.path.join(d, sorted(names)[0])  # V2: newest sorts first


@pytest.mark.parametrize("cut", [0, 3, 15, 60, -1])
def test_truncated_manifest(table, cut):
    p = _latest_manifest(table)
    data = open(p, "rb").read()
    open(p, "wb").write(data[: cut if cut >= 0 else len(data) - 1])
    before = _snapshot(table)
    with pytest.raises(E.CorruptFileError):
        Table.open(table)
    assert Table.open(table, version=1).count_rows() == 100  # older versions unaffected
    assert _snapshot(table) == before


def test_corrupt_manifest_protobuf(table):
    p = _latest_manifest(table)
    data = bytearray(open(p, "rb").read())
    pos = struct.unpack("<q", data[-16:-8])[0]
    data[pos + 4 : pos + 12] = b"\xff" * 8
    open(p, "wb").write(bytes(data))
    with pytest.raises(E.CorruptFileError):
        Table.open(table)


def _set_flags(path: str, reader: int, writer: int) -> None:
    p = _latest_manifest(path)
    m = mf.read_manifest(open(p, "rb").read())
    m.manifest.reader_feature_flags = reader
    m.manifest.writer_feature_flags = writer
    open(p, "wb").write(mf.write_manifest(m.manifest, m.transaction, m.index_section))


def test_unknown_reader_flag(table):
    _set_flags(table, 64, 64)
    before = _snapshot(table)
    with pytest.raises(E.UnknownFeatureFlagError, match=r"\[6\]"):
        Table.open(table)
    assert _snapshot(table) == before


def test_unknown_writer_flag_refuses_writes_only(table):
    _set_flags(table, 0, 1 << 20)
    t = Table.open(table)
    assert t.count_rows() == 110
    before = _snapshot(table)
    with pytest.raises(E.UnknownFeatureFlagError, match="writer"):
        t.append(pa.table({"i": [1], "s": ["a"]}))
    with pytest.raises(E.UnknownFeatureFlagError):
        t.delete("i = 1")
    assert _snapshot(table) == before


def test_mixed_naming(table):
    open(os.path.join(table, "_versions", "7.manifest"), "wb").write(b"x")
    with pytest.raises(E.MixedNamingError):
        Table.open(table)


def test_missing_data_file(table):
    t = Table.open(table)
    path = t.fragments[0].files[0].path
    os.unlink(os.path.join(table, "data", path))
    with pytest.raises(E.StoreError, match=path):
        Table.open(table).to_arrow()


def test_bad_predicates_change_nothing(table):
    t = Table.open(table)
    before = _snapshot(table)
    with pytest.raises(E.PredicateSyntaxError):
        t.delete("i >")
    with pytest.raises(E.UnknownColumnError):
        t.delete("nope = 1")
    with pytest.raises(E.UnknownColumnError):
        t.update({"nope": 1})
    with pytest.raises(E.PredicateError):
        t.to_arrow(filter="i = 'x' AND")
    assert _snapshot(table) == before
    assert t.version == 2


def test_append_schema_mismatch_changes_nothing(table):
    t = Table.open(table)
    before = _snapshot(table)
    with pytest.raises(E.SchemaMismatchError):
        t.append(pa.table({"i": np.arange(3), "other": ["a", "b", "c"]}))
    with pytest.raises(E.SchemaMismatchError):
        t.append(pa.table({"i": ["not", "an", "int"], "s": ["a", "b", "c"]}))
    assert _snapshot(table) == before


def test_create_twice_and_missing_table(tmp_path, table):
    with pytest.raises(E.TableExistsError):
        Table.create(table, pa.table({"i": [1]}))
    with pytest.raises(E.TableNotFoundError):
        Table.open(str(tmp_path / "nothing"))
    with pytest.raises(E.VersionNotFoundError):
        Table.open(table, version=99)
    with pytest.raises(E.InvalidURIError):
        Table.open("gopher://x/y")
    with pytest.raises(E.TagError):
        Table.open(table, version="no-such-tag")
