"""Scans prune with pylance's ZONEMAP index: a 1% range filter on the sort key
reads at most 2 of 20 fragments, and pruning never changes an answer."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table

N, FRAGS = 200_000, 20


@pytest.fixture
def indexed(lance, tmp_path):
    rng = np.random.default_rng(5)
    key = np.arange(N, dtype=np.int64)
    f = rng.normal(size=N)
    f[::97] = np.nan
    data = pa.table(
        {
            "key": key,
            "f": f,
            "s": pa.array([f"v{k:07d}" for k in key]),
            "opt": pa.array([None if k % 11 == 0 else int(k) for k in key], pa.int64()),
        }
    )
    uri = str(tmp_path / "t")
    Table.create(uri, data, max_rows_per_file=N // FRAGS)  # written by Tessera
    ds = lance.dataset(uri)
    for col in ("key", "f", "s", "opt"):
        ds.create_scalar_index(col, "ZONEMAP")  # indexed by pylance
    return uri, data, lance


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal rows (NaN equal to NaN), in key order."""
    return a.sort_by("key").to_pandas().equals(b.sort_by("key").to_pandas())


def _check(t: Table, data: pa.Table, where: str, lance, uri: str) -> dict:
    scan = t.scanner(filter=where)
    got = scan.to_table()
    unpruned = t.scanner(filter=where)
    unpruned.row_ranges = None
    assert _same(got, unpruned.to_table()), where  # pruning never changes the answer
    if "f " not in where:  # pylance orders NaN above every number (see the note), Tessera as IEEE does
        assert _same(got, lance.dataset(uri).to_table(filter=where)), where
    return scan.stats


def test_a_one_percent_key_range_reads_two_fragments(lance, tmp_path):
    n = 2_000_000
    key = np.arange(n, dtype=np.int64)
    data = pa.table({"key": key, "v": np.random.default_rng(1).random(n)})
    uri = str(tmp_path / "big")
    Table.create(uri, data, max_rows_per_file=n // FRAGS)
    lance.dataset(uri).create_scalar_index("key", "ZONEMAP")
    t = Table.open(uri)
    full = t.scanner()
    full.to_table()
    lo = n // 2 + 12_345
    where = f"key >= {lo} AND key < {lo + n // 100}"
    scan = t.scanner(filter=where)
    got = scan.to_table()
    assert got.column("key").to_pylist() == list(range(lo, lo + n // 100))
    assert scan.stats["fragments"] <= 2 and scan.stats["pruned_fragments"] >= FRAGS - 2, scan.stats
    assert scan.stats["bytes_read"] <= 0.03 * full.stats["bytes_read"], (scan.stats, full.stats)


@pytest.mark.parametrize(
    "where",
    [
        "key = 777",
        "key IN (5, 150000, 199999)",
        "key BETWEEN 1000 AND 1200 AND f > 0",
        "f > 2.5",  # NaN zones are never pruned
        "s >= 'v0150000' AND s < 'v0150100'",
        "opt < 50",
        "opt = 22",  # a NULL row: no match, nothing wrong
        "key > 10 OR key < 5",  # OR: no pruning, same answer
        "key < 0",
        "key >= 199990 AND opt > 199995",
    ],
)
def test_pruning_never_changes_an_answer(indexed, where):
    uri, data, lance = indexed
    _check(Table.open(uri), data, where, lance, uri)


def test_deletes_and_unindexed_appends_stay_right(indexed):
    uri, data, lance = indexed
    t = Table.open(uri)
    t.delete("key >= 100100 AND key < 100200")
    extra = pa.table(
        {
            "key": pa.array([100150, 300000], pa.int64()),
            "f": [0.5, 1.5],
            "s": ["x", "y"],
            "opt": pa.array([1, None], pa.int64()),
        }
    )
    t.append(extra)  # not covered by the index: read whole
    stats = _check(t, data, "key >= 100100 AND key < 100200", lance, uri)
    assert t.to_arrow(filter="key >= 100100 AND key < 100200").column("key").to_pylist() == [100150]
    assert stats["fragments"] <= 2, stats  # the pruned-to fragment and the new one
