"""On a local store a filtered scan reads the filter's columns first and the
other columns only for the rows the filter keeps (one run: its range; few
scattered rows: taken; more: the span they cover).  The answers are Arrow's,
with deletions, row addresses and row ids, whichever way the rows are read."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tessera.catalog import Table
from tessera.catalog.query import scan as scan_mod
from tessera.format.table.fragments import FragmentReader

N = 12_000


def _data() -> pa.Table:
    rng = np.random.default_rng(4)
    i = np.arange(N, dtype=np.int64)
    tags = rng.integers(0, 50, N)
    return pa.table(
        {
            "k": i,
            "tag": pa.array(tags, pa.int32()),
            "x": pa.array(np.where(i % 11 == 0, np.nan, rng.random(N))),
            "s": pa.array([None if j % 13 == 0 else f"s{j % 97}" for j in i]),
            "l": pa.array([[int(j)] * int(j % 3) if j % 5 else None for j in i], pa.list_(pa.int64())),
        }
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("late") / "t")
    data = _data()
    t = Table.create(uri, data, max_rows_per_file=4_000)
    t.delete("k % 7 = 3 OR (k >= 5000 AND k < 5100)")
    k = data["k"].to_numpy()
    alive = data.filter(pa.array(~((k % 7 == 3) | ((k >= 5000) & (k < 5100)))))
    return uri, alive


def _comparable(t: pa.Table) -> pa.Table:
    """NaN as a value that compares equal to itself."""
    if "x" in t.column_names:
        x = t["x"]
        t = t.set_column(t.column_names.index("x"), "x", pc.if_else(pc.is_nan(x), -1.0, x))
    return t.combine_chunks()


CASES = [
    ("k >= 3000 AND k < 3600", lambda t: pc.and_(pc.greater_equal(t["k"], 3000), pc.less(t["k"], 3600))),  # one run
    ("tag = 7", lambda t: pc.equal(t["tag"], 7)),  # ~2%: taken
    ("tag < 30", lambda t: pc.less(t["tag"], 30)),  # ~60%: the span
    ("tag > 100", lambda t: pc.greater(t["tag"], 100)),  # nothing
    ("x > 0.5", lambda t: pc.fill_null(pc.greater(t["x"], 0.5), False)),  # NaN never matches
    ("k % 1000 = 999", lambda t: pc.equal(pc.subtract(t["k"], pc.multiply(pc.divide(t["k"], 1000), 1000)), 999)),
]


@pytest.mark.parametrize("sql,oracle", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("columns", [None, ["s", "l", "k"], ["x", "tag"]])
def test_late_reads_answer_what_arrow_answers(table, sql, oracle, columns):
    uri, alive = table
    scan = Table.open(uri).scanner(columns=columns, filter=sql, with_row_address=True)
    got = scan.to_table()
    want = alive.filter(oracle(alive))
    names = columns or alive.column_names
    assert _comparable(got.select(names)).equals(_comparable(want.select(names)))
    # row addresses point at the rows returned: fragment 4000 rows, address = frag << 32 | offset
    k = want["k"].to_numpy()
    addr = got["_rowaddr"].to_numpy()
    assert ((addr >> 32) * 4000 + (addr & 0xFFFFFFFF)).tolist() == k.tolist()


def test_a_count_and_row_ids_through_the_late_path(table):
    uri, alive = table
    t = Table.open(uri)
    want = alive.filter(pc.equal(alive["tag"], 7))
    assert t.count_rows("tag = 7") == want.num_rows
    got = t.scanner(columns=["s"], filter="tag = 7", with_row_id=True).to_table()
    assert got["s"].to_pylist() == want["s"].to_pylist()
    assert got.num_rows == want.num_rows


def test_the_other_columns_are_read_only_for_the_kept_rows(tmp_path, monkeypatch):
    """Counted at the fragment readers: the filter column is read whole, the
    others for the kept run only, taken for a few scattered rows, and not at
    all where nothing matches."""
    i = np.arange(20_000, dtype=np.int64)
    data = pa.table({"k": i, "tag": pa.array(i % 100, pa.int32()), "v": pa.array(np.char.add("v", i.astype(str)))})
    uri = str(tmp_path / "t")
    Table.create(uri, data)
    reads: list[tuple[tuple[str, ...], int]] = []
    takes: list[tuple[tuple[str, ...], int]] = []
    real_read, real_take = FragmentReader.read, FragmentReader.take

    def read(self, start, stop):
        reads.append((tuple(f.name for f in self.fields), stop - start))
        return real_read(self, start, stop)

    def take(self, offsets):
        takes.append((tuple(f.name for f in self.fields), len(offsets)))
        return real_take(self, offsets)

    monkeypatch.setattr(FragmentReader, "read", read)
    monkeypatch.setattr(FragmentReader, "take", take)
    t = Table.open(uri)
    assert t.to_arrow(filter="k >= 100 AND k < 300").equals(data.slice(100, 200))
    assert reads == [(("k",), 20_000), (("tag", "v"), 200)] and takes == []
    reads.clear()
    assert t.to_arrow(filter="tag = 42").equals(data.filter(pc.equal(data["tag"], 42)))
    assert reads == [(("tag",), 20_000)] and takes == [(("k", "v"), 200)]
    reads.clear()
    takes.clear()
    assert t.to_arrow(filter="tag >= 10").num_rows == 18_000
    assert reads == [(("tag",), 20_000), (("k", "v"), 20_000 - 10)] and takes == []
    reads.clear()
    assert t.to_arrow(columns=["v"], filter="tag > 100").num_rows == 0
    assert reads == [(("tag",), 20_000)] and takes == []
    reads.clear()
    # only the filter's columns asked for: one read, nothing late
    assert t.to_arrow(columns=["tag"], filter="tag = 1").num_rows == 200
    assert reads == [(("tag",), 20_000)]


def test_a_remote_store_reads_every_column_at_once(moto_server, monkeypatch):
    """On S3 a second round trip per read costs more than the bytes it saves:
    the filter's and the other columns are fetched together."""
    i = np.arange(5_000, dtype=np.int64)
    data = pa.table({"k": i, "v": i * 2})
    uri = f"s3://{moto_server.new_bucket()}/t"
    Table.create(uri, data, storage_options=moto_server.storage_options())
    scan = Table.open(uri, storage_options=moto_server.storage_options()).scanner(filter="k < 10")
    assert scan._late is None
    assert scan.to_table().equals(data.slice(0, 10))


def test_the_take_threshold_is_what_chooses(tmp_path, monkeypatch):
    i = np.arange(8_000, dtype=np.int64)
    data = pa.table({"k": i, "v": i * 3})
    uri = str(tmp_path / "t")
    Table.create(uri, data)
    takes = []
    real_take = FragmentReader.take
    monkeypatch.setattr(FragmentReader, "take", lambda self, o: takes.append(len(o)) or real_take(self, o))
    monkeypatch.setattr(scan_mod, "TAKE_FRACTION", 1)  # every scattered selection is taken
    assert Table.open(uri).to_arrow(filter="k % 2 = 0").equals(data.filter(pc.equal(pc.bit_wise_and(data["k"], 1), 0)))
    assert takes == [4_000]
