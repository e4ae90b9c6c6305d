"""Quickstart: the main job on the embedded default (local disk + SQLite).

Creates a catalog, a namespace and tables; writes from several processes at
once; deletes and updates; commits a multi-table transaction; time-travels;
prints the history.  Usage: ``python scripts/quickstart.py [WAREHOUSE_DIR]``.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import tempfile

import numpy as np
import pyarrow as pa

from tessera import connect

WRITERS, BATCHES = 4, 5


def orders(writer: int, batch: int, n: int = 100) -> pa.Table:
    rng = np.random.default_rng(writer * 1000 + batch)
    base = (writer * BATCHES + batch) * n
    return pa.table(
        {
            "order_id": np.arange(base, base + n, dtype=np.int64),
            "city": pa.array(rng.choice(["SF", "NYC", "Berlin", "Tokyo"], n)),
            "amount": rng.uniform(1, 100, n).round(2),
            "writer": pa.array([writer] * n, pa.int32()),
        }
    )


def write_orders(warehouse: str, writer: int) -> None:
    cat = connect(warehouse=warehouse)
    table = cat.load_table("shop.orders")
    for b in range(BATCHES):
        table.append(orders(writer, b))  # concurrent commits: each one lands exactly once


def main() -> int:
    warehouse = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="tessera-quickstart-")
    cat = connect(warehouse=warehouse)  # SQLite catalog under the warehouse
    print(f"catalog: {cat!r}")
    cat.create_namespace("shop", {"owner": "quickstart"}, exist_ok=True)
    for name in ("shop.orders", "shop.audit"):
        if cat.table_exists(name):
            cat.drop_table(name, purge=True)
    orders_t = cat.create_table("shop.orders", orders(99, 0, 10), commit_store="catalog")
    cat.create_table(
        "shop.audit", pa.table({"event": ["created"], "rows": pa.array([10], pa.int64())}), commit_store="catalog"
    )
    print(f"created shop.orders (version {orders_t.version}) and shop.audit")

    procs = [mp.get_context("spawn").Process(target=write_orders, args=(warehouse, w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"writer process failed with exit code {p.exitcode}")
    t = cat.load_table("shop.orders")
    expected = 10 + WRITERS * BATCHES * 100
    assert t.count_rows() == expected, (t.count_rows(), expected)
    print(f"{WRITERS} processes x {BATCHES} appends: version {t.version}, {t.count_rows():,} rows, none lost")

    t.delete("amount < 5")
    t.update({"amount": "amount * 1.1"}, where="city = 'Tokyo'")
    print(f"after delete and update: version {t.version}, {t.count_rows():,} rows")

    with cat.transaction() as tx:  # both tables change, or neither
        o, a = tx.load_table("shop.orders"), tx.load_table("shop.audit")
        o.delete("city = 'Berlin'")
        a.append(pa.table({"event": ["berlin orders removed"], "rows": pa.array([o.count_rows()], pa.int64())}))
    t = cat.load_table("shop.orders")
    print(
        f"multi-table transaction: orders v{t.version} ({t.count_rows():,} rows), "
        f"audit v{cat.load_table('shop.audit').version}"
    )

    first = cat.load_table("shop.orders", version=1)
    print(f"time travel: version 1 had {first.count_rows()} rows; latest has {t.count_rows():,}")
    t.tags.create("after-cleanup", t.version)
    by_city = (
        t.to_arrow(columns=["city", "amount"], filter="amount > 50")
        .group_by("city")
        .aggregate([("amount", "count")])
        .sort_by("city")
    )
    print("orders over 50 by city:", dict(zip(by_city["city"].to_pylist(), by_city["amount_count"].to_pylist())))

    print("\nhistory of shop.orders:")
    print(f"{'version':>7}  {'time (UTC)':19}  {'operation':10} {'added':>7} {'removed':>7} {'rows':>7}")
    for h in t.versions():
        print(
            f"{h['version']:>7}  {h['timestamp']:%Y-%m-%d %H:%M:%S}  {str(h['operation']):10} "
            f"{h['rows_added']:>7} {h['rows_removed']:>7} {h['rows']:>7}"
        )
    print(f"\nwarehouse: {warehouse}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
