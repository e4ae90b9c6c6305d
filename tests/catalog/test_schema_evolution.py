"""Schema evolution against pylance 14: ``alter_columns`` (rename, nullability,
type widening at any depth), nested drops and adds, schema merge on append.

Every change is read back by pylance (schema and values), every version
before it keeps its schema and values, a refused change writes nothing, and
Tessera reads what pylance's own schema evolution wrote.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.errors import (
    IncompatibleTransactionError,
    InvalidArgumentError,
    InvalidColumnNameError,
    SchemaMismatchError,
    TypeChangeError,
    UnknownColumnError,
)


def _rows(null_struct: object = None) -> pa.Table:
    """Four rows; the third's struct is null (file format 2.0 has no struct validity: there a struct of nulls)."""
    return pa.table(
        {
            "a": pa.array([1, 2, None, 4], pa.int8()),
            "f": pa.array([1.5, None, 3.0, 4.5], pa.float32()),
            "s": ["w", "x", None, "z"],
            "st": pa.array([{"b": 1, "c": "q"}, {"b": 2, "c": None}, null_struct, {"b": None, "c": "t"}]),
        }
    )


def _files(path: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs}


def _same(lance, path: str, table: Table, version: int | None = None) -> pa.Table:
    """pylance and Tessera read the same schema and rows at ``version`` (the latest: None)."""
    ds = lance.dataset(path, version=version)
    t = table if version is None else Table.open(path, version=version)
    assert ds.version == t.version
    want, got = ds.to_table(), t.to_arrow()
    assert got.schema.equals(want.schema), (got.schema, want.schema)
    assert got.equals(want), (got.to_pylist(), want.to_pylist())
    if want.num_rows:
        rows = sorted({0, want.num_rows - 1})
        assert t.take(rows).equals(ds.take(rows))
    return got


def _history_kept(lance, path: str, table: Table, olds: dict[int, pa.Table]) -> None:
    for v, rows in olds.items():
        assert _same(lance, path, table, v).equals(rows)


@pytest.fixture(params=["2.0", "2.1", "2.2"])
def table(request, tmp_path):
    null = {"b": None, "c": None} if request.param == "2.0" else None
    t = Table.create(str(tmp_path / "t"), _rows(null), file_version=request.param)
    t.delete("a = 2")  # deleted rows are rewritten too (their cast values never read)
    return t


def test_widening_rewrites_the_column_as_pylance_does(lance, table):
    path, before = table.uri, table.version
    olds = {before: table.to_arrow()}
    table.alter_columns(
        {"path": "a", "data_type": pa.int32()},
        {"path": "f", "data_type": pa.float64()},
        {"path": "s", "data_type": pa.large_string()},
        {"path": "st.b", "data_type": pa.int64(), "name": "bb"},
    )
    got = _same(lance, path, table)
    assert got.schema.field("a").type == pa.int32() and got.schema.field("s").type == pa.large_string()
    assert got.column("st").type == pa.struct([("bb", pa.int64()), ("c", pa.string())])
    assert got.column("a").to_pylist() == [1, None, 4]
    assert got.column("st").to_pylist()[::2] == [{"bb": 1, "c": "q"}, {"bb": None, "c": "t"}]
    ds = lance.dataset(path)
    assert type(ds.read_transaction(ds.version).operation).__name__ == "Merge"  # pylance's operation
    files = ds.get_fragments()[0].metadata.files
    assert len(files) == 2  # the old file keeps the unchanged columns, a new one holds the cast ones
    ids = {f.name(): f.id() for f in ds.lance_schema.fields()}  # the cast columns got new field ids
    assert ids["a"] > 4 and ids["f"] > 4 and ids["s"] > 4
    _history_kept(lance, path, table, olds)
    # further steps chain: int32 -> int64, then a pylance append reads back in Tessera
    table.alter_columns({"path": "a", "data_type": pa.int64()})
    lance.write_dataset(
        pa.table({"a": pa.array([9], pa.int64()), "f": [9.0], "s": pa.array(["n"], pa.large_string())}),
        path,
        mode="append",
    )
    _same(lance, path, table.refresh())


def test_rename_and_nullability_are_metadata_only(lance, table):
    path = table.uri
    olds = {table.version: table.to_arrow()}
    files = _files(path + "/data")
    table.alter_columns({"path": "st.c", "name": "cc"}, {"path": "s", "name": "s2"}, {"path": "st", "nullable": True})
    table.rename_column("f", "g")
    ds = lance.dataset(path)
    assert type(ds.read_transaction(ds.version).operation).__name__ == "Project"
    assert _files(path + "/data") == files
    got = _same(lance, path, table)
    assert got.column_names == ["a", "g", "s2", "st"] and got.column("st").type.field(1).name == "cc"
    table.alter_columns({"path": "g", "nullable": False})  # its only null is in a deleted row
    table.alter_columns({"path": "g", "nullable": True}, {"path": "st.cc", "nullable": True})
    assert _same(lance, path, table).schema.field("g").nullable
    _history_kept(lance, path, table, olds)


def test_refused_changes_write_nothing(lance, table):
    path, before, files = table.uri, table.version, _files(table.uri)
    refused = [
        (TypeChangeError, {"path": "a", "data_type": pa.uint8()}),  # narrowing (pylance accepts, checked by row)
        (TypeChangeError, {"path": "f", "data_type": pa.float16()}),  # lossy (pylance accepts)
        (TypeChangeError, {"path": "a", "data_type": pa.float64()}),  # another kind (pylance refuses)
        (TypeChangeError, {"path": "s", "data_type": pa.binary()}),
        (TypeChangeError, {"path": "st", "data_type": pa.struct([("b", pa.int32()), ("c", pa.string())])}),
        (InvalidArgumentError, {"path": "s", "nullable": False}),  # it holds a null
        (InvalidArgumentError, {"path": "a", "data_type": pa.int64(), "nullable": False}),
        (InvalidArgumentError, {"path": "a", "name": "s"}),  # taken
        (InvalidColumnNameError, {"path": "a", "name": "x.y"}),  # pylance refuses a dot at the top level
        (InvalidArgumentError, {"path": "a", "nme": "q"}),
        (UnknownColumnError, {"path": "st.zz", "name": "q"}),
    ]
    for error, alt in refused:
        with pytest.raises(error):
            table.alter_columns(alt)
    with pytest.raises(InvalidArgumentError):
        table.add_columns(pa.field("n", pa.int32(), nullable=False))
    with pytest.raises(InvalidArgumentError):
        table.add_columns(pa.field("a", pa.int32()))
    with pytest.raises(UnknownColumnError):
        table.drop_columns(["st.zz"])
    assert Table.open(path).version == before and lance.dataset(path).version == before
    assert _files(path) == files


def test_nested_drop_and_add(lance, table):
    path = table.uri
    olds = {table.version: table.to_arrow()}
    table.drop_columns(["st.c"])
    assert _same(lance, path, table).column("st").type == pa.struct([("b", pa.int64())])
    table.add_columns(pa.field("st", pa.struct([("d", pa.string())])))  # an all-null child, as pylance adds it
    table.add_columns([pa.field("n", pa.int32())])
    ds = lance.dataset(path)
    assert type(ds.read_transaction(ds.version).operation).__name__ == "Merge"
    got = _same(lance, path, table)
    assert got.column("st").to_pylist()[::2] == [{"b": 1, "d": None}, {"b": None, "d": None}]
    assert got.column("n").null_count == 3
    olds[table.version] = got
    table.drop_columns(["st.b", "st.d"])  # a struct left without children goes, as pylance drops it
    assert _same(lance, path, table).column_names == ["a", "f", "s", "n"]
    _history_kept(lance, path, table, olds)


def test_append_merges_new_columns(lance, table):
    path = table.uri
    olds = {table.version: table.to_arrow()}
    new = pa.table(
        {
            "a": pa.array([7], pa.int8()),
            "st": pa.array([{"b": 5, "e": [1.0]}]),
            "n": pa.array([3], pa.int32()),
        }
    )
    with pytest.raises(SchemaMismatchError):  # without schema_mode, as before
        table.append(new)
    with pytest.raises(InvalidArgumentError):
        table.append(new, schema_mode="overwrite")  # type: ignore[arg-type]
    assert table.version == min(olds)
    table.append(new, schema_mode="merge")
    got = _same(lance, path, table)
    assert got.column_names == ["a", "f", "s", "st", "n"]
    assert got.column("st").type == pa.struct([("b", pa.int64()), ("c", pa.string()), ("e", pa.list_(pa.float64()))])
    assert got.column("n").to_pylist() == [None, None, None, 3]
    assert got.column("st").to_pylist()[-1] == {"b": 5, "c": None, "e": [1.0]}
    assert got.column("f").to_pylist()[-1] is None  # missing in the data: null
    ds = lance.dataset(path)
    ops = [type(ds.read_transaction(v).operation).__name__ for v in (ds.version - 1, ds.version)]
    assert ops == ["Merge", "Append"]  # the new columns (metadata only), then the rows
    # the same columns again: a plain append; a type conflict is refused naming the column
    table.append(pa.table({"n": pa.array([4], pa.int32()), "st": pa.array([{"b": 9}])}), schema_mode="merge")
    before, files = table.version, _files(path)
    with pytest.raises(SchemaMismatchError, match="'n'"):
        table.append(pa.table({"n": pa.array(["x"]), "z": [1]}), schema_mode="merge")
    assert table.version == before and Table.open(path).version == before and _files(path) == files
    _same(lance, path, table)
    _history_kept(lance, path, table, olds)


def test_reads_what_pylance_evolved(lance, tmp_path):
    path = str(tmp_path / "p")
    ds = lance.write_dataset(_rows(), path, max_rows_per_file=2)
    steps = [
        lambda d: d.alter_columns({"path": "st.b", "name": "bb"}),
        lambda d: d.alter_columns({"path": "st.bb", "data_type": pa.int32()}),  # a struct split over two files
        lambda d: d.alter_columns({"path": "a", "data_type": pa.int64()}),
        lambda d: d.drop_columns(["st.c"]),
        lambda d: d.add_columns(pa.field("st", pa.struct([("d", pa.string())]))),
        lambda d: d.add_columns(pa.field("n", pa.int32())),
    ]
    for step in steps:
        step(ds)
        ds = lance.dataset(path)
    for v in range(1, ds.version + 1):
        _same(lance, path, Table.open(path, version=v), v)
    t = Table.open(path)
    t.append(pa.table({"a": [5], "st": pa.array([{"bb": 6, "d": "e"}], t.schema.field("st").type)}))
    t.alter_columns({"path": "st.bb", "data_type": pa.int64()})
    _same(lance, path, t)


def test_an_append_racing_a_type_change(lance, tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, _rows())
    # the type change first: the append, written in the old type, is refused
    # (pylance commits it and its rows then read null in the changed column)
    slow = Table.open(path)
    Table.open(path).alter_columns({"path": "a", "data_type": pa.int32()})
    with pytest.raises(IncompatibleTransactionError, match="alter_columns"):
        slow.append(_rows().slice(0, 1))
    # the append first: the type change is re-run on the latest version (pylance: retryable)
    rows = _rows().set_column(0, "a", pa.array([1, 2, None, 4], pa.int32()))
    slow = Table.open(path)
    Table.open(path).append(rows.slice(0, 2))
    slow.alter_columns({"path": "a", "data_type": pa.int64()})
    got = _same(lance, path, slow)
    assert got.num_rows == 6 and got.column("a").to_pylist()[-2:] == [1, 2]
    # a rename racing an append: compatible both ways (field ids are kept)
    slow = Table.open(path)
    Table.open(path).alter_columns({"path": "s", "name": "s2"})
    slow.append(rows.set_column(0, "a", pa.array([1, 2, None, 4], pa.int64())).slice(0, 1))
    assert _same(lance, path, slow.refresh()).column("s2").to_pylist()[-1] == "w"


def test_indexed_columns(lance, tmp_path):
    """pylance refuses a type change of an indexed column; Tessera rebuilds its
    own zone maps after the change and refuses any other index, as pylance."""
    path = str(tmp_path / "t")
    t = Table.create(
        path,
        pa.table({"a": pa.array(range(40), pa.int32()), "b": pa.array(range(40), pa.int32())}),
        max_rows_per_file=10,
    )
    t.create_index("a", "zonemap")
    t.alter_columns({"path": "a", "data_type": pa.int64()})
    (idx,) = t.list_indices()
    assert (idx["name"], idx["columns"], idx["fragments"]) == ("a_idx", ["a"], [0, 1, 2, 3])
    assert [(i.name, i.field_names, i.num_rows_indexed) for i in lance.dataset(path).describe_indices()] == [
        ("a_idx", ["a"], 40)
    ]
    assert t.to_arrow(filter="a >= 38").equals(lance.dataset(path).to_table(filter="a >= 38"))
    lance.dataset(path).create_scalar_index("b", "BTREE")
    before, files = Table.open(path).version, _files(path)
    with pytest.raises(TypeChangeError, match="b_idx"):  # a widening, refused for the index
        Table.open(path).alter_columns({"path": "b", "name": "bb", "data_type": pa.int64()})
    assert Table.open(path).version == before and _files(path) == files


def test_a_merging_append_racing_other_writers(lance, tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, pa.table({"k": [1, 2]}))
    slow = Table.open(path)
    Table.open(path).append(pa.table({"k": [3]}))
    slow.append(pa.table({"k": [4], "n": ["x"]}), schema_mode="merge")  # its Merge re-run over the append
    got = _same(lance, path, slow)
    assert got.column("n").to_pylist() == [None, None, None, "x"]
    slow = Table.open(path)
    Table.open(path).add_columns(pa.field("m", pa.int32()))  # another schema change first
    before = Table.open(path).version
    with pytest.raises(IncompatibleTransactionError, match="schema changed"):
        slow.append(pa.table({"k": [5], "z": [1.0]}), schema_mode="merge")
    assert Table.open(path).version == before
