"""A table object keeps its data files open between its reads
(format/table/file_cache.py): a held table scanned again (or taken from) opens
no file, its statistics still count what it reads, and the process's
descriptors and mappings stay within budgets whatever number of tables it
holds."""

from __future__ import annotations

import gc
import os

import numpy as np
import pyarrow as pa
import pytest

import tessera.format.table.file_cache as file_cache
import tessera.format.table.fragments as fragments
from tessera.catalog import Table


def _table(path, files: int = 4, rows: int = 400) -> str:
    data = pa.table({"k": np.arange(files * rows, dtype=np.int64), "v": np.arange(files * rows) * 0.5})
    Table.create(str(path), data, max_rows_per_file=rows)
    return str(path)


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Every data file opened from now on."""
    seen: list[str] = []
    real = file_cache.open_data_file

    def counted(store, p, size=0):
        seen.append(p)
        return real(store, p, size)

    monkeypatch.setattr(file_cache, "open_data_file", counted)  # through a table's cache
    monkeypatch.setattr(fragments, "open_data_file", counted)  # and without
    return seen


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_held_table_scanned_again_opens_no_file_and_still_counts_its_bytes(tmp_path, opened):
    t = Table.open(_table(tmp_path / "t", rows=20_000))  # files past the 64 KiB read with their tail
    want = t.to_arrow()  # read once: nothing kept (a table scanned once keeps nothing alive)
    assert len(opened) == 4 and len(t.snapshot.files) == 0
    t.to_arrow()  # read again: kept
    assert len(opened) == 8 and len(t.snapshot.files) == 4
    for make in (lambda: t.scanner(), lambda: t.scanner(columns=["v"], filter="k >= 10")):
        opened.clear()
        scan = make()
        got = scan.to_table()
        assert scan.stats["bytes_read"] > 0 and scan.stats["reads"] > 0
        assert got.num_rows == (want.num_rows if got.num_columns == 2 else want.num_rows - 10)
        assert opened == []
    assert t.to_arrow().equals(want)


def test_a_scan_of_more_files_than_the_cache_holds_does_not_cycle_through_it(tmp_path, opened):
    t = Table.open(_table(tmp_path / "t", files=6))
    t.snapshot.files.max_files = 4
    want = t.to_arrow()
    opened.clear()
    assert t.to_arrow().equals(want)
    assert len(opened) == 6 and len(t.snapshot.files) == 0


def test_deletes_in_a_row_open_each_data_file_twice_at_most(tmp_path, opened):
    t = Table.open(_table(tmp_path / "t"))
    t.delete("k = 5")
    t.delete("k = 900")
    assert len(opened) == 8  # read twice: kept from the second delete on
    t.delete("k = 1500")
    t.delete("k = 1501")
    assert len(opened) == 8  # deletes write no data file: the next ones open none
    assert t.count_rows() == 1596
    assert sorted(set(range(1600)) - set(t.to_arrow().column("k").to_pylist())) == [5, 900, 1500, 1501]


def test_the_process_keeps_within_its_budgets_whatever_the_tables_it_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(file_cache, "PROCESS_MAX_FILES", 10)
    monkeypatch.setattr(file_cache, "PROCESS_MAX_DESCRIPTORS", 3)
    paths = [_table(tmp_path / f"t{i}") for i in range(5)]
    base = _fds()
    tables = [Table.open(p) for p in paths]
    wants = [t.to_arrow() for t in tables]
    for _ in range(2):
        for t, want in zip(tables, wants, strict=True):
            assert t.to_arrow().equals(want)  # files given back or dropped still read right
            assert t.take([0, 1000, 1599]).equals(want.take([0, 1000, 1599]))
            kept = [len(x.snapshot.files) for x in tables]
            held = [x.snapshot.files.descriptors() for x in tables]
            assert sum(kept) <= 10 and sum(held) <= 3, (kept, held)
            assert _fds() - base <= 3 + 2  # the budget, and a manifest or two being read
    assert len(file_cache._kept) <= 10 and len(file_cache._holding) <= 3


def test_a_table_object_let_go_leaves_the_process_bookkeeping(tmp_path):
    t = Table.open(_table(tmp_path / "t"))
    t.to_arrow()
    t.to_arrow()
    mine = {k for k in file_cache._kept if k[0] == t.snapshot.files._token}
    assert len(mine) == 4
    del t
    gc.collect()
    assert not mine & set(file_cache._kept)
