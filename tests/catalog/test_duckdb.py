"""DuckDB (and Polars, pyarrow) query a Tessera table through its dataset view,
with projection and filter pushed into Tessera; the Table itself is an Arrow
stream DuckDB can query by name.  Exiting after a partial read is covered by
test_dataset_exit.py."""

from __future__ import annotations

import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest

from tessera.catalog import Table
from tessera.catalog.errors import TesseraError
from tessera.catalog.query.arrow_dataset import TesseraDataset


def test_duckdb_group_by_pushes_projection_and_filter(tmp_path):
    duckdb = __import__("duckdb")
    n = 40_000
    rng = np.random.default_rng(0)
    data = pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "city": pa.array(np.array(["SF", "NYC", "LA", "SEA"])[np.arange(n) % 4]),
            "amount": rng.random(n),
            "payload": pa.array([f"{'x' * 40}{i}" for i in range(n)]),  # wide column the query never needs
        }
    )
    t = Table.create(str(tmp_path / "t"), data, max_rows_per_file=10_000)
    ds = t.to_dataset()
    con = duckdb.connect()
    con.register("orders", ds)
    got = con.execute(
        "SELECT city, count(*) AS n, round(sum(amount), 6) AS total FROM orders WHERE id >= 30000 "
        "GROUP BY city ORDER BY city"
    ).fetchall()
    sub = data.filter(pa.compute.greater_equal(data["id"], 30000)).to_pandas()
    want = sub.groupby("city").agg(n=("id", "size"), total=("amount", "sum")).reset_index()
    assert got == [(c, int(k), round(float(s), 6)) for c, k, s in want.itertuples(index=False)]
    pushed = ds.last_scan
    assert pushed.expr is not None  # the WHERE reached Tessera
    assert "payload" not in pushed.read_names  # only the needed columns were read
    pushed_bytes = pushed.stats["bytes_read"]
    full = t.scanner()
    full.to_table()
    assert pushed_bytes < full.stats["bytes_read"] / 3


# -- the dataset view: pushdown, early stop, the Table as an Arrow source ------------------

N = 40_000
FRAGMENT_ROWS = 2_000  # 20 fragments


@pytest.fixture(scope="module")
def orders(tmp_path_factory):
    data = pa.table(
        {
            "id": np.arange(N, dtype=np.int64),
            "city": pa.array(np.array(["SF", "NYC", "LA", "SEA"])[np.arange(N) % 4]),
            "amount": np.random.default_rng(0).random(N),
            "payload": pa.array([f"{'x' * 40}{i}" for i in range(N)]),
        }
    )
    t = Table.create(str(tmp_path_factory.mktemp("duck") / "t"), data, max_rows_per_file=FRAGMENT_ROWS)
    return t, data


def test_duckdb_limit_reads_only_what_it_needs(orders):
    """LIMIT stops the Tessera scan: nothing reads the rest of the table behind
    DuckDB's back (the Arrow scanner used to read ahead on its own thread)."""
    t, _ = orders
    ds = t.to_dataset()
    con = duckdb.connect(config={"threads": 2})
    con.register("o", ds)
    assert con.execute("SELECT id, city FROM o WHERE id >= 1000 LIMIT 5").fetchall() == [
        (i, ["SF", "NYC", "LA", "SEA"][i % 4]) for i in range(1000, 1005)
    ]
    scan = ds.last_scan
    assert scan.expr is not None and scan.read_names == ["id", "city"]
    time.sleep(0.2)  # a reader running on behind DuckDB's back would get further
    assert scan.stats["fragments"] <= 4, scan.stats  # of 20


def test_duckdb_sql_over_a_table_variable(orders):
    t, _ = orders  # noqa: RUF059 - DuckDB finds `t` by name in this frame
    assert duckdb.sql("select count(*) from t").fetchall() == [(N,)]
    got = duckdb.sql("select city, count(*), sum(id) from t where id < 1000 group by city order by city").fetchall()
    ids = np.arange(1000)
    want = sorted(
        (c, int((ids % 4 == k).sum()), int(ids[ids % 4 == k].sum())) for k, c in enumerate(["SF", "NYC", "LA", "SEA"])
    )
    assert got == want
    assert len(duckdb.sql("select * from t limit 3").fetchall()) == 3


def test_table_is_an_arrow_stream(orders):
    t, _ = orders
    assert pa.RecordBatchReader.from_stream(t).read_all().equals(t.to_arrow())
    want = pa.schema(
        [("id", pa.int32()), ("city", pa.large_string()), ("amount", pa.float64()), ("payload", pa.string())]
    )
    got = pa.RecordBatchReader.from_stream(t, schema=want).read_all()
    assert got.schema == want and got.column("id").to_pylist()[:3] == [0, 1, 2]
    with pytest.raises(TesseraError):  # a schema the table cannot be cast to
        t.__arrow_c_stream__(pa.schema([("nope", pa.int64())]).__arrow_c_schema__())
    with pytest.raises(TesseraError):  # not a schema capsule
        t.__arrow_c_stream__("id")


def test_to_duckdb_pushes_projection_and_filter(orders):
    t, data = orders
    rel = t.to_duckdb()
    assert isinstance(rel, duckdb.DuckDBPyRelation)
    agg = rel.filter("id >= 30000").aggregate("count(*), sum(id)")
    plan = agg.explain()
    assert "Filters" in plan and '"id" >= 30000' in plan and "payload" not in plan
    assert agg.fetchall() == [(10_000, sum(range(30_000, N)))]
    con = duckdb.connect()
    named = t.to_duckdb(name="my orders", connection=con)
    assert named.limit(2).fetchall() == [tuple(r.values()) for r in data.slice(0, 2).to_pylist()]
    assert con.sql("select count(*) from \"my orders\" where city = 'SF'").fetchall() == [(N // 4,)]
    for bad in ({"name": ""}, {"name": 3}, {"connection": "duckdb"}):
        with pytest.raises(TesseraError):
            t.to_duckdb(**bad)


def test_head(orders):
    t, data = orders
    assert t.head(3).equals(data.slice(0, 3))
    assert t.head().num_rows == 5
    assert t.head(0).num_rows == 0 and t.head(0).schema == data.schema
    assert t.head(2, columns=["id"], filter="id >= 39999").to_pylist() == [{"id": 39999}]
    assert t.head(10**9).num_rows == N
    for bad in (-1, 2.5, "3", True, None):
        with pytest.raises(TesseraError):
            t.head(bad)


def test_polars_pushes_projection_and_filter_and_stops_early(orders):
    pl = pytest.importorskip("polars")
    t, _ = orders
    ds = t.to_dataset()
    got = pl.scan_pyarrow_dataset(ds).filter(pl.col("id") >= 39_990).select("city", "id").collect()
    assert got["id"].to_list() == list(range(39_990, N))
    scan = ds.last_scan
    assert scan.expr is not None and "payload" not in scan.read_names
    ds = t.to_dataset()
    df = pl.scan_pyarrow_dataset(ds).head(5).collect()
    assert df["id"].to_list() == [0, 1, 2, 3, 4]
    assert ds.last_scan.stats["fragments"] <= 2, ds.last_scan.stats  # of 20


def test_pyarrow_scanner_api(orders):
    t, data = orders
    ds = t.to_dataset()
    assert isinstance(ds, pads.Dataset) and ds.schema == data.schema
    sc = ds.scanner(columns=["id", "amount"], filter=pc.field("id") < 10, batch_size=4_000)
    assert sc.projected_schema.names == ["id", "amount"]
    assert sc.to_table().equals(data.select(["id", "amount"]).slice(0, 10))
    assert sc.to_table().num_rows == 10  # each pass is a new scan
    assert sc.to_reader().read_all().num_rows == 10
    assert sc.head(3).num_rows == 3 and sc.count_rows() == 10
    it = ds.scanner(batch_size=100).to_batches()
    assert next(it).num_rows == 100  # abandoned: nothing else is read
    assert ds.last_scan.stats["fragments"] == 1
    assert ds.to_table(columns=["id"], filter="id % 1000 = 0").column("id").to_pylist() == list(range(0, N, 1000))
    assert sum(b.num_rows for b in ds.to_batches(columns=["city"], batch_size=999)) == N
    assert ds.count_rows() == N and ds.count_rows(filter=pc.field("city") == "SF") == N // 4
    assert ds.head(4, columns=["id"]).column("id").to_pylist() == [0, 1, 2, 3]
    assert ds.take([5, 0, 39_999], columns=["id"]).column("id").to_pylist() == [5, 0, 39_999]
    sf = ds.filter(pc.field("city") == "SF")
    assert isinstance(sf, TesseraDataset) and sf.count_rows() == N // 4
    assert sf.to_table(columns=["id"], filter="id < 20").column("id").to_pylist() == [0, 4, 8, 12, 16]
    assert sf.take([1, 2], columns=["id"]).column("id").to_pylist() == [4, 8]
    assert ds.partition_expression.equals(pc.scalar(True))


def test_dataset_bad_input_raises_typed_errors(orders):
    """Bad arguments, and pyarrow operations a Tessera view cannot do, raise
    TesseraErrors (several inherited pyarrow methods used to crash the process)."""
    from tessera.catalog.errors import UnsupportedDatasetOperationError

    t, _ = orders
    ds = t.to_dataset()
    bad_calls = [
        lambda: ds.scanner(columns={"x": pc.field("id")}),
        lambda: ds.scanner(columns="id"),
        lambda: ds.scanner(columns=[1]),
        lambda: ds.scanner(columns=["nope"]),
        lambda: ds.scanner(batch_size=0),
        lambda: ds.scanner(batch_size="big"),
        lambda: ds.scanner(no_such_option=1),
        lambda: ds.scanner(filter="nope > 1"),
        lambda: ds.scanner(filter=3),
        lambda: ds.head(-1),
        lambda: ds.take([N]),
        lambda: ds.filter(pc.field("city") == "SF").take([-1]),
        lambda: ds.filter(None),
        lambda: ds.filter("id >"),
        lambda: ds.get_fragments(),
        lambda: ds.sort_by("id"),
        lambda: ds.join(ds, "id"),
        lambda: ds.replace_schema(ds.schema),
        lambda: __import__("pickle").dumps(ds),
    ]
    for call in bad_calls:
        with pytest.raises(TesseraError):
            call()
    with pytest.raises(UnsupportedDatasetOperationError):
        ds.sort_by("id")


def test_streams_close_at_exit_hook(orders):
    """The exit hook closes a stream left half read: its readers close and a
    later pull ends the stream."""
    from tessera.catalog.query import stream as arrow_dataset

    t, _ = orders
    reader = t.to_batches(batch_size=100)
    stream = t.to_dataset().scanner(batch_size=100).to_batches()
    assert reader.read_next_batch().num_rows == 100 and next(stream).num_rows == 100
    assert arrow_dataset.open_stream_count() >= 2
    arrow_dataset.close_open_streams()
    assert arrow_dataset.open_stream_count() == 0 and stream.closed
    assert list(stream) == []
    with pytest.raises(StopIteration):
        reader.read_next_batch()
    full = t.to_dataset().scanner(batch_size=100_000).to_batches()
    assert sum(b.num_rows for b in full) == N and full.closed  # exhausted streams close themselves
