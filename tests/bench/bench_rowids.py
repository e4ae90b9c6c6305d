"""Row id benchmark: take by stable row id after compaction, Tessera vs pylance 14.

    python tests/bench/bench_rowids.py [--rows 10000000] [--takes 1000] [--repeat 5] [--dir DIR] [--sorted]

pylance writes a table with stable row ids (int64, float64, ~12-char string)
in fragments of ``--fragment-rows``; every 97th row is deleted; Tessera
compacts it to ``--target`` rows per fragment (sequences become ranges with
holes; with ``--sorted`` the compaction sorts by a random key, so sequences are
arrays and the index holds one point per row).  Then, in the same run:

* open: ``Table.open`` vs ``lance.dataset`` (each pylance open gets a fresh
  ``lance.Session``, so nothing is cached between runs, as in Tessera);
* index build: Tessera's ``RowIdIndex.build``; pylance's is estimated as its
  first ``_take_rows`` after a cold open minus its warm ``_take_rows`` (n/a
  when that difference is within 5 % of a warm take, i.e. noise);
* take: ``--takes`` random live row ids, every column, warm;
* cold take: open + first take;
* lookup only (Tessera): row id -> row address for the same ids.

Prints the median of ``--repeat`` runs and Tessera /
pylance ratios (target <= 1.0x).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tessera.catalog import Table  # noqa: E402
from tessera.catalog.table.rowid_index import RowIdIndex  # noqa: E402


def make_batches(rows: int, batch: int = 1_000_000):
    rng = np.random.default_rng(42)
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        i = np.arange(start, start + n, dtype=np.int64)
        yield pa.record_batch(
            {
                "i": i,
                "f": rng.standard_normal(n),
                "s": pa.array(np.char.add("row-", (i % 1_000_000).astype("U7"))),
                "key": rng.integers(0, 1 << 40, n),
            }
        )


def median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--fragment-rows", type=int, default=100_000)
    ap.add_argument("--target", type=int, default=1_000_000)
    ap.add_argument("--takes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--sorted", action="store_true", help="compact with a sort (array sequences)")
    args = ap.parse_args()

    import lance

    root = args.dir or tempfile.mkdtemp(prefix="bench_rowids_")
    path = os.path.join(root, "t")
    shutil.rmtree(path, ignore_errors=True)
    schema = next(make_batches(1)).schema
    t0 = time.perf_counter()
    lance.write_dataset(
        pa.RecordBatchReader.from_batches(schema, make_batches(args.rows)),
        path,
        enable_stable_row_ids=True,
        max_rows_per_file=args.fragment_rows,
    )
    lance.dataset(path).delete("i % 97 = 0")
    print(f"pylance wrote {args.rows:,} rows in {time.perf_counter() - t0:.1f}s ({path})")
    t0 = time.perf_counter()
    m = Table.open(path).compact(args.target, sort_by="key" if args.sorted else None)
    print(
        f"Tessera compacted {m.fragments_removed} -> {m.fragments_added} fragments in {time.perf_counter() - t0:.1f}s"
    )

    live = Table.open(path).to_arrow(columns=["_rowid"]).column("_rowid").to_numpy()
    ids = np.random.default_rng(1).choice(live, args.takes, replace=False)
    id_list = ids.tolist()
    results: list[tuple[str, float, float | None]] = []

    t_open, table = median_time(lambda: Table.open(path), args.repeat)
    l_open, ds = median_time(lambda: lance.dataset(path, session=lance.Session()), args.repeat)
    results.append(("open", t_open, l_open))

    t_build, index = median_time(lambda: RowIdIndex.build(table.store, table.manifest.fragments), args.repeat)

    def lance_cold():
        d = lance.dataset(path, session=lance.Session())
        t0 = time.perf_counter()
        d._take_rows(id_list)
        return time.perf_counter() - t0

    l_first = statistics.median(lance_cold() for _ in range(args.repeat))
    ds._take_rows(id_list)
    l_take, theirs = median_time(lambda: ds._take_rows(id_list), args.repeat)
    # None (n/a) when the estimate drowns in noise: pylance's first take is then no slower than its warm one
    results.append(("index build", t_build, l_first - l_take if l_first - l_take > 0.05 * l_take else None))

    table.row_id_index()
    t_take, mine = median_time(lambda: table.take_rows(ids), args.repeat)
    results.append((f"take {args.takes} ids, warm", t_take, l_take))

    def tessera_cold():
        t0 = time.perf_counter()
        Table.open(path).take_rows(ids)
        return time.perf_counter() - t0

    results.append(
        (
            "open + first take",
            statistics.median(tessera_cold() for _ in range(args.repeat)),
            statistics.median(l_open + lance_cold() for _ in range(args.repeat)),
        )
    )
    t_lookup, _ = median_time(lambda: index.lookup(ids), args.repeat)
    results.append(("lookup only (id -> address)", t_lookup, None))

    if not mine.column("i").equals(theirs.column("i")):
        raise SystemExit("Tessera and pylance returned different rows")

    print(
        f"\nrows={args.rows:,}  fragments={len(table.fragments)}  index={index}  "
        f"build={index.build_seconds * 1e3:.1f} ms"
    )
    print(f"{'operation':<32}{'Tessera':>12}{'pylance':>12}{'ratio':>9}")
    for name, mine_s, theirs_s in results:
        ratio = f"{mine_s / theirs_s:8.2f}x" if theirs_s else "      n/a"
        theirs_txt = f"{theirs_s * 1e3:10.2f}ms" if theirs_s else "       n/a"
        print(f"{name:<32}{mine_s * 1e3:10.2f}ms{theirs_txt}{ratio}")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
