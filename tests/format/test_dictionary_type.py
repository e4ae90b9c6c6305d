"""Arrow dictionary (pandas Categorical) columns, both directions against pylance 14.

pylance stores a dictionary column as logical type ``dict:<value>:<index>:<ordered>``
(``encoding: DICTIONARY``, an empty ``dictionary {}``), its pages holding each
page's dictionary plus one index per row as wide as the index type: in 2.0 a
``Dictionary`` array encoding whose null rows point at a null item, in 2.1/2.2
a mini-block page with a dictionary block and the nulls in the definition levels.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera import format as tformat
from tessera.format.errors import UnsupportedTypeError
from tessera.format.file import schema as lschema
from tessera.format.file.container import ARRAY_ENCODING_URL, PAGE_LAYOUT_URL, ContainerReader, unpack_any
from tessera.format.file.io import open_reader
from tessera.format.protos import encodings21_pb2, encodings_pb2

VERSIONS = ("2.0", "2.1", "2.2")


def _dict(indices, items, index_type: pa.DataType | None = None, ordered=False) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices, index_type or pa.int32()), items, ordered=ordered)


def _cases() -> dict[str, pa.Table]:
    rng = np.random.default_rng(5)
    strings = pa.array(["a", "b", "c"])
    many = [f"value-{i:05d}" for i in range(5000)]
    nested_dict = _dict([0, 1, None, 0], pa.array(["x", "y"]))
    return {
        "nulls": pa.table({"c": pa.array(["a", "b", "a", None]).dictionary_encode()}),
        "int8": pa.table({"c": _dict([0, 1, 2, None, 1] * 60, strings, pa.int8())}),
        "int16": pa.table({"c": _dict([2, 0, None, 1], strings, pa.int16())}),
        "int32": pa.table({"c": _dict([1, None, 2, 2], strings, pa.int32())}),
        "int64": pa.table({"c": _dict([0, 1, None, 0], strings, pa.int64())}),
        "uint8": pa.table({"c": _dict([0, 1, 1, 0], strings, pa.uint8())}),
        "uint16": pa.table({"c": _dict([0, None, 1, 2], strings, pa.uint16())}),
        "empty_dictionary": pa.table({"c": _dict([None, None, None], pa.array([], pa.string()))}),
        "unused_and_repeated_items": pa.table({"c": _dict([0, 0, 3, None], pa.array(["z", "b", "a", "z"]))}),
        "many_distinct": pa.table({"c": _dict(rng.integers(0, 5000, 20_000).tolist(), pa.array(many))}),
        "int64_values": pa.table({"c": _dict([0, 1, None, 0], pa.array([10, -20], pa.int64()))}),
        "bool_values": pa.table({"c": _dict([0, 1, None, 0], pa.array([True, False]))}),
        "float_values": pa.table({"c": _dict([1, 0, None], pa.array([1.5, 2.5], pa.float32()))}),
        "binary_values": pa.table({"c": _dict([0, 1, None, 0], pa.array([b"x", b"\x00y"]), pa.uint16())}),
        "large_string_values": pa.table({"c": _dict([0, 1, None], pa.array(["x", "y"], pa.large_string()))}),
        "two_columns": pa.table(
            {"a": pa.array(["p", None, "q"]).dictionary_encode(), "n": pa.array([1, 2, None], pa.int64())}
        ),
        "in_struct": pa.table({"s": pa.StructArray.from_arrays([nested_dict, pa.array([1, 2, 3, 4])], ["d", "n"])}),
        "in_list": pa.table({"l": pa.ListArray.from_arrays(pa.array([0, 1, 3, 3, 4]), nested_dict)}),
    }


CASES = _cases()
PAIRS = [(name, v) for name in CASES for v in VERSIONS]
IDS = [f"{n}-{v}" for n, v in PAIRS]


def _pylance_write(lance, path, table: pa.Table, version: str, batch_rows: int | None = None, **kw) -> None:
    with lance.file.LanceFileWriter(str(path), table.schema, version=version, **kw) as w:
        for batch in table.to_batches(max_chunksize=batch_rows):
            w.write_batch(batch)


def _pylance_read(lance, path) -> pa.Table:
    return lance.file.LanceFileReader(str(path)).read_all().to_table()


def _dictionaries_without_nulls(table: pa.Table) -> pa.Table:
    """``table`` with every dictionary's null items dropped (null rows kept):
    what Tessera gives back where pylance 2.0 hands out its null items."""

    def fix(arr: pa.Array) -> pa.Array:
        t = arr.type
        if pa.types.is_dictionary(t):
            from tessera.format.file.dictionary import normalize_nulls

            return normalize_nulls(arr)
        if pa.types.is_struct(t):
            kids = [fix(arr.field(i)) for i in range(t.num_fields)]
            return pa.StructArray.from_arrays(kids, fields=list(t), mask=arr.is_null() if arr.null_count else None)
        if pa.types.is_list(t):
            return pa.ListArray.from_arrays(
                arr.offsets, fix(arr.values), mask=arr.is_null() if arr.null_count else None
            )
        return arr

    cols = [pa.chunked_array([fix(c) for c in col.chunks], col.type) for col in table.columns]
    return pa.Table.from_arrays(cols, schema=table.schema)


# -- schema ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "t,logical",
    [
        (pa.dictionary(pa.int8(), pa.string()), "dict:string:int8:false"),
        (pa.dictionary(pa.int16(), pa.string(), ordered=True), "dict:string:int16:true"),
        (pa.dictionary(pa.int32(), pa.large_string()), "dict:large_string:int32:false"),
        (pa.dictionary(pa.uint8(), pa.binary()), "dict:binary:uint8:false"),
        (pa.dictionary(pa.int64(), pa.large_binary()), "dict:large_binary:int64:false"),
        (pa.dictionary(pa.uint64(), pa.int64()), "dict:int64:uint64:false"),
        (pa.dictionary(pa.uint32(), pa.bool_()), "dict:bool:uint32:false"),
        (pa.dictionary(pa.uint16(), pa.float16()), "dict:halffloat:uint16:false"),
        (pa.dictionary(pa.int32(), pa.float64()), "dict:double:int32:false"),
    ],
)
def test_logical_type_both_ways(t, logical) -> None:
    assert lschema.logical_type_of(t) == logical
    assert lschema.arrow_type_of(logical) == t
    assert lschema.arrow_type_of(logical).ordered == t.ordered


@pytest.mark.parametrize(
    "logical",
    [
        "dict",
        "dict:string",
        "dict:string:int8",
        "dict:string:int8:false:x",
        "dict:string:int8:maybe",
        "dict:string:float:false",
        "dict:string:string:false",
        "dict:null:int32:false",
        "dict:date32:day:int32:false",  # pylance cannot read this back either
        "dict:timestamp:us:-:int32:false",
        "dict:struct:int32:false",
        "dict::int32:false",
    ],
)
def test_malformed_or_unsupported_dictionary_types_are_refused(logical) -> None:
    assert lschema.arrow_type_of("dict:string:int8:false") == pa.dictionary(pa.int8(), pa.string())
    with pytest.raises(UnsupportedTypeError):
        lschema.arrow_type_of(logical)


@pytest.mark.parametrize(
    "value_type",
    [pa.date32(), pa.timestamp("us"), pa.decimal128(5, 2), pa.binary(2), pa.null(), pa.list_(pa.int64())],
)
def test_values_pylance_cannot_store_are_refused(value_type) -> None:
    (ok,) = lschema.fields_from_arrow(pa.schema([pa.field("c", pa.dictionary(pa.int32(), pa.int64()))]))
    assert ok.logical_type == "dict:int64:int32:false" and ok.storage_type == pa.int64()
    schema = pa.schema([pa.field("c", pa.dictionary(pa.int32(), value_type))])
    with pytest.raises(UnsupportedTypeError):
        lschema.fields_from_arrow(schema)
    with pytest.raises(UnsupportedTypeError):
        tformat.FileWriter(pa.BufferOutputStream(), schema, file_version="2.1")


@pytest.mark.parametrize("version", VERSIONS)
def test_field_message_is_the_one_pylance_writes(lance, tmp_path, version) -> None:
    from tessera.format.table.manifest import read_manifest

    table = pa.table({"c": pa.array(["a", None]).dictionary_encode().cast(pa.dictionary(pa.int8(), pa.string()))})
    ds = tmp_path / "ds"
    lance.write_dataset(table, str(ds), data_storage_version=version)
    (manifest_path,) = (ds / "_versions").glob("*.manifest")
    (in_manifest,) = read_manifest(manifest_path.read_bytes()).manifest.fields
    (data_path,) = (ds / "data").glob("*.lance")
    (in_file,) = ContainerReader(open_reader(str(data_path))).descriptor.schema.fields
    assert in_manifest.logical_type == "dict:string:int8:false"
    assert in_manifest.encoding == lschema.file_pb2.DICTIONARY and in_manifest.HasField("dictionary")
    (ours,) = lschema.fields_to_protos(lschema.fields_from_arrow(table.schema))
    assert ours.SerializeToString() == in_manifest.SerializeToString() == in_file.SerializeToString()
    path = tmp_path / "t.lance"
    tformat.write_file(path, table, file_version=version)
    (written,) = ContainerReader(open_reader(str(path))).descriptor.schema.fields
    assert written.SerializeToString() == in_file.SerializeToString()


# -- pylance writes, Tessera reads ----------------------------------------------------


@pytest.mark.parametrize("name,version", PAIRS, ids=IDS)
def test_pylance_writes_tessera_reads(lance, tmp_path, name, version) -> None:
    table = CASES[name]
    path = tmp_path / "p.lance"
    _pylance_write(lance, path, table, version)
    theirs = _pylance_read(lance, path)
    got = tformat.read_file(path)
    assert got.schema.equals(table.schema)
    assert got.to_pylist() == table.to_pylist() == theirs.to_pylist()
    # the same arrays as pylance's, dictionaries included (pylance 2.0 hands out
    # its null items in the dictionary; Tessera keeps nulls in the indices)
    assert got.equals(_dictionaries_without_nulls(theirs) if version == "2.0" else theirs)


@pytest.mark.parametrize("name,version", PAIRS, ids=IDS)
def test_pylance_written_rows_read_by_range_take_and_batches(lance, tmp_path, name, version) -> None:
    table = CASES[name]
    path = tmp_path / "p.lance"
    _pylance_write(lance, path, table, version)
    n = table.num_rows
    rows = [0, n - 1, n // 2, 1, n // 2]  # any order, repeats
    with tformat.FileReader(path) as r:
        taken = r.take(rows)
        assert taken.schema.equals(table.schema)
        assert taken.to_pylist() == table.take(rows).to_pylist()
        part = r.read_range(1, n - 1)
        assert part.schema.equals(table.schema)
        assert part.to_pylist() == table.slice(1, n - 2).to_pylist()
        batches = list(r.iter_batches(batch_size=max(3, n // 7)))
        assert all(b.schema.equals(table.schema) for b in batches)
        assert pa.Table.from_batches(batches).to_pylist() == table.to_pylist()


def test_pylance_keeps_the_categories_a_page_does_not_use(lance, tmp_path) -> None:
    table = pa.table({"c": _dict([1, 1, None], pa.array(["z", "b", "a"]), pa.int8())})
    for version in VERSIONS:
        path = tmp_path / f"{version}.lance"
        _pylance_write(lance, path, table, version)
        col = tformat.read_file(path).column("c")
        assert col.type == pa.dictionary(pa.int8(), pa.string())
        assert col.chunk(0).dictionary.to_pylist() == ["z", "b", "a"]
        assert col.to_pylist() == ["b", "b", None]


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_multi_page_file(lance, tmp_path, version) -> None:
    rng = np.random.default_rng(2)
    n = 300_000
    table = pa.table(
        {
            "c": _dict(
                [None if i % 11 == 0 else int(x) for i, x in enumerate(rng.integers(0, 300, n))],
                pa.array([f"s{i}" for i in range(300)]),
                pa.int16(),
            )
        }
    )
    path = tmp_path / "p.lance"
    _pylance_write(lance, path, table, version, batch_rows=5000, max_page_bytes=16 * 1024)
    assert len(ContainerReader(open_reader(str(path))).column(0).pages) > 1
    with tformat.FileReader(path) as r:
        assert r.read().to_pylist() == table.to_pylist()
        rows = np.sort(rng.choice(n, 500, replace=False))
        assert r.take(rows).to_pylist() == table.take(rows).to_pylist()
        assert r.read_range(12_345, 145_678).to_pylist() == table.slice(12_345, 145_678 - 12_345).to_pylist()


# -- Tessera writes, pylance reads ----------------------------------------------------


@pytest.mark.parametrize("name,version", PAIRS, ids=IDS)
def test_tessera_writes_pylance_reads(lance, tmp_path, name, version) -> None:
    table = CASES[name]
    path = tmp_path / "t.lance"
    tformat.write_file(path, table, file_version=version)
    theirs = _pylance_read(lance, path)
    assert theirs.schema.equals(table.schema)
    assert theirs.to_pylist() == table.to_pylist()
    # and Tessera reads its own file back: the same arrays, dictionaries included
    assert tformat.read_file(path).equals(table)


@pytest.mark.parametrize("version", VERSIONS)
def test_tessera_writes_what_pylance_writes_on_disk(tmp_path, version) -> None:
    table = pa.table({"c": _dict([0, 1, None, 0], pa.array(["a", "b"]), pa.int16())})
    path = tmp_path / "t.lance"
    tformat.write_file(path, table, file_version=version)
    reader = ContainerReader(open_reader(str(path)))
    (page,) = reader.column(0).pages
    raw = page.encoding.direct.encoding
    if version == "2.0":
        enc = unpack_any(raw, ARRAY_ENCODING_URL, encodings_pb2.ArrayEncoding, None).dictionary
        assert enc.num_dictionary_items == 3  # "a", "b" and the null item the null row points at
        assert enc.indices.nullable.no_nulls.values.flat.bits_per_value == 16
        (indices, _, _) = reader.page_buffers([page])[0]
        assert np.frombuffer(indices, "<i2").tolist() == [0, 1, 2, 0]
    else:
        mb = unpack_any(raw, PAGE_LAYOUT_URL, encodings21_pb2.PageLayout, None).mini_block_layout
        assert mb.num_dictionary_items == 2 and mb.HasField("dictionary")
        assert list(mb.layers) == [encodings21_pb2.REPDEF_NULLABLE_ITEM]


@pytest.mark.parametrize("version", VERSIONS)
def test_null_items_become_null_rows(lance, tmp_path, version) -> None:
    table = pa.table({"c": _dict([0, 1, 2, None], pa.array(["x", None, "y"]))})
    path = tmp_path / "t.lance"
    tformat.write_file(path, table, file_version=version)
    assert _pylance_read(lance, path).column("c").to_pylist() == ["x", None, "y", None]
    got = tformat.read_file(path).column("c").chunk(0)
    assert got.to_pylist() == ["x", None, "y", None]
    assert got.dictionary.null_count == 0 and got.null_count == 2


@pytest.mark.parametrize("version", VERSIONS)
def test_ordered_flag(lance, tmp_path, version) -> None:
    t = pa.dictionary(pa.int8(), pa.string(), ordered=True)
    table = pa.table({"g": pa.array(["lo", "hi", None, "lo"]).dictionary_encode().cast(t)})
    path = tmp_path / "t.lance"
    tformat.write_file(path, table, file_version=version)
    got = tformat.read_file(path)
    assert got.schema.field("g").type.ordered and got.equals(table)
    (field,) = ContainerReader(open_reader(str(path))).descriptor.schema.fields
    assert field.logical_type == "dict:string:int8:true"
    # pylance reads the column (it has no ordered flag: always unordered)
    theirs = _pylance_read(lance, path).column("g")
    assert theirs.type == pa.dictionary(pa.int8(), pa.string()) and theirs.to_pylist() == ["lo", "hi", None, "lo"]
    # and writes ``false`` whatever the flag, which reads as unordered
    _pylance_write(lance, tmp_path / "p.lance", table, version)
    assert not tformat.read_file(tmp_path / "p.lance").schema.field("g").type.ordered


def _changing_dictionaries(index_type: pa.DataType, distinct: int = 300) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(9)
    batches = []
    for k in range(6):  # every batch its own dictionary of 100 items, overlapping the others
        items = pa.array([f"v{(k * 40 + i) % distinct}" for i in range(100)])
        idx = [None if i % 13 == 0 else int(x) for i, x in enumerate(rng.integers(0, 100, 7000))]
        batches.append(pa.record_batch({"c": _dict(idx, items, index_type)}))
    return batches


@pytest.mark.parametrize("version", VERSIONS)
def test_multi_page_writes_with_changing_dictionaries(lance, tmp_path, version) -> None:
    batches = _changing_dictionaries(pa.int32())
    table = pa.Table.from_batches(batches)
    path = tmp_path / "t.lance"
    with tformat.FileWriter(path, table.schema, file_version=version, page_size=8 * 1024) as w:
        for b in batches:
            w.write_batch(b)
    assert len(ContainerReader(open_reader(str(path))).column(0).pages) > 2
    expected = table.to_pylist()
    assert _pylance_read(lance, path).to_pylist() == expected
    with tformat.FileReader(path) as r:
        got = r.read()
        assert got.schema.field("c").type == pa.dictionary(pa.int32(), pa.string()) and got.to_pylist() == expected
        rows = np.sort(np.random.default_rng(1).choice(table.num_rows, 300, replace=False))
        assert r.take(rows).to_pylist() == table.take(rows).to_pylist()


@pytest.mark.parametrize("index_type", [pa.int8(), pa.uint8(), pa.int16()])
@pytest.mark.parametrize("version", VERSIONS)
def test_small_indices_take_one_page_a_file(lance, tmp_path, version, index_type) -> None:
    # pylance joins the pages of a read by concatenating their dictionaries, and
    # fails when their summed length outgrows the index type: one page it is
    batches = _changing_dictionaries(index_type, distinct=120)
    table = pa.Table.from_batches(batches)
    path = tmp_path / "t.lance"
    with tformat.FileWriter(path, table.schema, file_version=version, page_size=1024) as w:
        for b in batches:
            w.write_batch(b)
    assert len(ContainerReader(open_reader(str(path))).column(0).pages) == 1
    assert _pylance_read(lance, path).to_pylist() == table.to_pylist()
    assert tformat.read_file(path).to_pylist() == table.to_pylist()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_dictionary_is_stored_once_a_page_not_once_a_batch(tmp_path, version) -> None:
    items = pa.array([f"category-{i:06d}" for i in range(20_000)])  # about 300 KiB of items
    arr = _dict(np.arange(100_000) % 20_000, items, pa.int32())
    path = tmp_path / "t.lance"
    with tformat.FileWriter(path, pa.schema([pa.field("c", arr.type)]), file_version=version) as w:
        for start in range(0, len(arr), 1000):  # slices sharing the dictionary
            w.write_batch(pa.record_batch({"c": arr.slice(start, 1000)}))
    assert len(ContainerReader(open_reader(str(path))).column(0).pages) == 1
    assert tformat.read_file(path).column("c").to_pylist() == arr.to_pylist()


def test_more_distinct_values_than_the_index_type_addresses_are_refused(tmp_path) -> None:
    t = pa.dictionary(pa.int8(), pa.string())
    batches = [
        pa.record_batch({"c": _dict(list(range(100)), pa.array([f"{k}-{i}" for i in range(100)]), pa.int8())})
        for k in range(2)
    ]
    for version in VERSIONS:
        tformat.write_file(tmp_path / f"one-{version}.lance", pa.Table.from_batches(batches[:1]), file_version=version)
        assert tformat.read_file(tmp_path / f"one-{version}.lance").equals(pa.Table.from_batches(batches[:1]))
        with pytest.raises(UnsupportedTypeError, match="200 distinct values"):
            with tformat.FileWriter(
                tmp_path / f"{version}.lance", pa.schema([pa.field("c", t)]), file_version=version
            ) as w:
                for b in batches:
                    w.write_batch(b)


def test_file_format_2_0_needs_an_index_for_the_null_item(lance, tmp_path) -> None:
    full = pa.table({"c": _dict(list(range(128)) + [None], pa.array([f"s{i}" for i in range(128)]), pa.int8())})
    # pylance refuses it too ("dictionary indices use 32 bits but the declared Int8 key type uses 8 bits")
    with pytest.raises((OSError, ValueError), match="Int8"):
        _pylance_write(lance, tmp_path / "p.lance", full, "2.0")
    with pytest.raises(UnsupportedTypeError, match="2.1"):
        tformat.write_file(tmp_path / "t.lance", full, file_version="2.0")
    for version in ("2.1", "2.2"):
        tformat.write_file(tmp_path / f"{version}.lance", full, file_version=version)
        assert _pylance_read(lance, tmp_path / f"{version}.lance").to_pylist() == full.to_pylist()
        assert tformat.read_file(tmp_path / f"{version}.lance").equals(full)


def test_pandas_categorical_through_a_file(lance, tmp_path) -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(
        {
            "c": pd.Categorical(["b", "a", None, "b"], categories=["z", "b", "a"]),
            "n": pd.Categorical([3, 1, 2, 3]),
        }
    )
    table = pa.Table.from_pandas(df, preserve_index=False)
    for version in VERSIONS:
        path = tmp_path / f"{version}.lance"
        tformat.write_file(path, table, file_version=version)
        out = tformat.read_file(path).to_pandas()
        assert list(out["c"].cat.categories) == ["z", "b", "a"]
        assert out["c"].astype(object).tolist()[:2] == ["b", "a"]
        assert _pylance_read(lance, path).to_pylist() == table.to_pylist()
