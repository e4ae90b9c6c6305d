"""Takes on an open table: data files stay open between takes (their parsed
metadata reused, mapped on reuse), and every take - first, repeated, cold on a
new table object - returns what pylance and a full read return."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.format.table.fragments import FileReaderCache, FragmentReader


def _batches(n: int):
    rng = np.random.default_rng(9)
    i = np.arange(n, dtype=np.int64)
    return pa.table(
        {
            "i": i,
            "f": rng.standard_normal(n),
            "s": pa.array(np.char.add("row-", (i % 100_000).astype("U6"))),
            "key": rng.integers(0, 1 << 40, n),
            "maybe": pa.array([None if x % 5 == 0 else f"m{x}" for x in range(n)]),
        }
    )


@pytest.fixture(scope="module")
def table_path(lance, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("reuse") / "t")
    lance.write_dataset(_batches(60_000), path, enable_stable_row_ids=True, max_rows_per_file=20_000)
    lance.dataset(path).delete("i % 13 = 0")
    return path


def _expected(full: pa.Table, ids: np.ndarray, live_ids: np.ndarray) -> pa.Table:
    pos = {int(r): k for k, r in enumerate(live_ids)}
    return full.take(pa.array([pos[int(r)] for r in ids if int(r) in pos], pa.int64()))


def test_repeated_takes_match_pylance_and_a_full_read(lance, table_path):
    t = Table.open(table_path)
    full = t.to_arrow()
    live = t.to_arrow(columns=["_rowid"]).column("_rowid").to_numpy()
    ds = lance.dataset(table_path)
    rng = np.random.default_rng(4)
    sparse = rng.choice(live, 300, replace=False)
    unsorted_repeats = np.concatenate([sparse[::-1], sparse[:20], live[[0, -1]]])
    dense = live[5_000:9_000]  # one fragment read as slices
    with_missing = np.concatenate([sparse[:50], np.array([13, 26, 10**9], np.uint64)])  # deleted, unknown
    for ids in (sparse, unsorted_repeats, dense, with_missing, sparse):  # sparse again: all files reused
        got = t.take_rows(ids)
        assert got.equals(_expected(full, ids, live))
        theirs = ds._take_rows(ids.tolist())
        assert got.equals(theirs.select(got.schema.names)), "differs from pylance"
    cache = t.snapshot.files
    assert len(cache) == len(t.fragments)
    # files read again were mapped; the readers are the cache's own
    for f in t.fragments:
        r = cache.get(f.files[0].path)
        assert r.io.whole_buffer() is not None
    # a new table object starts cold and agrees
    assert Table.open(table_path).take_rows(sparse).equals(t.take_rows(sparse))


def test_columns_subsets_duplicates_and_row_columns(table_path):
    t = Table.open(table_path)
    live = t.to_arrow(columns=["_rowid"]).column("_rowid").to_numpy()
    ids = np.random.default_rng(2).choice(live, 100, replace=False)
    full = t.to_arrow(columns=["maybe", "i", "_rowid", "_rowaddr"])
    expected = _expected(full, ids, live)
    for _ in range(2):
        got = t.take_rows(ids, columns=["maybe", "i", "_rowid", "_rowaddr"])
        assert got.equals(expected)
        twice = t.take_rows(ids, columns=["i", "i", "_rowid"])
        assert twice.column(0).equals(expected.column("i")) and twice.column(1).equals(expected.column("i"))
        only_ids = t.take_rows(ids, columns=["_rowid"])
        assert only_ids.column(0).to_pylist() == [int(x) for x in ids]


def test_positional_take_reuses_files(table_path):
    t = Table.open(table_path)
    full = t.to_arrow()
    idx = np.random.default_rng(8).integers(0, full.num_rows, 200)
    for _ in range(3):
        assert t.take(idx).equals(full.take(pa.array(idx)))


def test_cache_bounds_open_files_and_fragment_reader_leaves_them_open(table_path):
    t = Table.open(table_path)
    cache = FileReaderCache(t.store, max_files=1)
    fields = t.snapshot.fields
    frags = t.fragments
    rows = np.array([1, 7, 500])
    first = FragmentReader(t.store, frags[0], fields, file_cache=cache)
    a = first.take(rows)
    first.close()
    r0 = cache.get(frags[0].files[0].path)
    assert r0.io.whole_buffer() is not None  # reused: mapped, still open
    second = FragmentReader(t.store, frags[1], fields, file_cache=cache)
    second.take(rows)
    second.close()
    assert len(cache) == 1  # the first file was dropped (not closed under a user)
    plain = FragmentReader(t.store, frags[0], fields)
    try:
        assert all(x.equals(y) for x, y in zip(plain.take(rows), a))
    finally:
        plain.close()
    cache.close()
    assert len(cache) == 0


def test_table_close_releases_the_files_takes_keep_open(table_path):
    t = Table.open(table_path)
    want = t.take([0, 3])
    cache = t.snapshot.files
    assert len(cache) > 0
    t.close()
    assert len(cache) == 0
    assert t.take([0, 3]).equals(want)  # a closed table's next take opens its files again


def test_takes_cycling_over_more_files_than_descriptors_open_each_file_once(tmp_path, monkeypatch):
    """A take touching more files than the descriptor budget: every file stays
    cached (mapped), so the next takes open none, and at most the budget holds
    a descriptor.  An LRU of the budget's size would reopen every file on every
    take (cycling through more files than it holds, it never hits)."""
    import tessera.format.table.file_cache as file_cache

    n = 12
    path = str(tmp_path / "t")
    Table.create(path, _batches(n * 100), max_rows_per_file=100)
    t = Table.open(path)
    cache = FileReaderCache(t.store, max_descriptors=4)
    t._snap = dataclasses.replace(t._snap, files=cache)
    full = Table.open(path).to_arrow()  # another table object: its own cache
    opened: list[str] = []
    real = file_cache.open_data_file
    monkeypatch.setattr(file_cache, "open_data_file", lambda store, p, size=0: opened.append(p) or real(store, p, size))
    idx = np.arange(5, n * 100, 100)  # one row in each fragment
    for k in range(3):
        assert t.take(idx).equals(full.take(pa.array(idx)))
        assert len(opened) == n, f"take {k + 1} opened files again"
        assert len(cache) == n and cache.descriptors() <= 4
    unmapped = [f for f in t.fragments if cache.get(f.files[0].path).io.whole_buffer() is None]
    assert len(unmapped) == 0  # every one read again since: mapped, no descriptor


def test_cache_keeps_at_most_max_files(tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, _batches(600), max_rows_per_file=100)
    t = Table.open(path)
    cache = FileReaderCache(t.store, max_files=4, max_descriptors=2)
    for f in t.fragments:
        cache.get(f.files[0].path)
        assert len(cache) <= 4 and cache.descriptors() <= 2
    assert len(cache) == 4
