"""Every cell of the type matrix, both directions, against pylance 14.

Tessera writes -> pylance reads equal; pylance writes -> Tessera reads equal;
plus row ranges and take on multi-page files.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
import tessera_test_matrix as matrix

from tessera import format as tformat
from tessera.format.file.checksum import BLOCK_SIZE, checksums

CELLS = matrix.cells()
CASES = [(name, v) for name, (_, versions) in CELLS.items() for v in versions]


def _pylance_write(lance, path, table, version, **kw):
    with lance.file.LanceFileWriter(str(path), table.schema, version=version, **kw) as w:
        if table.num_rows:
            w.write_batch(table)


@pytest.mark.parametrize("name,version", CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_tessera_writes_pylance_reads(lance, tmp_path, name, version):
    table = CELLS[name][0]
    path = tmp_path / "t.lance"
    tformat.write_file(path, table, file_version=version)
    got = lance.file.LanceFileReader(str(path)).read_all().to_table()
    assert got.schema.equals(table.schema)
    assert got.equals(table)
    # and Tessera reads its own file back
    assert tformat.read_file(path).equals(table)


@pytest.mark.parametrize("name,version", CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_pylance_writes_tessera_reads(lance, tmp_path, name, version):
    table = CELLS[name][0]
    path = tmp_path / "p.lance"
    _pylance_write(lance, path, table, version)
    got = tformat.read_file(path)
    assert got.schema.equals(table.schema)
    assert got.equals(table)


@pytest.mark.parametrize("version", matrix.ALL)
def test_multi_page_both_ways(lance, tmp_path, version):
    table = matrix.multi_page_table(120_000)
    ours, theirs = tmp_path / "ours.lance", tmp_path / "theirs.lance"
    with tformat.FileWriter(ours, table.schema, file_version=version, page_size=64 * 1024) as w:
        for batch in table.to_batches(max_chunksize=5000):
            w.write_batch(batch)
    _pylance_write(lance, theirs, table, version, max_page_bytes=64 * 1024)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, table.num_rows, 300)
    for path in (ours, theirs):
        reader = tformat.FileReader(path)
        pages = [len(reader._container.column(i).pages) for i in range(reader._container.num_columns)]
        assert max(pages) > 3, pages  # really multi-page
        assert reader.read().equals(table)
        assert reader.read_range(33_333, 77_777).equals(table.slice(33_333, 77_777 - 33_333))
        assert reader.take(idx).equals(table.take(idx))
        assert reader.read(columns=["s", "i"]).equals(table.select(["s", "i"]))
    assert lance.file.LanceFileReader(str(ours)).read_all().to_table().equals(table)
    srt = np.unique(idx)  # pylance's file API takes sorted indices
    assert lance.file.LanceFileReader(str(ours)).take_rows(srt.tolist()).to_table().equals(table.take(srt))


@pytest.mark.parametrize("version", matrix.ALL)
def test_streaming_writer_bounds_pages(tmp_path, version):
    """A reader of batches is written page by page: pages appear before close."""
    table = matrix.multi_page_table(60_000).select(["i", "f"])
    path = tmp_path / "s.lance"
    w = tformat.FileWriter(path, table.schema, file_version=version, page_size=32 * 1024)
    for batch in table.to_batches(max_chunksize=4000):
        w.write_batch(batch)
    written_before_close = os.path.getsize(path) if os.path.exists(path) else 0
    w.close()
    assert written_before_close > table.nbytes // 2  # data already streamed out
    assert tformat.read_file(path).equals(table)


@pytest.mark.parametrize("mode", ["write", "verify"])
def test_take_touches_only_needed_pages(tmp_path, mode):
    """A take reads the two pages holding its rows; verifying checksums widens
    each read to the 64 KiB checksum blocks around it, never to the file."""
    table = pa.table({"i": np.arange(100_000, dtype=np.int64)})
    path = tmp_path / "t.lance"
    tformat.write_file(path, table, file_version="2.0", page_size=8 * 1024)
    with checksums(mode):
        reader = tformat.FileReader(path)
        seen: list[tuple[int, int]] = []
        inner = reader.io.read_ranges

        def spy(ranges):
            seen.extend(ranges)
            return inner(ranges)

        reader.io.read_ranges = spy  # type: ignore[method-assign]
        got = reader.take([5, 99_999])
    assert got.column(0).to_pylist() == [5, 99_999]
    limit = 2 * 8 * 1024 + 64 if mode == "write" else 2 * BLOCK_SIZE
    assert sum(n for _, n in seen) <= limit  # two pages (blocks), not the file of 800 kB
