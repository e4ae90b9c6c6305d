"""Nested rep/def shapes written by Tessera (2.1/2.2), read back by Tessera and pylance 14.

Regressions found by fuzzing the writer against pylance: nulls at every
nesting level, empty lists, single rows, sliced input, non-nullable fields
below nullable parents, multi-page columns.  A small seeded fuzz at the end
keeps covering the space.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from tessera import format as tformat
from tessera.format.file.container import PAGE_LAYOUT_URL, ContainerReader, unpack_any
from tessera.format.file.io import open_reader
from tessera.format.protos import encodings21_pb2 as pb

lance_file = pytest.importorskip("lance.file")

VERSIONS = ("2.1", "2.2")


def _both_read(path, table: pa.Table) -> None:
    got = tformat.read_file(path)
    assert got.equals(table), (table.to_pylist(), got.to_pylist())
    theirs = lance_file.LanceFileReader(str(path)).read_all().to_table()
    assert theirs.equals(table), (table.to_pylist(), theirs.to_pylist())


def _write(path, table: pa.Table, version: str, page_size: int = 1 << 20, chunk: int | None = None) -> None:
    with tformat.FileWriter(path, table.schema, file_version=version, page_size=page_size) as w:
        for b in table.to_batches(max_chunksize=chunk) if chunk else table.to_batches():
            w.write_batch(b)


def _layers(path, column: int) -> list[list[int]]:
    r = ContainerReader(open_reader(str(path)))
    out = []
    for p in r.column(column).pages:
        pl = unpack_any(p.encoding.direct.encoding, PAGE_LAYOUT_URL, pb.PageLayout)
        out.append(list(getattr(pl, pl.WhichOneof("layout")).layers))
    return out


LL8 = pa.list_(pa.list_(pa.int8()))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "rows",
    [
        [None],  # an outer null list: the inner list array is empty (was IndexError)
        [[None]],
        [[]],
        [None, None],
        [[None], None, [[]], [], [[None]]],
        [None, [[1, None], None, []], None],
    ],
    ids=repr,
)
def test_list_of_list_null_shapes(tmp_path, version, rows):
    table = pa.table({"c": pa.array(rows, LL8)})
    path = tmp_path / "t.lance"
    _write(path, table, version)
    _both_read(path, table)


@pytest.mark.parametrize("version", VERSIONS)
def test_sliced_input_with_outer_nulls(tmp_path, version):
    full = pa.array([[[1]], None, None, [[2, None], None], None, [[]]], LL8)
    for a in range(len(full)):
        for b in range(a + 1, len(full) + 1):
            table = pa.table({"c": full.slice(a, b - a)})
            path = tmp_path / f"s{a}{b}.lance"
            _write(path, table, version, chunk=1)
            _both_read(path, table)


@pytest.mark.parametrize("version", VERSIONS)
def test_all_valid_list_below_nullable_struct(tmp_path, version):
    # pylance mis-numbers levels above an ALL_VALID_LIST: the inner list must
    # claim a level (an unused empty-list one) instead
    t = pa.list_(pa.struct([("f0", pa.list_(pa.int8()))]))
    table = pa.table({"c": pa.array([[None, None], None, [{"f0": [1]}, None]], t)})
    path = tmp_path / "t.lance"
    _write(path, table, version)
    _both_read(path, table)
    (layers,) = _layers(path, 0)
    assert layers[1] != pb.REPDEF_ALL_VALID_LIST


@pytest.mark.parametrize("version", VERSIONS)
def test_struct_above_list_is_nullable_on_every_page(tmp_path, version):
    # pages disagreeing on a struct layer above a list (nullable here, all
    # valid there) made pylance build a struct validity of the wrong length
    t = pa.struct([("f0", pa.struct([("f0", pa.list_(pa.string())), ("f1", pa.large_list(pa.bool_()))]))])
    rows = [None, {"f0": {"f0": ["xxxx", ""], "f1": [True]}}, {"f0": {"f0": ["x"], "f1": [False]}}]
    rows += [{"f0": {"f0": ["y", None, None], "f1": [True]}}, {"f0": None}, {"f0": None}] * 3
    table = pa.table({"c": pa.array(rows, t)})
    path = tmp_path / "t.lance"
    _write(path, table, version, page_size=64, chunk=2)
    assert len(_layers(path, 0)) > 1  # really several pages
    _both_read(path, table)
    for layers in _layers(path, 0) + _layers(path, 1):
        assert layers[2] == pb.REPDEF_NULLABLE_ITEM and layers[3] == pb.REPDEF_NULLABLE_ITEM


@pytest.mark.parametrize("version", VERSIONS)
def test_non_nullable_leaf_masked_by_null_parent(tmp_path, version):
    # every visible slot of the leaf is masked by a null parent: pylance reads
    # an all-null (or constant) page as null leaf values, which a non-nullable
    # field must not hold
    inner = pa.struct([pa.field("f0", pa.float32()), pa.field("f1", pa.int8(), False)])
    t = pa.list_(pa.struct([pa.field("f0", inner)]))
    for rows in ([[None]], [[None], [{"f0": None}]], [[{"f0": None}], None]):
        table = pa.table({"c": pa.array(rows, t)})
        path = tmp_path / "t.lance"
        _write(path, table, version)
        _both_read(path, table)
    t2 = pa.struct(
        [
            pa.field("a", pa.list_(pa.int64())),
            pa.field("b", pa.struct([pa.field("x", pa.bool_()), pa.field("y", pa.int64(), False)])),
        ]
    )
    table = pa.table({"c": pa.array([None, None], t2)})
    _write(tmp_path / "u.lance", table, version)
    _both_read(tmp_path / "u.lance", table)


@pytest.mark.parametrize("version", VERSIONS)
def test_non_nullable_list_below_null_struct(tmp_path, version):
    # the list's reserved level must not turn masked slots into null lists
    inner = pa.struct(
        [
            pa.field("f0", pa.list_(pa.bool_(), 2)),
            pa.field("f1", pa.list_(pa.field("item", pa.float32(), False)), False),
        ]
    )
    t = pa.struct([pa.field("f0", inner)])
    table = pa.table({"c": pa.array([None, {"f0": {"f0": [True, None], "f1": [0.5, 0.25]}}], t)})
    for page in (64, 1 << 20):
        path = tmp_path / f"t{page}.lance"
        _write(path, table, version, page_size=page)
        _both_read(path, table)


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_fsl_with_all_null_items(tmp_path, version):
    # pylance writes a value-less constant as the item encoding
    for dim, n in ((2, 5), (300, 3)):
        t = pa.list_(pa.field("item", pa.int32(), True), dim)
        table = pa.table({"c": pa.FixedSizeListArray.from_arrays(pa.array([None] * (n * dim), pa.int32()), type=t)})
        path = tmp_path / f"p{dim}.lance"
        with lance_file.LanceFileWriter(str(path), table.schema, version=version) as w:
            w.write_batch(table)
        assert tformat.read_file(path).equals(table)


# ------------------------------------------------------------------ seeded fuzz


def _rand_type(r: random.Random, depth: int = 0) -> pa.DataType:
    kinds = ["leaf", "list", "list", "struct", "large_list"] if depth < 3 else ["leaf"]
    k = r.choice(kinds)
    if k == "leaf":
        return r.choice([pa.int8(), pa.int64(), pa.string(), pa.float64(), pa.bool_()])
    if k == "list":
        return pa.list_(_rand_type(r, depth + 1))
    if k == "large_list":
        return pa.large_list(_rand_type(r, depth + 1))
    fields = []
    for i in range(r.randint(1, 2)):
        ft = _rand_type(r, depth + 1)
        fields.append(pa.field(f"f{i}", ft, r.random() < 0.8 or pa.types.is_struct(ft)))
    return pa.struct(fields)


def _rand_val(r: random.Random, t: pa.DataType, pnull: float, pempty: float, nullable: bool = True):
    if nullable and r.random() < pnull:
        return None
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if r.random() < pempty:
            return []
        return [_rand_val(r, t.value_type, pnull, pempty) for _ in range(r.randint(1, 3))]
    if pa.types.is_struct(t):
        return {f.name: _rand_val(r, f.type, pnull, pempty, f.nullable) for f in t}
    if t == pa.int8():
        return r.randint(-128, 127)
    if t == pa.int64():
        return r.randint(-(2**63), 2**63 - 1)
    if t == pa.float64():
        return r.random()
    if t == pa.bool_():
        return r.random() < 0.5
    return "x" * r.randint(0, 5)


@pytest.mark.parametrize("seed", range(60))
def test_nested_fuzz_against_pylance(tmp_path, seed):
    r = random.Random(seed)
    t = _rand_type(r)
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) and r.random() < 0.5:
        t = pa.list_(t)
    n = r.choice([1, 1, 2, 3, 5, 20, 120])
    pnull, pempty = r.choice([0, 0.1, 0.5, 0.9, 1.0]), r.choice([0, 0.3, 1.0])
    arr = pa.array([_rand_val(r, t, pnull, pempty) for _ in range(n)], t)
    table = pa.table({"c": arr, "k": pa.array(np.arange(n, dtype=np.int32))})
    if n > 1 and r.random() < 0.5:
        a = r.randint(0, n - 1)
        table = table.slice(a, r.randint(a + 1, n) - a)
    version = r.choice(VERSIONS)
    path = tmp_path / "f.lance"
    _write(path, table, version, page_size=r.choice([64, 256, 4096, 1 << 20]), chunk=r.randint(1, 64))
    _both_read(path, table.combine_chunks())
    idx = np.unique(np.asarray(r.sample(range(table.num_rows), min(4, table.num_rows))))
    assert tformat.FileReader(path).take(idx).equals(table.combine_chunks().take(idx))
