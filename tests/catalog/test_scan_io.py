"""Scan I/O is independent of the batch size: small batches are slices of
larger reads, so they never fetch a page twice."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import tessera
from tessera.catalog import Table
from tessera.catalog.query.scan import READ_UNIT_ROWS


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    n = 300_000
    i = np.arange(n, dtype=np.int64)
    data = pa.table({"i": i, "s": pa.array([f"v{x % 977}" for x in range(n)]), "f": i * 0.5})
    return Table.create(str(tmp_path_factory.mktemp("scan") / "t"), data, max_rows_per_file=200_000)


@pytest.mark.parametrize("columns", [["i"], ["i", "s", "f"]])
def test_small_batches_read_no_more_than_the_default(table, columns):
    default = table.scanner(columns=columns)
    whole = default.to_table()
    small = table.scanner(columns=columns, batch_size=1000)
    batches = list(small.batches())
    assert max(b.num_rows for b in batches) == 1000
    assert pa.Table.from_batches(batches, schema=small.schema).equals(whole)
    assert small.stats["bytes_read"] <= default.stats["bytes_read"], (small.stats, default.stats)
    assert small.stats["reads"] <= default.stats["reads"], (small.stats, default.stats)


def test_limit_offset_and_filter_across_read_units(table):
    got = table.to_arrow(columns=["i"], filter="i % 7 = 0", offset=READ_UNIT_ROWS // 7 - 3, limit=10)
    first = (READ_UNIT_ROWS // 7 - 3) * 7
    assert got.column("i").to_pylist() == list(range(first, first + 70, 7))
    batches = list(table.scanner(columns=["i"], batch_size=999, offset=123_456, limit=5_000).batches())
    assert max(b.num_rows for b in batches) == 999
    assert pa.concat_tables([pa.Table.from_batches([b]) for b in batches]).column("i").to_pylist() == list(
        range(123_456, 128_456)
    )


def test_a_remote_scan_fetches_all_columns_of_a_read_in_one_request(moto_server, monkeypatch):
    """On S3 every column of a read comes in one (coalesced) request, not one per column."""
    import tessera.stores.s3_io as s3io

    bucket = moto_server.new_bucket()
    opts = moto_server.storage_options()
    n = 200_000
    i = np.arange(n, dtype=np.int64)
    data = pa.table({f"c{k}": i * (k + 1) for k in range(8)})
    t = Table.create(f"s3://{bucket}/t", data, storage_options=opts, max_rows_per_file=100_000)
    gets = {"n": 0}
    real = s3io.S3RangeReader._get

    def counted(self, a, b):
        gets["n"] += 1
        return real(self, a, b)

    monkeypatch.setattr(s3io.S3RangeReader, "_get", counted)
    scan = t.scanner()
    assert scan.to_table().equals(data)
    units = 2 * -(-100_000 // READ_UNIT_ROWS)  # 2 files, read units of 64Ki rows
    assert scan.stats["reads"] <= units + 4, scan.stats  # + the files' page metadata
    assert gets["n"] <= units + 4, gets  # 8 columns, yet about one GET per read
    one = t.scanner(columns=["c0"])
    one.to_table()
    assert one.stats["bytes_read"] < scan.stats["bytes_read"] / 6  # a projection reads its column only


@pytest.fixture
def slow_s3_table(moto_server, monkeypatch):
    """A 16-fragment table on moto S3 whose GETs take 10 ms more (as a real
    store's latency) and are counted, with the most in flight at once."""
    import threading
    import time

    import tessera.stores.s3_io as s3io

    bucket = moto_server.new_bucket()
    n = 320_000
    i = np.arange(n, dtype=np.int64)
    data = pa.table({"a": i, "b": i * 2})
    t = Table.create(f"s3://{bucket}/t", data, storage_options=moto_server.storage_options(), max_rows_per_file=20_000)
    gauge = {"gets": 0, "now": 0, "max": 0}
    lock = threading.Lock()
    real = s3io.S3RangeReader._get

    def slow(self, a, b):
        with lock:
            gauge["gets"] += 1
            gauge["now"] += 1
            gauge["max"] = max(gauge["max"], gauge["now"])
        try:
            time.sleep(0.01)
            return real(self, a, b)
        finally:
            with lock:
                gauge["now"] -= 1

    monkeypatch.setattr(s3io.S3RangeReader, "_get", slow)
    return t, data, gauge


def test_a_remote_scan_keeps_eight_gets_in_flight(slow_s3_table):
    import threading

    t, data, gauge = slow_s3_table
    assert t.to_arrow().equals(data)  # in order, every row once
    assert gauge["max"] >= 8, gauge
    gauge.update(gets=0, now=0, max=0)
    assert t.scanner(readahead=1).to_table().equals(data)
    assert gauge["max"] == 1, gauge
    # an early stop (limit) ends the workers; an error in a worker reaches the caller, typed
    assert t.head(5).column("a").to_pylist() == [0, 1, 2, 3, 4]
    assert t.to_arrow(filter="a >= 300000", limit=3).column("a").to_pylist() == [300000, 300001, 300002]
    assert not [th for th in threading.enumerate() if th.name.startswith("tessera-scan")]
    with pytest.raises(tessera.errors.InvalidArgumentError):
        t.scanner(readahead=0)


def test_an_error_in_a_read_ahead_fragment_is_raised_typed(slow_s3_table):
    t, _, _ = slow_s3_table
    victim = t.fragments[5].files[0].path
    t.store.delete(f"data/{victim}")
    with pytest.raises(tessera.errors.TesseraError):
        t.to_arrow()


def test_row_ranges_prune_fragments_and_rows(tmp_path):
    """A scan reads only the row ranges statistics allow (merged, clipped) and
    still applies its filter; row addresses stay right."""
    data = pa.table({"k": pa.array(np.arange(3000, dtype=np.int64))})
    t = Table.create(str(tmp_path / "t"), data, max_rows_per_file=1000)
    f0, f1, f2 = (f.id for f in t.fragments)
    plan = {f0: [], f1: [(10, 20), (15, 30), (990, 5000)], f2: None}
    scan = t.scanner(filter="k % 2 = 0", with_row_address=True)
    scan.row_ranges = lambda frag: plan[frag.id]
    got = scan.to_table()
    want = [k for k in range(1010, 1030) if k % 2 == 0] + [k for k in range(1990, 2000) if k % 2 == 0]
    want += [k for k in range(2000, 3000) if k % 2 == 0]
    assert got.column("k").to_pylist() == want
    addrs = [(f1 << 32) + (k - 1000) if k < 2000 else (f2 << 32) + (k - 2000) for k in want]
    assert got.column("_rowaddr").to_pylist() == addrs
    assert scan.stats["pruned_fragments"] == 1 and scan.stats["fragments"] == 2


@pytest.mark.parametrize("deleted", [[], [5_000], [0, 39_999]])
def test_a_filter_keeping_one_run_of_rows_answers_as_arrow(tmp_path, deleted):
    """Rows kept as one run (a range on a sorted column) come out as a slice of
    the read (no copy), other masks by filtering: either way the rows, their
    order and their addresses are Arrow's own answer."""
    n = 40_000
    data = pa.table({"k": np.arange(n, dtype=np.int64), "s": pa.array([f"v{i % 97}" for i in range(n)])})
    t = Table.create(str(tmp_path / "t"), data, max_rows_per_file=n)
    if deleted:
        t.delete(" OR ".join(f"k = {d}" for d in deleted))
    live = data.filter(pa.array(~np.isin(np.arange(n), deleted)))
    for where in ("k >= 1000 AND k < 30000", "k < 0", "k >= 0", "k % 3 = 0", "k < 10 OR k > 39990"):
        got = t.scanner(filter=where, with_row_address=True).to_table()
        want = live.filter(tessera.catalog.query.predicate.filter_mask(where, live))
        assert got.column("k").to_pylist() == want.column("k").to_pylist(), where
        assert got.column("s").to_pylist() == want.column("s").to_pylist(), where
        assert got.column("_rowaddr").to_pylist() == want.column("k").to_pylist(), where  # fragment 0
        if where.startswith("k >= 1000") and 5_000 not in deleted:
            assert got.column("k").chunks[0].offset == 1000  # a slice of the read, not a filtered copy
