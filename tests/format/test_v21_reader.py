"""Reading file formats 2.1 and 2.2 written by pylance (the reference writer).

Every cell of the type matrix is written by pylance in each version it can
store and read back with ``format``; larger tables make pylance pick each of
its encodings (bit-packing, FSST, dictionary, RLE, full-zip, constant pages,
general compression) and the tests check in the file's page layouts that the
encoding really is there, so a change in pylance's choices cannot silently
leave a decoder path untested.  Pages whose layout or encodings are not
supported must raise UnsupportedEncodingError.
"""

from __future__ import annotations

import decimal
import os

import numpy as np
import pyarrow as pa
import pytest
import tessera_test_matrix as matrix

from tessera import format
from tessera.format.file.container import PAGE_LAYOUT_URL, ContainerReader, Footer, unpack_any
from tessera.format.file.io import BytesReader, LocalFileReader, open_reader
from tessera.format.file.v21.read.layout import parse_all_null
from tessera.format.protos import encodings21_pb2 as pb

lance = pytest.importorskip("lance")

VERSIONS = ("2.1", "2.2")
CELLS = matrix.cells()


def write(path, table: pa.Table, version: str, batch_rows: int | None = None, **kw) -> str:
    path = str(path)
    with lance.file.LanceFileWriter(path, table.schema, version=version, **kw) as w:
        if batch_rows:
            # fresh (unsliced) batches: pylance 14 panics on sliced nested structs
            for s in range(0, table.num_rows, batch_rows):
                idx = pa.array(np.arange(s, min(s + batch_rows, table.num_rows)))
                w.write_batch(table.take(idx).combine_chunks())
        else:
            w.write_batch(table)
    return path


# ---------------------------------------------------------------- layout inspection


def _walk(msg, names: set[str]) -> None:
    for fd, value in msg.ListFields():
        if fd.message_type is not None:
            names.add(fd.name)
            for v in value if fd.is_repeated else [value]:
                _walk(v, names)
        elif fd.name in (
            "bits_rep",
            "bits_def",
            "bits_per_offset",
            "bits_per_value",
            "has_validity",
            "has_large_chunk",
        ):
            names.add(fd.name)
        elif fd.name == "constant_value":
            names.add("constant_value")
        elif fd.name == "scheme":
            names.add(pb.CompressionScheme.Name(value))


def page_features(path) -> dict[int, list[set[str]]]:
    """column -> per page: names of the layout, encodings and flags used."""
    r = ContainerReader(open_reader(str(path)))
    out = {}
    for c in range(r.num_columns):
        pages = []
        for page in r.column(c).pages:
            pl = unpack_any(page.encoding.direct.encoding, PAGE_LAYOUT_URL, pb.PageLayout)
            names: set[str] = set()
            _walk(pl, names)
            if pl.WhichOneof("layout") == "all_null_layout":
                info = parse_all_null(pl.all_null_layout, "test")
                for enc in (info.rep_compression, info.def_compression):
                    if enc is not None:
                        names.add("levels_compressed")
                        _walk(enc, names)
                if len(page.buffer_sizes):
                    names.add("has_buffers")
            pages.append(names)
        out[c] = pages
    return out


def features_of(path, column: int) -> set[str]:
    return set().union(*page_features(path)[column])


def check_ranges(path, table: pa.Table, seed: int = 0, n_ranges: int = 25) -> None:
    rng = np.random.default_rng(seed)
    n = table.num_rows
    with format.FileReader(path) as r:
        for _ in range(n_ranges):
            a = int(rng.integers(0, n + 1))
            b = int(rng.integers(a, n + 1))
            got = r.read_range(a, b)
            assert got.equals(table.slice(a, b - a)), (a, b)
        for a in (0, max(0, n - 1)):
            assert r.read_range(a, min(n, a + 1)).equals(table.slice(a, 1))
        if n:
            idx = rng.integers(0, n, 64)
            idx[:3] = [0, n - 1, idx[5]]
            assert r.take(idx).equals(table.take(idx))


# ---------------------------------------------------------------- the type matrix


MATRIX = [(name, v) for name, (_, versions) in CELLS.items() for v in VERSIONS if v in versions]


@pytest.mark.parametrize("name,version", MATRIX, ids=[f"{n}-{v}" for n, v in MATRIX])
def test_matrix_cell(tmp_path, name, version):
    table, _ = CELLS[name]
    path = write(tmp_path / "cell.lance", table, version)
    got = format.read_file(path)
    assert got.schema.equals(table.schema)
    for field in got.schema:
        assert got[field.name].type == table[field.name].type  # exact: tz, precision, item field
    assert got.equals(table)
    if table.num_rows:
        check_ranges(path, table, seed=len(name))


def test_matrix_types_are_exact(tmp_path):
    t = pa.table(
        {
            "ts": pa.array([1, None, 3], pa.timestamp("ns", tz="Europe/Paris")),
            "dec": pa.array([decimal.Decimal("1.5"), decimal.Decimal("-2.0625"), None], pa.decimal128(20, 4)),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array([1.0, None, 3.0, 4.0, 5.0, 6.0], pa.float32()), 2),
            "ls": pa.array(["a", None, "ccc"], pa.large_string()),
            "lb": pa.array([b"a", None, b""], pa.large_binary()),
            "fsb": pa.array([b"ab", b"cd", None], pa.binary(2)),
            "h": pa.array(np.array([1, 2, 3], dtype=np.float16)),
            "t32": pa.array([1, 2, None], pa.time32("ms")),
            "dur": pa.array([1, None, 3], pa.duration("us")),
            "ll": pa.array([[1], None, [2, 3]], pa.large_list(pa.int16())),
        }
    )
    for v in VERSIONS:
        path = write(tmp_path / f"exact_{v}.lance", t, v)
        got = format.read_file(path)
        assert got.equals(t)
        assert [f.type for f in got.schema] == [f.type for f in t.schema]


# ---------------------------------------------------------------- many pages, ranges, take


@pytest.mark.parametrize("version", VERSIONS)
def test_multi_page(tmp_path, version):
    table = matrix.multi_page_table()
    path = write(tmp_path / "mp.lance", table, version, batch_rows=5000, data_cache_bytes=256 * 1024)
    feats = page_features(path)
    assert all(len(pages) >= 10 for pages in feats.values()), {c: len(p) for c, p in feats.items()}
    assert format.read_file(path).equals(table)
    check_ranges(path, table, seed=1, n_ranges=40)


def _nested_table(n: int = 30_000) -> pa.Table:
    rng = np.random.default_rng(11)
    ints = rng.integers(0, 1 << 30, n)
    lists = [None if i % 13 == 0 else [] if i % 7 == 0 else list(range(i % 5)) for i in range(n)]
    nested = [None if i % 17 == 0 else [[j] * (j % 3) if j % 4 else None for j in range(i % 4)] for i in range(n)]
    strs = [None if i % 11 == 0 else [f"s{i % 97}"] * (i % 3) for i in range(n)]
    los = [
        None
        if i % 9 == 0
        else [None if j == 1 else {"a": i + j, "b": None if j == 2 else f"b{j}"} for j in range(i % 4)]
        for i in range(n)
    ]
    sol = [None if i % 6 == 0 else {"l": None if i % 4 == 0 else list(range(i % 3)), "x": i} for i in range(n)]
    mask = pa.array(rng.random(n) < 0.15)
    nstruct = pa.StructArray.from_arrays(
        [
            pa.array(ints),
            pa.array([None if i % 5 == 0 else float(i) for i in range(n)]),
            pa.StructArray.from_arrays(
                [pa.array([f"z{i % 50}" for i in range(n)])], names=["z"], mask=pa.array(rng.random(n) < 0.1)
            ),
        ],
        names=["x", "y", "inner"],
        mask=mask,
    )
    return pa.table(
        {
            "l": pa.array(lists, pa.list_(pa.int32())),
            "ll": pa.array(nested, pa.list_(pa.list_(pa.int64()))),
            "ls": pa.array(strs, pa.list_(pa.string())),
            "los": pa.array(los, pa.list_(pa.struct([("a", pa.int64()), ("b", pa.string())]))),
            "sol": pa.array(sol, pa.struct([("l", pa.list_(pa.int32())), ("x", pa.int64())])),
            "ns": nstruct,
        }
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_nested_ranges_and_take(tmp_path, version):
    table = _nested_table()
    path = write(tmp_path / "nested.lance", table, version, batch_rows=4000, data_cache_bytes=512 * 1024)
    feats = page_features(path)
    assert len(feats[0]) > 1  # several pages
    # lists carry repetition levels and a repetition index
    assert "rep_compression" in features_of(path, 0)
    assert format.read_file(path).equals(table)
    check_ranges(path, table, seed=2, n_ranges=60)


@pytest.mark.parametrize("version", VERSIONS)
def test_long_lists_span_chunks(tmp_path, version):
    # rows longer than a mini-block chunk: preambles, trailers and all-preamble chunks
    rng = np.random.default_rng(9)
    rows = [None if i % 17 == 0 else list(range(int(rng.choice([0, 1, 5, 3000, 9000])))) for i in range(300)]
    table = pa.table(
        {
            "l": pa.array(rows, pa.list_(pa.int64())),
            "ls": pa.array(
                [None if r is None else [f"s{j % 7}" for j in range(min(len(r), 2000))] for r in rows],
                pa.list_(pa.string()),
            ),
            "ll": pa.array(
                [None if r is None else [list(range(j % 4)) for j in range(len(r) // 10)] for r in rows],
                pa.list_(pa.list_(pa.int32())),
            ),
        }
    )
    path = write(tmp_path / "long.lance", table, version)
    feats = features_of(path, 0)
    assert "rep_compression" in feats
    if version == "2.2":
        assert "rle" in feats  # 2.2 picks RLE for these levels
    assert format.read_file(path).equals(table)
    check_ranges(path, table, seed=9, n_ranges=80)


class _CountingReader:
    def __init__(self, path):
        self._inner = LocalFileReader(path)
        self.path = self._inner.path
        self.bytes = 0

    def size(self):
        return self._inner.size()

    def read_ranges(self, ranges):
        self.bytes += sum(n for _, n in ranges)
        return self._inner.read_ranges(ranges)

    def close(self):
        self._inner.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_range_reads_only_the_needed_chunks(tmp_path, version):
    n = 400_000
    rng = np.random.default_rng(3)
    table = pa.table(
        {
            "f": rng.standard_normal(n),
            "l": pa.array([[i] * (i % 3) for i in range(n)], pa.list_(pa.int64())),
        }
    )
    path = write(tmp_path / "big.lance", table, version)
    size = os.path.getsize(path)
    counting = _CountingReader(path)
    with format.FileReader(counting) as r:
        r.read_range(0, 1)  # loads chunk metadata and repetition indexes
        before = counting.bytes
        for a in (123_457, 250_001, n - 5):
            got = r.read_range(a, a + 5)
            assert got.equals(table.slice(a, 5))
        assert counting.bytes - before < size // 50, (counting.bytes - before, size)


# ---------------------------------------------------------------- encodings pylance picks


def _strings(rng, n, k=16):
    return pa.array(["".join(map(chr, rng.integers(97, 123, k))) for _ in range(n)])


def _encoding_cases():
    rng = np.random.default_rng(4)
    n = 20_000
    ts = pa.array(1_700_000_000_000_000 + np.arange(n, dtype=np.int64) * 997, pa.timestamp("us", tz="UTC"))
    cases = {}
    cases["bitpacking"] = (
        pa.table({"a": rng.integers(0, 1 << 20, n), "t": ts, "i32": rng.integers(0, 1 << 12, n).astype(np.int32)}),
        {"a": {"inline_bitpacking"}, "t": {"inline_bitpacking"}, "i32": {"inline_bitpacking"}},
    )
    cases["fsst"] = (
        pa.table({"s": _strings(rng, n), "ls": _strings(rng, n).cast(pa.large_string())}),
        {"s": {"fsst"}, "ls": {"fsst"}},
    )
    levels = ["INFO", "WARN", "ERROR"]
    cases["dictionary"] = (
        pa.table(
            {
                "s": [levels[i % 3] for i in range(n)],
                "ns": [None if i % 10 == 0 else levels[i % 3] for i in range(n)],
                "i": (np.arange(n) % 5).astype(np.int64),
            }
        ),
        {"s": {"dictionary"}, "ns": {"dictionary", "def_compression"}},
    )
    cases["def_levels"] = (
        pa.table(
            {
                "n": pa.array([None if i % 7 == 0 else i * 3 for i in range(n)], pa.int64()),
                "b": pa.array([None if i % 5 == 0 else bool(i % 3) for i in range(n)], pa.bool_()),
                "d": pa.array([None if i % 4 == 0 else i for i in range(n)], pa.int64()).cast(pa.decimal128(22, 2)),
            }
        ),
        {"n": {"out_of_line_bitpacking", "def_compression"}, "b": {"def_compression"}, "d": {"def_compression"}},
    )
    cases["constant"] = (
        pa.table(
            {
                "c": pa.array([42] * n, pa.int32()),
                "cs": pa.array(["same"] * n),
                "cn": pa.array([None if i % 3 == 0 else 7 for i in range(n)], pa.int64()),
                "cb": pa.array([True] * n),
            }
        ),
        {},
    )
    cases["full_zip"] = (
        pa.table(
            {
                "v": pa.FixedSizeListArray.from_arrays(
                    pa.array(rng.standard_normal(2000 * 128).astype(np.float32)), 128
                ),
                "s": [("x%d" % i) * 200 for i in range(2000)],
                "ns": [None if i % 3 == 0 else ("y%d" % i) * 200 for i in range(2000)],
                "nv": pa.FixedSizeListArray.from_arrays(
                    pa.array(np.arange(2000 * 96, dtype=np.float32)),
                    96,
                    mask=pa.array([i % 5 == 0 for i in range(2000)]),
                ),
            }
        ),
        {
            "v": {"full_zip_layout", "bits_per_value"},
            "s": {"full_zip_layout", "bits_per_offset", "fsst"},
            "ns": {"full_zip_layout", "bits_def"},
            "nv": {"full_zip_layout", "bits_def"},
        },
    )
    vec = [list(map(float, range(128)))]
    cases["full_zip_rep"] = (
        pa.table(
            {
                "lv": pa.array(
                    [vec * (i % 3) if i % 4 else None for i in range(600)], pa.list_(pa.list_(pa.float32(), 128))
                ),
                "lbs": pa.array(
                    [[("s%d" % i) * 150] * (i % 3) if i % 4 else None for i in range(600)], pa.list_(pa.string())
                ),
            }
        ),
        {"lv": {"full_zip_layout", "bits_rep"}, "lbs": {"full_zip_layout", "bits_rep"}},
    )
    cases["fsl_validity"] = (
        pa.table(
            {
                "items": pa.FixedSizeListArray.from_arrays(
                    pa.array([None if i % 9 == 0 else float(i) for i in range(n * 4)], pa.float32()), 4
                ),
                "rows": pa.FixedSizeListArray.from_arrays(
                    pa.array(np.arange(n * 4, dtype=np.float32)), 4, mask=pa.array([i % 5 == 0 for i in range(n)])
                ),
            }
        ),
        {"items": {"fixed_size_list", "has_validity"}, "rows": {"fixed_size_list", "def_compression"}},
    )
    cases["all_null_levels"] = (
        pa.table(
            {
                "empty": pa.array([[]] * 3000, pa.list_(pa.int64())),
                "nulls": pa.array([None] * 3000, pa.list_(pa.int32())),
                "null_items": pa.array([[None] * (i % 3) for i in range(3000)], pa.list_(pa.int32())),
                "null_struct": pa.StructArray.from_arrays(
                    [pa.array([None] * 3000, pa.int64())], names=["a"], mask=pa.array([i % 2 == 0 for i in range(3000)])
                ),
                "const_items": pa.array([[7] * (i % 3) for i in range(3000)], pa.list_(pa.int32())),
                "const_str_items": pa.array(
                    [["x"] * (i % 3) if i % 5 else None for i in range(3000)], pa.list_(pa.string())
                ),
            }
        ),
        {c: {"all_null_layout", "has_buffers"} for c in ("empty", "nulls", "null_items", "null_struct")},
    )
    cases["zstd_general"] = (
        pa.table(
            [pa.array(rng.standard_normal(n))],
            schema=pa.schema([pa.field("f", pa.float64(), metadata={"lance-encoding:compression": "zstd"})]),
        ),
        {"f": {"general", "COMPRESSION_ALGORITHM_ZSTD"}},
    )
    cases["lz4_general"] = (  # pylance 2.2 picks dictionary + byte_stream_split (on the indices) here
        pa.table(
            [pa.array(np.tile(rng.standard_normal(100), n // 100))],
            schema=pa.schema([pa.field("f", pa.float64(), metadata={"lance-encoding:compression": "lz4"})]),
        ),
        {"f": {"general", "COMPRESSION_ALGORITHM_LZ4"}},
    )
    return cases


ENCODING_CASES = _encoding_cases()
SKIP_CASES: dict[tuple[str, str], str] = {}
VERSION_SPECIFIC = {
    # (case, version) -> column -> features that must be present
    ("constant", "2.1"): {"c": {"rle"}, "cs": {"dictionary"}},
    ("constant", "2.2"): {
        "c": {"all_null_layout", "constant_value"},
        "cs": {"all_null_layout", "has_buffers"},
        "cn": {"all_null_layout", "constant_value"},
        "cb": {"constant_value"},
    },
    ("dictionary", "2.2"): {"s": {"general", "COMPRESSION_ALGORITHM_LZ4"}},
    ("all_null_levels", "2.1"): {"const_items": {"rle", "rep_compression"}},
    ("all_null_levels", "2.2"): {
        "empty": {"levels_compressed", "rle"},
        "null_items": {"levels_compressed", "out_of_line_bitpacking"},
        "const_items": {"all_null_layout", "constant_value", "has_buffers"},
        "const_str_items": {"all_null_layout", "has_buffers"},
    },
    ("bitpacking", "2.2"): {"a": {"has_large_chunk"}},
}


@pytest.mark.parametrize("case", sorted(ENCODING_CASES))
@pytest.mark.parametrize("version", VERSIONS)
def test_encodings_pylance_picks(tmp_path, case, version):
    if (case, version) in SKIP_CASES:
        pytest.skip(SKIP_CASES[(case, version)])
    table, expected = ENCODING_CASES[case]
    path = write(tmp_path / f"{case}.lance", table, version)
    expected = {k: set(v) for k, v in expected.items()}
    for col, feats in VERSION_SPECIFIC.get((case, version), {}).items():
        expected.setdefault(col, set()).update(feats)
    names = table.column_names
    for col, feats in expected.items():
        have = features_of(path, names.index(col))
        assert feats <= have, f"{case}/{version}: column {col!r} lacks {feats - have} (has {sorted(have)})"
    got = format.read_file(path)
    assert got.equals(table)
    check_ranges(path, table, seed=7)


# ---------------------------------------------------------------- unsupported encodings


def rewrite_page(src: str, dst: str, column: int, page: int, new_layout: bytes) -> None:
    """Copy ``src`` to ``dst`` with one page's PageLayout replaced by ``new_layout`` (serialised)."""
    data = open(src, "rb").read()
    r = ContainerReader(BytesReader(data))
    f = r.footer
    metas = [r.column(i) for i in range(r.num_columns)]
    from google.protobuf import any_pb2

    metas[column].pages[page].encoding.direct.encoding = any_pb2.Any(
        type_url=PAGE_LAYOUT_URL, value=new_layout
    ).SerializeToString()
    out = bytearray(data[: f.column_meta_start])
    cmo = []
    for m in metas:
        b = m.SerializeToString()
        cmo.append((len(out), len(b)))
        out += b
    cmo_pos = len(out)
    for pos, n in cmo:
        out += pos.to_bytes(8, "little") + n.to_bytes(8, "little")
    gbo_pos = len(out)
    out += data[f.gbo_table_pos : f.gbo_table_pos + 16 * f.num_global_buffers]
    out += Footer(f.column_meta_start, cmo_pos, gbo_pos, f.num_global_buffers, f.num_columns, f.major, f.minor).pack()
    open(dst, "wb").write(bytes(out))


def _layout_of(path: str, column: int = 0, page: int = 0) -> pb.PageLayout:
    r = ContainerReader(open_reader(path))
    p = r.column(column).pages[page]
    return unpack_any(p.encoding.direct.encoding, PAGE_LAYOUT_URL, pb.PageLayout)


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _varint((num << 3) | 2) + _varint(len(payload)) + payload


def _mutations():
    def blob(pl):
        out = pb.PageLayout()
        out.blob_layout.inner_layout.CopyFrom(pl)
        out.blob_layout.layers.append(pb.REPDEF_ALL_VALID_ITEM)
        return out.SerializeToString(), "blob"

    def unknown_layout_case(pl):
        return _field(5, b""), "PageLayout field 5"

    def unknown_field_in_layout(pl):
        inner = pl.mini_block_layout.SerializeToString() + _varint(99 << 3) + _varint(1)
        return _field(1, inner), "field number 99"

    def unknown_compression_case(pl):
        pl = pb.PageLayout.FromString(pl.SerializeToString())
        pl.mini_block_layout.ClearField("value_compression")
        inner = pl.mini_block_layout.SerializeToString() + _field(3, _field(14, b""))
        return _field(1, inner), "field number 14"

    def unknown_field_in_flat(pl):
        pl = pb.PageLayout.FromString(pl.SerializeToString())
        bits = pl.mini_block_layout.value_compression.flat.bits_per_value
        pl.mini_block_layout.ClearField("value_compression")
        flat = _varint(1 << 3) + _varint(bits) + _varint(7 << 3) + _varint(3)
        inner = pl.mini_block_layout.SerializeToString() + _field(3, _field(1, flat))
        return _field(1, inner), "Flat has field number 7"

    def unknown_layer(pl):
        pl = pb.PageLayout.FromString(pl.SerializeToString())
        pl.mini_block_layout.layers[0] = 9
        return pl.SerializeToString(), "RepDefLayer value 9"

    def bss_of_bitpacking(pl):
        # byte stream split is read over flat values only
        pl = pb.PageLayout.FromString(pl.SerializeToString())
        bss = pl.mini_block_layout.value_compression.byte_stream_split
        bss.values.inline_bitpacking.uncompressed_bits_per_value = 64
        return pl.SerializeToString(), "expected a flat encoding"

    def packed_struct(pl):
        pl = pb.PageLayout.FromString(pl.SerializeToString())
        inner = pb.CompressiveEncoding()
        inner.CopyFrom(pl.mini_block_layout.value_compression)
        ps = pl.mini_block_layout.value_compression.packed_struct
        ps.bits_per_value.append(64)
        ps.values.CopyFrom(inner)
        return pl.SerializeToString(), "packed_struct"

    def variable_packed_struct(pl):
        pl = pb.PageLayout.FromString(pl.SerializeToString())
        inner = pb.CompressiveEncoding()
        inner.CopyFrom(pl.mini_block_layout.value_compression)
        f = pl.mini_block_layout.value_compression.variable_packed_struct.fields.add()
        f.value.CopyFrom(inner)
        f.bits_per_value = 64
        return pl.SerializeToString(), "variable_packed_struct"

    def flat_with_zstd(pl):
        pl = pb.PageLayout.FromString(pl.SerializeToString())
        pl.mini_block_layout.value_compression.flat.data.scheme = pb.COMPRESSION_ALGORITHM_ZSTD
        return pl.SerializeToString(), "data"

    def bad_scheme(pl):
        pl = pb.PageLayout.FromString(pl.SerializeToString())
        inner = pb.CompressiveEncoding()
        inner.CopyFrom(pl.mini_block_layout.value_compression)
        g = pl.mini_block_layout.value_compression.general
        g.compression.scheme = 7
        g.values.CopyFrom(inner)
        return pl.SerializeToString(), "scheme 7"

    return {
        f.__name__: f
        for f in (
            blob,
            unknown_layout_case,
            unknown_field_in_layout,
            unknown_compression_case,
            unknown_field_in_flat,
            unknown_layer,
            bss_of_bitpacking,
            packed_struct,
            variable_packed_struct,
            flat_with_zstd,
            bad_scheme,
        )
    }


MUTATIONS = _mutations()


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("version", VERSIONS)
def test_unsupported_layouts_raise(tmp_path, mutation, version):
    table = pa.table({"f": np.random.default_rng(0).standard_normal(3000), "i": np.arange(3000)})
    src = write(tmp_path / "src.lance", table, version)
    pl = _layout_of(src, 0)
    assert pl.mini_block_layout.value_compression.WhichOneof("compression") == "flat"
    new, needle = MUTATIONS[mutation](pl)
    dst = str(tmp_path / "dst.lance")
    rewrite_page(src, dst, 0, 0, new)
    with pytest.raises(format.UnsupportedEncodingError, match=needle):
        format.read_file(dst)
    # the untouched column still reads
    assert format.read_file(dst, columns=["i"]).column(0).equals(table.column("i"))


@pytest.mark.parametrize("version", ("2.2",))
def test_unknown_field_on_constant_page_raises(tmp_path, version):
    table = pa.table({"c": pa.array([5] * 1000, pa.int64())})
    src = write(tmp_path / "c.lance", table, version)
    pl = _layout_of(src)
    assert pl.all_null_layout.HasField("constant_value")
    inner = pl.all_null_layout.SerializeToString() + _varint(11 << 3) + _varint(1)
    dst = str(tmp_path / "d.lance")
    rewrite_page(src, dst, 0, 0, _field(2, inner))
    with pytest.raises(format.UnsupportedEncodingError, match="field number 11"):
        format.read_file(dst)


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_blob_pages_read(tmp_path, version):
    # blobs, opt-in (so is byte_stream_split: test_byte_stream_split); tests/format/test_blob.py has the rest
    blob = pa.table(
        [pa.array([b"x" * 1000] * 50, pa.large_binary())],
        schema=pa.schema([pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})]),
    )
    path = write(tmp_path / "blob.lance", blob, version)
    assert "blob_layout" in features_of(path, 0)
    assert format.read_file(path).equals(blob)


@pytest.mark.parametrize("comp", ["zstd", "lz4"])
@pytest.mark.parametrize("version", VERSIONS)
def test_byte_stream_split(tmp_path, version, comp):
    """pylance picks byte_stream_split (inside general compression) for numbers
    with ``lance-encoding:compression``: smooth floats, rounded float32s,
    integers, and the indices of a dictionary."""
    rng = np.random.default_rng(4)
    n = 20_000
    cols = {
        "smooth": pa.array(np.cumsum(rng.standard_normal(n)) * 1e-3 + 100),
        "f32": pa.array(np.round(rng.uniform(0, 100, n), 1).astype(np.float32)),
        "f32n": pa.array(np.round(rng.uniform(0, 100, n), 1).astype(np.float32), mask=np.arange(n) % 9 == 0),
        "i64": pa.array(np.arange(n) * 7919 % 100_003),
        "dict": pa.array(rng.integers(0, 1000, n).astype(np.float64)),
    }
    meta = {"lance-encoding:compression": comp}
    table = pa.table(
        list(cols.values()), schema=pa.schema([pa.field(k, v.type, metadata=meta) for k, v in cols.items()])
    )
    path = write(tmp_path / "bss.lance", table, version)
    used = [name for i, name in enumerate(table.column_names) if "byte_stream_split" in features_of(path, i)]
    assert used, "pylance no longer picks byte_stream_split for any of these columns"
    assert format.read_file(path).equals(table)
    check_ranges(path, table, seed=3)
