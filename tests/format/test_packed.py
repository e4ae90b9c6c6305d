"""Packed structs (field metadata ``lance-encoding:packed`` = ``true``): one
column of row-major fixed-width fields, both directions against pylance 14."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera import format as tformat
from tessera.format.file import schema as lschema
from tessera.format.file.container import ContainerReader
from tessera.format.file.io import open_reader

lance_file = pytest.importorskip("lance.file")

VERSIONS = ("2.0", "2.1", "2.2")
PACKED = {"lance-encoding:packed": "true"}
ST = pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.float64()), pa.field("c", pa.uint8())])
N = 3000


def _struct(n: int = N, mask=None) -> pa.StructArray:
    kids = [
        pa.array(np.arange(n, dtype=np.int32)),
        pa.array(np.arange(n) * 0.5),
        pa.array((np.arange(n) % 200).astype(np.uint8)),
    ]
    return pa.StructArray.from_arrays(kids, fields=list(ST), mask=mask)


def _table(mask=None) -> pa.Table:
    sch = pa.schema([pa.field("k", pa.int64()), pa.field("p", ST, metadata=PACKED), pa.field("z", pa.string())])
    return pa.table([pa.array(np.arange(N)), _struct(mask=mask), pa.array([f"z{i}" for i in range(N)])], schema=sch)


def _pylance_write(path, table, version):
    with lance_file.LanceFileWriter(str(path), table.schema, version=version, max_page_bytes=8 * 1024) as w:
        w.write_batch(table)


def _columns(path) -> int:
    return ContainerReader(open_reader(str(path))).num_columns


def test_schema_counts_a_packed_struct_as_one_column():
    fields = lschema.fields_from_arrow(_table().schema)
    p = fields[1]
    assert p.is_packed_struct and not fields[0].is_packed_struct
    assert [f.name for f in p.leaves()] == ["p"]  # 2.1+: one column
    assert [f.name for f in p.column_nodes()] == ["p"]  # 2.0: one column
    legacy = lschema.fields_from_arrow(pa.schema([pa.field("q", ST, metadata={"packed": "TRUE"})]))[0]
    assert legacy.is_packed_struct
    off = lschema.fields_from_arrow(pa.schema([pa.field("q", ST, metadata={"lance-encoding:packed": "1"})]))[0]
    assert not off.is_packed_struct and len(list(off.leaves())) == 3  # Lance accepts only "true"


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_packed_struct_reads(tmp_path, version):
    table = _table()
    path = tmp_path / "p.lance"
    _pylance_write(path, table, version)
    assert _columns(path) == 3
    r = tformat.FileReader(path)
    assert r.read().equals(table)
    assert r.read_range(100, 2900).equals(table.slice(100, 2800))
    idx = np.array([0, 5, 1234, 2999])
    assert r.take(idx).equals(table.take(idx))


@pytest.mark.parametrize("version", ("2.1", "2.2"))
def test_pylance_packed_struct_with_null_rows(tmp_path, version):
    table = _table(mask=pa.array(np.arange(N) % 5 == 0))
    path = tmp_path / "p.lance"
    _pylance_write(path, table, version)
    r = tformat.FileReader(path)
    assert r.read().equals(table)
    idx = np.array([0, 1, 2999])
    assert r.take(idx).equals(table.take(idx))


@pytest.mark.parametrize("version", VERSIONS)
def test_tessera_writes_packed_structs_pylance_reads(tmp_path, version):
    table = _table(mask=None if version == "2.0" else pa.array(np.arange(N) % 4 == 1))
    path = tmp_path / "t.lance"
    tformat.write_file(path, table, file_version=version, page_size=8 * 1024)
    assert _columns(path) == 3
    assert lance_file.LanceFileReader(str(path)).read_all().to_table().equals(table)
    assert tformat.read_file(path).equals(table)


@pytest.mark.parametrize("version", ("2.1", "2.2"))
def test_packed_struct_nested_both_ways(tmp_path, version):
    pf = pa.field("item", ST, metadata=PACKED)
    inner = _struct(3 * 100, mask=pa.array(np.arange(300) % 7 == 0))
    lst = pa.ListArray.from_arrays(pa.array(np.arange(0, 301, 3, dtype=np.int32)), inner, type=pa.list_(pf))
    outer_t = pa.struct([pa.field("x", pa.int64()), pa.field("q", ST, metadata=PACKED)])
    outer = pa.StructArray.from_arrays([pa.array(np.arange(100)), inner.slice(0, 100)], fields=list(outer_t))
    table = pa.table({"l": lst, "s": outer})
    ours, theirs = tmp_path / "o.lance", tmp_path / "t.lance"
    tformat.write_file(ours, table, file_version=version)
    _pylance_write(theirs, table, version)
    assert _columns(ours) == _columns(theirs) == 3
    assert lance_file.LanceFileReader(str(ours)).read_all().to_table().equals(table)
    assert tformat.read_file(theirs).equals(table)


def test_variable_packed_struct_reads_as_written(tmp_path):
    """pylance 14's 2.2 packed struct with a variable-width field (a full-zip
    ``variable_packed_struct``, as its blob v2 descriptors are stored)."""
    st = pa.struct([pa.field("a", pa.int32()), pa.field("s", pa.string())])
    sch = pa.schema([pa.field("p", st, metadata=PACKED), pa.field("k", pa.int32())])
    n = 2000
    table = pa.table(
        [
            pa.StructArray.from_arrays(
                [pa.array(np.arange(n, dtype=np.int32)), pa.array([f"x{i}" for i in range(n)])], fields=list(st)
            ),
            pa.array(np.arange(n, dtype=np.int32)),
        ],
        schema=sch,
    )
    path = tmp_path / "v.lance"
    _pylance_write(path, table, "2.2")
    r = tformat.FileReader(path)  # the column count is right
    assert r.read(columns=["k"]).column(0).equals(table.column("k"))
    assert r.read().equals(table)
    assert r.take([1999, 0, 7]).equals(table.take([1999, 0, 7]))


@pytest.mark.parametrize("version", VERSIONS)
def test_packed_struct_writer_rejects_what_it_cannot_pack(tmp_path, version):
    bad_t = pa.struct([pa.field("a", pa.int32()), pa.field("s", pa.string())])
    sch = pa.schema([pa.field("p", bad_t, metadata=PACKED)])
    t = pa.table(
        [pa.StructArray.from_arrays([pa.array([1], pa.int32()), pa.array(["x"])], fields=list(bad_t))], schema=sch
    )
    with pytest.raises(tformat.UnsupportedTypeError):
        tformat.write_file(tmp_path / "a.lance", t, file_version=version)
    sch = pa.schema([pa.field("p", ST, metadata=PACKED)])
    child_null = pa.StructArray.from_arrays(
        [pa.array([1, None], pa.int32()), pa.array([1.0, 2.0]), pa.array([1, 2], pa.uint8())], fields=list(ST)
    )
    with pytest.raises(tformat.UnsupportedTypeError):
        tformat.write_file(tmp_path / "b.lance", pa.table([child_null], schema=sch), file_version=version)
