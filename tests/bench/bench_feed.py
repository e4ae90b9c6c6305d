"""Statistics and the change feed as tables grow; Tessera vs pylance 14 in the
same run where pylance has the same thing, local disk.

    python tests/bench/bench_feed.py [--rows 500000] [--fragments 100,1000]
                                     [--versions 100] [--repeat 3]

Lines (medians of ``--repeat`` runs; wall time, and the ratio of CPU times in
brackets where pylance is timed too):

  stats        ``Table.stats()`` vs pylance's ``stats.dataset_stats()`` plus
               ``stats.index_stats()`` of its one index, on a table of n
               fragments with a zone map and deletions
  feed         ``Table.changes(first, last)`` over the last ``--versions``
               versions of that table (one-row appends, each a version), and
               of one version (what a streaming batch reads); pylance has no
               change feed: the comparison is a scan of the table
               (``to_table()``), what a consumer without a feed would read
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(__file__))
from bench_growth import timed  # noqa: E402 - the same medians as the other benchmarks


def line(name: str, ours: tuple[float, float], theirs: tuple[float, float] | None) -> None:
    a = ours[0] * 1000
    if theirs is None:
        print(f"{name:48s} tessera {a:9.1f} ms")
    else:
        b = theirs[0] * 1000
        print(f"{name:48s} tessera {a:9.1f} ms  pylance {b:9.1f} ms  {a / b:5.2f}x [{ours[1] / theirs[1]:5.2f}]")
    sys.stdout.flush()


def main() -> None:
    import lance

    from tessera.catalog import Table

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--fragments", default="100,1000")
    ap.add_argument("--versions", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-feed-")
    try:
        rng = np.random.default_rng(7)
        data = pa.table({"key": np.arange(a.rows), "f": rng.random(a.rows), "s": rng.integers(0, 1000, a.rows)})
        for n in (int(x) for x in a.fragments.split(",")):
            path = f"{root}/t{n}"
            t = Table.create(path, data, max_rows_per_file=-(-a.rows // n), stable_row_ids=True)
            t.create_index("key")
            t.delete("key % 1000 = 0")
            print(f"-- {a.rows:,} rows in {n:,} fragments, a zone map on key, {a.rows // 1000:,} rows deleted")
            ds, opened = lance.dataset(path), Table.open(path)  # both opened once
            line(
                "stats",
                timed(lambda: opened.stats(), a.repeat),
                timed(lambda: (ds.stats.dataset_stats(), ds.stats.index_stats("key_idx")), a.repeat),
            )
            first = t.version + 1
            for i in range(a.versions):
                t.append(pa.table({"key": [a.rows + i], "f": [0.5], "s": [1]}))
            last = t.version
            line(
                f"changes of {a.versions} versions vs full scan",
                timed(lambda: t.changes(first, last), a.repeat),
                timed(lambda: lance.dataset(path).to_table(), a.repeat),
            )
            line("changes of one version (a streaming batch)", timed(lambda: t.changes(last, last), a.repeat), None)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
