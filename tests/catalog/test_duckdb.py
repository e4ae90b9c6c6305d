"""DuckDB queries a Tessera table with projection and filter pushed into Tessera."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tessera.catalog import Table


def test_duckdb_group_by_pushes_projection_and_filter(tmp_path):
    duckdb = __import__("duckdb")
    n = 40_000
    rng = np.random.default_rng(0)
    data = pa.table({
        "id": np.arange(n, dtype=np.int64),
        "city": pa.array(np.array(["SF", "NYC", "LA", "SEA"])[np.arange(n) % 4]),
        "amount": rng.random(n),
        "payload": pa.array([f"{'x' * 40}{i}" for i in range(n)]),  # wide column the query never needs
    })
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
