"""The 2.1/2.2 writer (format/file/v21/write/encoder.py), checked against pylance 14 as the reader."""

from __future__ import annotations

import datetime
import datetime as dt
import decimal
import os

import numpy as np
import pyarrow as pa
import pytest
import tessera_test_matrix as matrix

from tessera import format
from tessera.format.file.container import PAGE_LAYOUT_URL, ContainerReader, unpack_any
from tessera.format.file.io import open_reader
from tessera.format.protos import encodings21_pb2 as pb

lance_file = pytest.importorskip("lance.file")

VERSIONS = ("2.1", "2.2")
CELLS = matrix.cells()


def _read(path) -> pa.Table:
    return lance_file.LanceFileReader(str(path)).read_all().to_table()


def _layouts(path) -> list[list[pb.PageLayout]]:
    """Per column, the PageLayout of each page."""
    r = ContainerReader(open_reader(str(path)))
    out = []
    for c in range(r.num_columns):
        out.append([unpack_any(p.encoding.direct.encoding, PAGE_LAYOUT_URL, pb.PageLayout) for p in r.column(c).pages])
    return out


def _roundtrip(tmp_path, table: pa.Table, version: str, page_size: int | None = None, name: str = "t"):
    path = tmp_path / f"{name}_{version}.lance"
    if page_size is None:
        format.write_file(path, table, file_version=version)
    else:
        with format.FileWriter(path, table.schema, file_version=version, page_size=page_size) as w:
            w.write(table)
    out = _read(path)
    assert out.num_rows == table.num_rows
    for col in table.column_names:
        assert out[col].equals(table[col]), f"column {col!r} differs ({version})"
    return path


@pytest.mark.parametrize(
    "name,version",
    [(n, v) for n, (_, vs) in CELLS.items() for v in VERSIONS if v in vs],
)
def test_matrix_cell(tmp_path, name, version):
    table, _ = CELLS[name]
    _roundtrip(tmp_path, table, version, name=name)


@pytest.mark.parametrize("version", VERSIONS)
def test_multi_page(tmp_path, version):
    table = matrix.multi_page_table()
    path = _roundtrip(tmp_path, table, version, page_size=64 * 1024)
    layouts = _layouts(path)
    assert all(len(pages) >= 3 for pages in layouts), [len(p) for p in layouts]
    r = lance_file.LanceFileReader(str(path))
    idx = [0, 1, 4, 5, 77_777, 123_456, 199_999]
    assert r.take_rows(idx).to_table().equals(table.take(idx))
    assert r.read_range(65_000, 70_000).to_table().equals(table.slice(65_000, 70_000))


def _nested_table(n: int = 20_000, seed: int = 0) -> pa.Table:
    """Lists, nulls at every level, structs in lists and lists in structs."""
    rng = np.random.default_rng(seed)

    def lst(m, inner, p_null=0.1, p_empty=0.1, maxlen=6):
        lens = rng.integers(0, maxlen, m)
        lens[rng.random(m) < p_empty] = 0
        offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        mask = rng.random(m) < p_null
        return pa.ListArray.from_arrays(pa.array(offs), inner(int(offs[-1])), mask=pa.array(mask))

    def ints(m):
        return pa.array(rng.integers(-1000, 1000, m), mask=rng.random(m) < 0.1)

    def strs(m):
        return pa.array(
            [("x" * int(k)) + str(i) for i, k in enumerate(rng.integers(0, 30, m))], mask=rng.random(m) < 0.1
        )

    def struct(m):
        return pa.StructArray.from_arrays(
            [ints(m), strs(m), lst(m, ints)], names=["a", "b", "c"], mask=pa.array(rng.random(m) < 0.1)
        )

    return pa.table(
        {
            "li": lst(n, ints),
            "ls": lst(n, strs),
            "lli": lst(n, lambda m: lst(m, ints), maxlen=4),
            "st": struct(n),
            "lst": lst(n, struct, maxlen=4),
            "sparse": lst(n, lambda m: pa.array(rng.integers(0, 5, m), pa.int8()), maxlen=200, p_empty=0.5),
            "lb": lst(n, lambda m: pa.array(rng.random(m) < 0.5, mask=rng.random(m) < 0.2)),
            "fsl": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(n * 3).astype("float32"), mask=rng.random(n * 3) < 0.1),
                3,
                mask=pa.array(rng.random(n) < 0.1),
            ),
            "lfsl": lst(
                n, lambda m: pa.FixedSizeListArray.from_arrays(pa.array(rng.random(m * 96).astype("float32")), 96)
            ),
            "longs": pa.array(["y" * int(k) for k in rng.integers(0, 2000, n)], mask=rng.random(n) < 0.1),
            "llongs": lst(
                n,
                lambda m: pa.array(
                    ["z" * int(k) for k in rng.integers(200, 600, m)], pa.large_string(), mask=rng.random(m) < 0.1
                ),
                maxlen=3,
            ),
            "b": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.3),
        }
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("page_size", [8 * 1024 * 1024, 32 * 1024])
def test_nested_sliced_batches(tmp_path, version, page_size):
    table = _nested_table()
    # sliced, multi-batch input: offsets into shared buffers everywhere
    table = pa.concat_tables([table.slice(7, 9000), table.slice(9100, 5000), table.slice(15_000)])
    path = tmp_path / f"nested_{version}.lance"
    with format.FileWriter(path, table.schema, file_version=version, page_size=page_size) as w:
        for b in table.to_batches(max_chunksize=3000):
            w.write_batch(b)
    r = lance_file.LanceFileReader(str(path))
    assert r.read_all().to_table().equals(table)
    rng = np.random.default_rng(1)
    idx = np.sort(rng.choice(table.num_rows, 700, replace=False)).tolist()
    assert r.take_rows(idx).to_table().equals(table.take(idx))
    assert r.read_range(1234, 5000).to_table().equals(table.slice(1234, 5000))
    kinds = {pages[0].WhichOneof("layout") for pages in _layouts(path)}
    assert {"mini_block_layout", "full_zip_layout"} <= kinds


@pytest.mark.parametrize("version", VERSIONS)
def test_take_and_range_list_and_nullable(tmp_path, version):
    n = 50_000
    rng = np.random.default_rng(5)
    lists = [list(range(i % 7)) if i % 9 else None for i in range(n)]
    table = pa.table(
        {
            "l": pa.array(lists, pa.list_(pa.int32())),
            "n": pa.array(rng.standard_normal(n), mask=rng.random(n) < 0.3),
        }
    )
    path = _roundtrip(tmp_path, table, version)
    (l_pages,), (n_pages,) = _layouts(path)
    mb = l_pages.mini_block_layout
    assert list(mb.layers) == [pb.REPDEF_ALL_VALID_ITEM, pb.REPDEF_NULL_AND_EMPTY_LIST]
    assert mb.repetition_index_depth == 1 and mb.num_items == sum(len(x or []) for x in lists)
    assert list(n_pages.mini_block_layout.layers) == [pb.REPDEF_NULLABLE_ITEM]
    r = lance_file.LanceFileReader(str(path))
    for idx in ([0], [n - 1], [3, 9, 10, 11, 4095, 4096, 40_000], list(range(0, n, 997))):
        assert r.take_rows(idx).to_table().equals(table.take(idx))
    for start, count in ((0, 1), (8, 1000), (4000, 9000), (n - 3, 3)):
        assert r.read_range(start, count).to_table().equals(table.slice(start, count))


def test_chunk_format_matches_reference(tmp_path, monkeypatch):
    """The 3-row example of the reference byte maps, byte for byte (2.1 and 2.2)."""
    from tessera.format.file.v21.write import bitpack as bitpack_encode

    monkeypatch.setattr(bitpack_encode, "ENABLED", False)
    table = pa.table(
        {
            "i64": pa.array([1, 2, 3], pa.int64()),
            "f64": pa.array([1.5, 2.5, None], pa.float64()),
            "s": pa.array(["a", "bb", None]),
            "ni32": pa.array([None, 5, 6], pa.int32()),
        }
    )
    expected = {
        "2.1": [
            "3000",
            "00001800fefefefe" + "010000000000000002000000000000000300000000000000",
            "4000",
            "030006001800fefe" + "000000000100fefe" + "000000000000f83f" + "0000000000000440" + "0000000000000000",
            "4000",
            "030006001400fefe" + "000000000100fefe" + "10000000110000001300000013000000" + "61626248fefefefe",
            "3000",
            "030006000c00fefe" + "010000000000fefe" + "000000000500000006000000fefefefe",
        ],
        "2.2": [
            "30000000",
            "000018000000fefe" + "010000000000000002000000000000000300000000000000",
            "40000000",
            "0300060018000000" + "000000000100fefe" + "000000000000f83f" + "0000000000000440" + "0000000000000000",
            "40000000",
            "0300060014000000" + "000000000100fefe" + "10000000110000001300000013000000" + "61626248fefefefe",
            "30000000",
            "030006000c000000" + "010000000000fefe" + "000000000500000006000000fefefefe",
        ],
    }
    for version, hexes in expected.items():
        path = _roundtrip(tmp_path, table, version, name="ref")
        r = ContainerReader(open_reader(str(path)))
        got = []
        for c in range(4):
            (page,) = r.column(c).pages
            got.extend(b.to_pybytes().hex() for b in r.page_buffers([page])[0])
        assert got == hexes, version


@pytest.mark.parametrize("version", VERSIONS)
def test_rows_spanning_chunks_repetition_index(tmp_path, version):
    # 3000 rows of 5 int32 items: runs of 5 equal values, so RLE (as pylance 14 picks) in
    # 4096-value chunks that end mid-row
    table = pa.table({"l": pa.array([[i] * 5 for i in range(3000)], pa.list_(pa.int32()))})
    path = _roundtrip(tmp_path, table, version)
    r = ContainerReader(open_reader(str(path)))
    (page,) = r.column(0).pages
    bufs = r.page_buffers([page])[0]
    index = np.frombuffer(bufs[2], dtype="<u8").reshape(-1, 2)
    assert index[:, 0].sum() == 3000
    assert index[0].tolist() == [819, 1]  # 4096 items: 819 whole rows, 1 item of row 819 (as pylance)
    assert index[-1, 1] == 0
    lr = lance_file.LanceFileReader(str(path))
    assert lr.take_rows([819, 820, 1638, 2999]).to_table().equals(table.take([819, 820, 1638, 2999]))


@pytest.mark.parametrize("version", VERSIONS)
def test_many_empty_lists_between_values(tmp_path, version):
    # too many invisible items between two values for a mini-block chunk: falls back to full-zip
    rows = [[]] * 40_000 + [[1, 2, 3]] + [None] * 40_000 + [[4]] + [[5, 6]] * 10
    table = pa.table({"l": pa.array(rows, pa.list_(pa.int64()))})
    path = _roundtrip(tmp_path, table, version)
    assert _layouts(path)[0][0].WhichOneof("layout") == "full_zip_layout"
    r = lance_file.LanceFileReader(str(path))
    assert r.take_rows([39_999, 40_000, 80_001, 80_005]).to_table().equals(table.take([39_999, 40_000, 80_001, 80_005]))


@pytest.mark.parametrize("version", VERSIONS)
def test_inline_bitpacking(tmp_path, version):
    n = 100_000
    rng = np.random.default_rng(9)
    table = pa.table(
        {
            "u8": pa.array(rng.integers(0, 30, n, dtype="uint8")),
            "i16": pa.array(rng.integers(0, 3000, n, dtype="int16"), mask=rng.random(n) < 0.2),
            "i32": pa.array(rng.integers(0, 1 << 20, n, dtype="int32")),
            "i64": pa.array(np.where(np.arange(n) % 5000 < 10, 1 << 40, rng.integers(0, 100, n))),
            "ts": pa.array(np.arange(n) + 1_700_000_000, pa.timestamp("s")),
            "l": pa.array([list(range(i % 9)) if i % 13 else None for i in range(n)], pa.list_(pa.int32())),
            "neg": pa.array(rng.integers(-50, 50, n)),  # negative: stays flat
        }
    )
    path = _roundtrip(tmp_path, table, version, page_size=512 * 1024)
    kinds = [pages[0].mini_block_layout.value_compression.WhichOneof("compression") for pages in _layouts(path)]
    assert kinds == ["inline_bitpacking"] * 6 + ["flat"]
    r = lance_file.LanceFileReader(str(path))
    idx = [0, 1023, 1024, 5000, 5009, 77_777, n - 1]
    assert r.take_rows(idx).to_table().equals(table.take(idx))
    assert r.read_range(4000, 3000).to_table().equals(table.slice(4000, 3000))


@pytest.mark.parametrize("version", VERSIONS)
def test_unchunkable_bools_split_pages(tmp_path, version):
    # bools cannot use full-zip: the page is split at row boundaries instead
    rows = [[]] * 40_000 + [[True, False, None]] + [None] * 40_000 + [[False]] + [[True, True]] * 10 + [[]] * 70_000
    table = pa.table({"l": pa.array(rows, pa.list_(pa.bool_()))})
    path = _roundtrip(tmp_path, table, version)
    assert len(_layouts(path)[0]) > 1
    idx = [39_999, 40_000, 80_001, 80_005, 150_000]
    assert lance_file.LanceFileReader(str(path)).take_rows(idx).to_table().equals(table.take(idx))


EXTRA_TYPES = {
    "decimal256": pa.array(
        [decimal.Decimal(i * 37 - 9000) / 8 if i % 5 else None for i in range(500)], pa.decimal256(40, 3)
    ),
    "float16": pa.array(np.arange(500, dtype="float16")),
    "date64": pa.array([dt.datetime(2020, 1, 1) + dt.timedelta(days=i) for i in range(500)], pa.date64()),
    "time32": pa.array(list(range(500)), pa.time32("ms")),
    "time64": pa.array(list(range(500)), pa.time64("ns")),
    "duration": pa.array(list(range(500)), pa.duration("us")),
    "fsb": pa.array([bytes([i % 256]) * 16 if i % 7 else None for i in range(500)], pa.binary(16)),
    "large_binary": pa.array([b"q" * (i % 11) if i % 5 else None for i in range(500)], pa.large_binary()),
    "large_list": pa.array([list(range(i % 4)) if i % 6 else None for i in range(500)], pa.large_list(pa.int16())),
    "fsl_bool": pa.FixedSizeListArray.from_arrays(pa.array([i % 3 == 0 for i in range(4000)]), 8),
    "fsl_i8_nulls": pa.FixedSizeListArray.from_arrays(
        pa.array([None if i % 11 == 0 else i % 100 for i in range(2000)], pa.int8()), 4
    ),
    "list_fsl": pa.array([[[1.0, 2.0]] * (i % 3) for i in range(500)], pa.list_(pa.list_(pa.float32(), 2))),
    "list_null": pa.array([[None] * (i % 3) if i % 4 else None for i in range(500)], pa.list_(pa.null())),
    "null": pa.nulls(500),
    "struct_list_struct": pa.array(
        [{"x": [{"y": i, "z": str(i)}] * (i % 3) if i % 5 else None} if i % 7 else None for i in range(500)],
        pa.struct([("x", pa.list_(pa.struct([("y", pa.int32()), ("z", pa.string())])))]),
    ),
    "list_list_empty_only": pa.array([[[], []] if i % 2 else [] for i in range(500)], pa.list_(pa.list_(pa.int32()))),
    "list_all_null_items": pa.array([[None] * (i % 3 + 1) for i in range(500)], pa.list_(pa.int64())),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(EXTRA_TYPES))
def test_extra_types(tmp_path, version, name):
    _roundtrip(tmp_path, pa.table({"v": EXTRA_TYPES[name]}), version, name=name)


def test_constant_pages_22(tmp_path):
    n = 1000
    mask = pa.array([i % 10 == 3 for i in range(n)])
    table = pa.table(
        {
            "i": pa.array([42] * n, pa.int32()),
            "b": pa.array([True] * n),
            "d": pa.array([decimal.Decimal("1.25")] * n, pa.decimal128(10, 2)),
            "ts": pa.array([dt.datetime(2020, 1, 1)] * n, pa.timestamp("us", "UTC")),
            "ni": pa.array([None if i % 3 == 0 else 7 for i in range(n)], pa.int64()),
            "st": pa.StructArray.from_arrays(
                [pa.array([1.5] * n), pa.array([9] * n, pa.int16())], names=["x", "y"], mask=mask
            ),
            "fsb": pa.array([b"abc"] * n, pa.binary(3)),
            "f16": pa.array(np.full(n, 1.5, dtype="float16")),
            "bf": pa.array([None if i % 2 else False for i in range(n)]),
            "u64": pa.array([2**64 - 1] * n, pa.uint64()),
            "s": pa.array(["same"] * n),
            "fsl": pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0] * n, pa.float32()), 2),
        }
    )
    path = _roundtrip(tmp_path, table, "2.2")
    layouts = [pages[0] for pages in _layouts(path)]
    for lay in layouts[:11]:  # i, b, d, ts, ni, st.x, st.y, fsb, f16, bf, u64
        assert lay.WhichOneof("layout") == "all_null_layout" and lay.all_null_layout.HasField("constant_value")
    assert layouts[0].all_null_layout.constant_value == (42).to_bytes(4, "little")
    assert layouts[1].all_null_layout.constant_value == b"\x01"
    # strings and vectors are not written as constants
    assert [lay.WhichOneof("layout") for lay in layouts[11:]] == ["mini_block_layout", "mini_block_layout"]
    # 2.1 has no constant pages
    path = _roundtrip(tmp_path, table, "2.1")
    for pages in _layouts(path):
        assert not pages[0].all_null_layout.HasField("constant_value")


@pytest.mark.parametrize("version", VERSIONS)
def test_all_null_layouts(tmp_path, version):
    n = 600
    table = pa.table(
        {
            "i": pa.nulls(n, pa.int32()),
            "st": pa.StructArray.from_arrays([pa.array(np.arange(n))], names=["x"], mask=pa.array([True] * n)),
            "le": pa.array([[]] * n, pa.list_(pa.int64())),
        }
    )
    path = _roundtrip(tmp_path, table, version)
    (i_page,), (st_page,), (le_page,) = _layouts(path)
    assert list(i_page.all_null_layout.layers) == [pb.REPDEF_NULLABLE_ITEM]
    assert list(st_page.all_null_layout.layers) == [pb.REPDEF_ALL_VALID_ITEM, pb.REPDEF_NULLABLE_ITEM]
    assert list(le_page.all_null_layout.layers) == [pb.REPDEF_ALL_VALID_ITEM, pb.REPDEF_EMPTYABLE_LIST]


@pytest.mark.parametrize("version", VERSIONS)
def test_wide_values_use_full_zip(tmp_path, version):
    rng = np.random.default_rng(2)
    n = 3000
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 128).astype("float32")), 128)
    text = pa.array([("t" * 300 + str(i)) if i % 4 else None for i in range(n)])
    table = pa.table({"vec": vec, "text": text})
    path = _roundtrip(tmp_path, table, version, page_size=256 * 1024)
    layouts = _layouts(path)
    assert all(p.WhichOneof("layout") == "full_zip_layout" for pages in layouts for p in pages)
    assert len(layouts[0]) > 1
    r = lance_file.LanceFileReader(str(path))
    idx = [0, 3, 4, 1999, 2999]
    assert r.take_rows(idx).to_table().equals(table.take(idx))


@pytest.mark.parametrize("version", VERSIONS)
def test_zero_rows_writes_no_pages(tmp_path, version):
    table, _ = CELLS["zero_rows"]
    path = _roundtrip(tmp_path, table, version)
    assert all(len(pages) == 0 for pages in _layouts(path))


def test_pages_hold_whole_rows_and_bounded_size(tmp_path):
    n = 300_000
    table = pa.table(
        {"i": np.arange(n, dtype="int64"), "l": pa.array([[i, i] for i in range(n)], pa.list_(pa.int32()))}
    )
    page_size = 256 * 1024
    path = _roundtrip(tmp_path, table, "2.2", page_size=page_size)
    r = ContainerReader(open_reader(str(path)))
    for c in range(r.num_columns):
        pages = r.column(c).pages
        assert sum(p.length for p in pages) == n
        assert len(pages) > 4
        assert max(sum(p.buffer_sizes) for p in pages) < 2.5 * page_size


def test_unsupported_types_raise():
    from tessera.format.errors import UnsupportedTypeError

    for arr in (
        pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int32())),
        pa.array([datetime.date(2024, 1, 1)]).dictionary_encode(),  # Lance stores no dictionary of dates
        pa.FixedSizeListArray.from_arrays(pa.array(["a", "b"]), 2),
        pa.array([{}], pa.struct([])),
    ):
        with pytest.raises(UnsupportedTypeError):
            format.FileWriter(pa.BufferOutputStream(), pa.schema([pa.field("v", arr.type)]), file_version="2.1")


def test_adjacent_slices_of_one_array_join_without_a_copy_and_read_back(tmp_path):
    from tessera.format.file.v21.write.values import _join_adjacent

    rng = np.random.default_rng(3)
    n = 50_000
    strings = pa.array([None if i % 7 == 0 else f"s{int(x)}" for i, x in enumerate(rng.integers(0, 10**9, n))])
    ints = pa.array([None if i % 5 == 0 else int(x) for i, x in enumerate(rng.integers(-(2**40), 2**40, n))])
    for arr in (strings, ints):
        sliced = arr.slice(3)  # a non-zero starting offset
        pieces = [sliced.slice(0, 1000), sliced.slice(1000, 2500), sliced.slice(3500)]
        (joined,) = _join_adjacent(pieces)
        assert joined.buffers()[1].address == arr.buffers()[1].address  # a view, not a copy
        assert joined.equals(sliced) and joined.null_count == sliced.null_count
        gap = [sliced.slice(0, 1000), sliced.slice(1001, 10)]  # not adjacent: left alone
        assert _join_adjacent(gap) == gap
        other = [arr.slice(0, 10), pa.concat_arrays([arr.slice(10, 10)])]  # another buffer: left alone
        assert len(_join_adjacent(other)) == 2
    # one large array cut into pages by the writer: pylance reads it back equal
    table = pa.table({"s": strings, "i": ints})
    _roundtrip(tmp_path, table, "2.2", page_size=64 * 1024)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_low_cardinality_strings_are_dictionary_encoded_as_pylance_does(tmp_path, version):
    from tessera.format.file.v21.write import dictionary as dictionary_encode

    n = 30_000
    cats = ["INFO", "WARN", "ERROR", "DEBUG", "TRACE", ""]
    table = pa.table(
        {
            "level": pa.array([cats[i % 6] for i in range(n)]),
            "maybe": pa.array([None if i % 3 == 0 else cats[i % 4] for i in range(n)]),
            "tags": pa.array([None if i % 7 == 0 else [cats[i % 3]] * (i % 4) for i in range(n)]),
            "blob": pa.array([cats[i % 2].encode() * 3 for i in range(n)], pa.large_binary()),
            "unique": pa.array([f"user-{i:08d}" for i in range(n)]),
        }
    )
    path = _roundtrip(tmp_path, table, version)  # pylance reads every column back equal
    ours = format.FileReader(str(path))
    assert ours.read().equals(table)
    idx = np.random.default_rng(5).integers(0, n, 500)
    assert ours.take(idx).equals(table.take(pa.array(idx)))
    layouts = _layouts(path)
    mbs = {name: [p.mini_block_layout for p in pages] for name, pages in zip(table.column_names, layouts)}
    for name, k in (("level", 6), ("maybe", 4), ("tags", 3), ("blob", 2)):
        for mb in mbs[name]:
            assert mb.HasField("dictionary") and 1 <= mb.num_dictionary_items <= k + 1, name
            wrapped = mb.dictionary.HasField("general")
            assert wrapped == (version == "2.2"), name  # 2.2 wraps the items in LZ4, as pylance
            assert mb.value_compression.HasField("inline_bitpacking"), name  # u32 indices, bit-packed
    assert not any(mb.HasField("dictionary") for mb in mbs["unique"])  # distinct values stay plain
    dictionary_encode.ENABLED = False
    try:
        plain = _roundtrip(tmp_path, table, version, name="plain")
    finally:
        dictionary_encode.ENABLED = True
    assert os.path.getsize(path) < os.path.getsize(plain) * 0.75
