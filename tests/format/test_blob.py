"""Blob columns (``lance-encoding:blob``) in both directions, every file version.

pylance's blob tables (2.0 and 2.1: descriptions with the bytes in the data
file; 2.2: blob v2, inline, packed and dedicated sidecar files) are read by
Tessera with the same bytes as pylance's ``take_blobs``; Tessera's blob tables
are read by pylance 14 (``to_table``, ``take_blobs``) and by LanceDB 0.40 (its
own Lance core), whose descriptions are the same as pylance's.  The layout is
described in docs/reference/blob-layout.md.
"""

from __future__ import annotations

import datetime as dt
import io
import os

import numpy as np
import pyarrow as pa
import pytest

import tessera
from tessera import format as tformat
from tessera.format import errors as ferrors
from tessera.format.errors import UnsupportedEncodingError, UnsupportedTypeError

VERSIONS = ("2.0", "2.1", "2.2")
BLOB = {"lance-encoding:blob": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("img", pa.large_binary(), metadata=BLOB)])


def _values(n: int, seed: int = 1) -> list[bytes | None]:
    rng = np.random.default_rng(seed)
    out: list[bytes | None] = []
    for i in range(n):
        if i % 7 == 3:
            out.append(None)
        elif i % 11 == 5:
            out.append(b"")
        else:
            out.append(bytes(rng.integers(0, 256, int(rng.integers(1, 3000)), dtype=np.uint8)))
    return out


VALUES = _values(60)
DATA = pa.table({"id": np.arange(60), "img": pa.array(VALUES, pa.large_binary())}, schema=SCHEMA)


def _blob_bytes(files) -> list[bytes | None]:
    return [None if f is None else f.read() for f in files]


# ----------------------------------------------------------------------------- pylance -> Tessera


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_blob_tables_read_with_the_same_bytes(tmp_path, lance, version):
    uri = str(tmp_path / "t")
    ds = lance.write_dataset(DATA, uri, data_storage_version=version, max_rows_per_file=25)
    want = _blob_bytes(ds.take_blobs("img", indices=list(range(60))))
    assert want == VALUES  # pylance's own view of what it wrote
    t = tessera.Table.open(uri)
    assert t.schema.field("img").type == pa.large_binary()
    assert t.to_arrow().column("img").to_pylist() == VALUES
    assert t.to_arrow(columns=["img"], filter="id >= 40").column("img").to_pylist() == VALUES[40:]
    idx = [59, 3, 0, 26, 5]
    assert t.take(idx, columns=["img"]).column("img").to_pylist() == [VALUES[i] for i in idx]
    assert _blob_bytes(t.take_blobs("img", idx)) == [VALUES[i] for i in idx]
    # pylance's default read gives descriptions; its "all_binary" read the same bytes as Tessera
    assert lance.dataset(uri).to_table(blob_handling="all_binary").column("img").to_pylist() == VALUES


def test_pylance_blob_v2_sidecars_read_with_the_same_bytes(tmp_path, lance):
    """pylance 14's 2.2 blob v2: small values inline, larger ones packed into
    one sidecar file, the largest in sidecars of their own."""
    values = [b"a" * 10, b"b" * 70_000, bytes(range(256)) * 20_000, None, lance.Blob.empty(), b"d" * 90_000]
    uri = str(tmp_path / "v2")
    schema = pa.schema([pa.field("id", pa.int64()), lance.blob_field("img")])
    ds = lance.write_dataset(
        pa.table({"id": np.arange(6), "img": lance.blob_array(values)}, schema=schema), uri, data_storage_version="2.2"
    )
    kinds = ds.to_table(blob_handling="all_descriptions").column("img").combine_chunks().field("kind").to_pylist()
    assert {0, 1, 2} <= set(k for k in kinds if k is not None)  # inline, packed and dedicated
    sidecars = [n for _, _, files in os.walk(os.path.join(uri, "data")) for n in files if n.endswith(".blob")]
    assert len(sidecars) == 2
    want = [v if not isinstance(v, lance.Blob) else b"" for v in values]
    t = tessera.Table.open(uri)
    assert t.to_arrow().column("img").to_pylist() == want
    assert t.take([5, 1], columns=["img"]).column("img").to_pylist() == [want[5], want[1]]
    files = t.take_blobs("img", [2, 3, 4])
    assert files[1] is None and files[2].size() == 0 and files[0].size() == len(want[2])
    files[0].seek(-5, io.SEEK_END)
    assert files[0].read() == want[2][-5:]
    assert files[0].read_range(1000, 4) == want[2][1000:1004]
    # Tessera's clean-up of orphans keeps the sidecars of live data files
    assert t.cleanup_orphans(older_than=dt.timedelta(0), dry_run=True).removed == []


def test_tessera_writes_into_blob_v2_tables_of_lancedb(tmp_path, lance):
    """LanceDB 0.40 makes blob columns blob v2 (format 2.2); Tessera appends,
    updates and compacts such a table (its values inline in the data file),
    and pylance and LanceDB read the same bytes."""
    import lancedb

    db = lancedb.connect(str(tmp_path))
    first = _values(40, seed=3) + [b"z" * 100_000]  # one value large enough for a sidecar
    db.create_table("t", pa.table({"id": np.arange(41), "img": pa.array(first, pa.large_binary())}, schema=SCHEMA))
    uri = str(tmp_path / "t.lance")
    assert tessera.Table.open(uri).manifest.fields[1].extension_name == "lance.blob.v2"
    t = tessera.Table.open(uri)
    more = _values(30, seed=4)
    t.append(pa.table({"id": np.arange(41, 71), "img": pa.array(more, pa.large_binary())}, schema=SCHEMA))
    t.update({"id": "id + 1000"}, where="id = 7")
    want = dict(enumerate(first + more))
    want[1007] = want.pop(7)
    for step in ("after append and update", "after compaction"):
        ds = lance.dataset(uri)
        got = ds.to_table(blob_handling="all_binary")
        assert dict(zip(got.column("id").to_pylist(), got.column("img").to_pylist())) == want, step
        ids = ds.to_table(columns=["id"], with_row_id=True)
        files = ds.take_blobs("img", ids=ids.column("_rowid").to_pylist())
        assert dict(zip(ids.column("id").to_pylist(), _blob_bytes(files))) == want, step
        assert db.open_table("t").count_rows() == 71, step
        mine = tessera.Table.open(uri).to_arrow()
        assert dict(zip(mine.column("id").to_pylist(), mine.column("img").to_pylist())) == want, step
        t.compact()


def test_external_blobs_are_refused_by_name(tmp_path, lance):
    target = tmp_path / "outside.bin"
    target.write_bytes(b"0123456789")
    uri = str(tmp_path / "ext")
    schema = pa.schema([pa.field("id", pa.int64()), lance.blob_field("img")])
    data = pa.table({"id": [0, 1], "img": lance.blob_array([b"in", f"file://{target}"])}, schema=schema)
    try:
        lance.write_dataset(data, uri, data_storage_version="2.2", allow_external_blob_outside_bases=True)
    except TypeError:  # a pylance without the option
        lance.write_dataset(data, uri, data_storage_version="2.2")
    t = tessera.Table.open(uri)
    assert t.take([0], columns=["img"]).column("img").to_pylist() == [b"in"]
    with pytest.raises(UnsupportedEncodingError, match=r"'img'.*row 1.*external"):
        t.take_blobs("img", [1])
    with pytest.raises(UnsupportedEncodingError, match=r"'img'.*external"):
        t.to_arrow()


# ----------------------------------------------------------------------------- Tessera -> pylance, LanceDB


@pytest.mark.parametrize("version", VERSIONS)
def test_tessera_blob_tables_read_by_pylance_and_lancedb(tmp_path, lance, version):
    import lancedb

    name = f"t{version.replace('.', '')}"
    uri = str(tmp_path / f"{name}.lance")
    t = tessera.Table.create(uri, DATA, file_version=version, max_rows_per_file=25)
    t.append(pa.table({"id": [60, 61], "img": pa.array([b"late", None], pa.large_binary())}, schema=SCHEMA))
    want = VALUES + [b"late", None]
    ds = lance.dataset(uri)
    assert ds.to_table(blob_handling="all_binary").column("img").to_pylist() == want
    assert _blob_bytes(ds.take_blobs("img", indices=list(range(62)))) == want
    row_ids = ds.to_table(columns=[], with_row_id=True).column("_rowid").to_pylist()
    assert _blob_bytes(ds.take_blobs("img", ids=row_ids[55:62])) == want[55:62]
    # pylance's default read: the descriptions (a null is (1, 0) in 2.0, a null description in 2.1+)
    desc = ds.to_table().column("img").combine_chunks()
    assert desc.type == pa.struct([("position", pa.uint64()), ("size", pa.uint64())])
    sizes = [None if d is None else d["size"] for d in desc.to_pylist()]
    assert sizes == [(0 if version == "2.0" else None) if v is None else len(v) for v in want]
    # LanceDB 0.40 (its own Lance 13 core) reads the table: the same descriptions as pylance
    got = lancedb.connect(str(tmp_path)).open_table(name).to_arrow()
    assert got.column("id").to_pylist() == list(range(62))
    assert got.column("img").to_pylist() == desc.to_pylist()
    # and Tessera reads back its own bytes, after changes that rewrite rows
    t.delete("id < 3")
    t.update({"id": "id + 1000"}, where="id = 10")
    t.compact()
    back = {r["id"]: r["img"] for r in tessera.Table.open(uri).to_arrow().to_pylist()}
    pl = {r["id"]: r["img"] for r in lance.dataset(uri).to_table(blob_handling="all_binary").to_pylist()}
    assert back == pl and back[1010] == want[10] and len(back) == 59


def test_file_level_round_trip_and_pylance_file_reader(tmp_path):
    """A blob column written by FileWriter reads back through FileReader
    (range, take, take_blobs), in every version; pylance's file reader reads
    the bytes too."""
    from lance.file import LanceFileReader

    for version in VERSIONS:
        path = str(tmp_path / f"f{version}.lance")
        tformat.write_file(path, DATA, file_version=version, page_size=4096)
        with tformat.FileReader(path) as r:
            assert r.read().column("img").to_pylist() == VALUES
            assert r.read_range(10, 30, ["img"]).column("img").to_pylist() == VALUES[10:30]
            assert r.take([44, 2, 44], ["img"]).column("img").to_pylist() == [VALUES[44], VALUES[2], VALUES[44]]
            files = r.take_blobs("img", [1, 3, 5])
            assert [None if f is None else f.read() for f in files] == [VALUES[1], VALUES[3], VALUES[5]]
            with pytest.raises(ferrors.NotABlobColumnError):
                r.take_blobs("id", [0])
        got = LanceFileReader(path).read_all().to_table()
        assert got.column("img").to_pylist() == VALUES, version


def test_blob_file_is_a_seekable_binary_file(tmp_path):
    uri = str(tmp_path / "t")
    t = tessera.Table.create(uri, DATA, file_version="2.1")
    i = next(k for k, v in enumerate(VALUES) if v is not None and len(v) > 100)
    (f,) = t.take_blobs("img", [i])
    v = VALUES[i]
    assert isinstance(f, io.RawIOBase) and f.readable() and f.seekable() and not f.writable()
    assert f.size() == len(v) and f.read(10) == v[:10] and f.tell() == 10
    buf = bytearray(7)
    assert f.readinto(buf) == 7 and bytes(buf) == v[10:17]
    assert f.seek(-3, io.SEEK_END) == len(v) - 3 and f.read() == v[-3:] and f.read() == b""
    assert f.read_range(5, 10**9) == v[5:] and f.tell() == len(v)
    assert f.read_ranges([(0, 3), (len(v), 4), (2, 2)]) == [v[:3], b"", v[2:4]]
    assert io.BufferedReader(f).read() == b""  # a standard wrapper works (at the end already)
    f.close()
    with pytest.raises(ValueError):
        f.read()
    with pytest.raises(ferrors.NotABlobColumnError):
        t.take_blobs("id", [0])
    with pytest.raises(tessera.errors.InvalidArgumentError):
        t.take_blobs("img", [0], addresses=[0])


def test_blob_columns_that_cannot_be_written_are_refused(tmp_path):
    """A blob column must be a top-level large_binary column (as pylance
    requires); anything else is refused by name, nothing written."""
    small = pa.schema([pa.field("img", pa.binary(), metadata=BLOB)])
    with pytest.raises(UnsupportedTypeError, match="'img'.*large_binary"):
        tessera.Table.create(str(tmp_path / "a"), pa.table({"img": [b"x"]}, schema=small))
    nested = pa.schema([pa.field("s", pa.struct([pa.field("img", pa.large_binary(), metadata=BLOB)]))])
    with pytest.raises(UnsupportedEncodingError, match="'s'"):
        tessera.Table.create(str(tmp_path / "b"), pa.table({"s": [{"img": b"x"}]}, schema=nested))
    for d in ("a", "b"):
        assert not os.path.exists(tmp_path / d / "_versions") or not os.listdir(tmp_path / d / "_versions")
