"""Readers of the same unchanged data file share what its tail says (footer,
schema, column metadata, page lists with their planning metadata), parsed once
per process; a file changed in place is parsed again, never decoded with what
was parsed of its earlier bytes."""

from __future__ import annotations

import os
import threading

import numpy as np
import pyarrow as pa
import pytest

from tessera.format.file import datafile as ffile
from tessera.format.file.checksum import checksums
from tessera.format.file.datafile import FileReader, clear_parsed_cache, write_file


@pytest.fixture(autouse=True)
def _cold():
    clear_parsed_cache()
    yield
    clear_parsed_cache()


def test_readers_of_one_file_share_its_parsed_tail_and_pages(tmp_path):
    path = tmp_path / "f.lance"
    data = pa.table({"a": np.arange(10_000, dtype=np.int64), "s": pa.array(["x", "yy"] * 5_000)})
    write_file(path, data)
    r1 = FileReader(path)
    assert r1.read().equals(data)
    r2 = FileReader(path)
    assert r2._container.parsed is r1._container.parsed
    assert r2.schema is r1.schema
    assert r2.read_range(100, 200).equals(data.slice(100, 100))
    d1, d2 = r1._decoder(0), r2._decoder(0)
    assert d1.leaves[0].pages is d2.leaves[0].pages  # page lists (and their chunk tables) decoded once
    clear_parsed_cache()
    assert FileReader(path)._container.parsed is not r1._container.parsed


def _rewrite_in_place(path, data: bytes) -> None:
    """New bytes in the same inode, with the old modification time put back."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_ino == st.st_ino


def test_a_parsed_tail_keeps_pages_not_the_column_metadata_they_came_from(tmp_path):
    """A parsed tail lives in the process cache: once a column's pages are
    built, its ColumnMetadata message is let go (one object fewer per column
    for the garbage collector to walk); a later reader still reads it."""
    path = tmp_path / "f.lance"
    data = pa.table({"a": np.arange(1_000, dtype=np.int64), "b": np.arange(1_000, dtype=np.float64)})
    write_file(path, data)
    r = FileReader(path)
    assert r.read(columns=["a"]).equals(data.select(["a"]))
    parsed = r._container.parsed
    assert 0 in parsed.pages and 0 not in parsed.columns
    assert FileReader(path).read().equals(data)
    assert set(parsed.pages) == {0, 1} and not parsed.columns


def test_a_file_changed_in_place_is_parsed_again(tmp_path):
    """Same path, inode, size and modification time, other bytes: the tail
    read back differs, so nothing parsed before is used."""
    a, b = tmp_path / "a.lance", tmp_path / "b.lance"
    write_file(a, pa.table({"aa": np.arange(5_000, dtype=np.int64)}))
    write_file(b, pa.table({"bb": np.arange(5_000, dtype=np.int64)}))  # a schema of the same size
    assert a.stat().st_size == b.stat().st_size
    assert FileReader(a).read().column_names == ["aa"]
    _rewrite_in_place(a, b.read_bytes())
    got = FileReader(a).read()
    assert got.column_names == ["bb"] and got.column(0).to_pylist()[:3] == [0, 1, 2]


@pytest.mark.parametrize("mode", ["off", "verify"])
def test_a_file_whose_tail_is_unchanged_keeps_its_parse_and_reads_its_new_data(tmp_path, mode):
    """Other values with the same layout (only page data changed): without
    checksums (pylance's files) the tails are equal, the parse is reused, and
    the rows are read from the file as it is now.  With checksums the tail
    holds the pages' CRCs, so it differs: a new parse, and the new rows."""
    a, b = tmp_path / "a.lance", tmp_path / "b.lance"
    v = np.random.default_rng(1).random(100_000)  # 800 KB of floats: the first ones lie far from the tail
    w = v.copy()
    w[:10] = np.arange(10)
    with checksums(mode):
        write_file(a, pa.table({"v": v}))
        write_file(b, pa.table({"v": w}))
        same_tail = a.read_bytes()[-(1 << 16) :] == b.read_bytes()[-(1 << 16) :]
        assert same_tail == (mode == "off") and a.read_bytes() != b.read_bytes()
        first = FileReader(a)
        assert first.read().column(0).to_numpy()[:2].tolist() == v[:2].tolist()
        _rewrite_in_place(a, b.read_bytes())
        again = FileReader(a)
        assert (again._container.parsed is first._container.parsed) == same_tail
        assert again.read().column(0).to_numpy()[:12].tolist() == w[:12].tolist()


def test_threads_reading_a_file_they_share_get_every_row(lance, tmp_path):
    """A pylance file (planning metadata away from the tail: loaded by the
    first reader of each page, under the file's lock) read by 8 threads,
    each with its own reader, all at once."""
    n = 200_000
    data = pa.table(
        {"k": np.arange(n, dtype=np.int64), "s": pa.array(np.char.add("v", (np.arange(n) % 97).astype(str)))}
    )
    from lance.file import LanceFileWriter

    path = str(tmp_path / "p.lance")
    with LanceFileWriter(path, data.schema) as w:
        w.write_batch(data)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(i: int) -> None:
        try:
            start.wait()
            r = FileReader(path)
            lo = i * 20_000
            got = r.read_range(lo, lo + 30_000)
            assert got.equals(data.slice(lo, 30_000)), i
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(ffile._PARSED) == 1


def test_the_cache_holds_a_bounded_number_of_files(tmp_path, monkeypatch):
    monkeypatch.setattr(ffile, "PARSED_CACHE_FILES", 3)
    for i in range(5):
        p = tmp_path / f"{i}.lance"
        write_file(p, pa.table({"v": [i]}))
        assert FileReader(p).read().column(0).to_pylist() == [i]
    assert len(ffile._PARSED) == 3
    assert [k[1] for k in ffile._PARSED] == [str(tmp_path / f"{i}.lance") for i in (2, 3, 4)]


def test_in_memory_readers_share_nothing():
    raw = pa.BufferOutputStream()
    write_file(raw, pa.table({"v": [1, 2]}))
    FileReader(raw.getvalue().to_pybytes())
    assert len(ffile._PARSED) == 0


def test_the_cache_holds_a_bounded_number_of_tail_bytes(tmp_path, monkeypatch):
    sizes = []
    for i in range(4):
        p = tmp_path / f"{i}.lance"
        write_file(p, pa.table({"v": np.arange(1_000 * (i + 1))}))
        sizes.append(FileReader(p)._container.parsed.tail.size)
    clear_parsed_cache()
    monkeypatch.setattr(ffile, "PARSED_CACHE_BYTES", sizes[2] + sizes[3])
    for i in range(4):
        FileReader(tmp_path / f"{i}.lance")
    assert [k[1] for k in ffile._PARSED] == [str(tmp_path / f"{i}.lance") for i in (2, 3)]


def test_a_forked_child_starts_with_nothing_parsed(tmp_path):
    import multiprocessing

    p = tmp_path / "f.lance"
    write_file(p, pa.table({"v": [1, 2, 3]}))
    FileReader(p)
    assert len(ffile._PARSED) == 1
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    child = ctx.Process(target=_report_cache, args=(q, str(p)))
    child.start()
    child.join(30)
    assert q.get(timeout=5) == (0, [1, 2, 3])


def _report_cache(q, path: str) -> None:
    n = len(ffile._PARSED)
    q.put((n, FileReader(path).read().column(0).to_pylist()))
