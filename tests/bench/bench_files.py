"""Data-file benchmark: Tessera vs pylance 14, measured in the same run.

    python tests/bench/bench_files.py [--rows 10000000] [--repeat 3] [--dir DIR]

Table: int64, float64, ~16-char string, timestamp, bool, fixed_size_list<float32,8>.
For file versions 2.0 and 2.2 it times, for each library, writing the table and
reading it back fully; it also times Tessera reading the file pylance wrote.
Prints medians and Tessera / pylance ratios (lower is better for Tessera).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa

from tessera import format as tformat


def make_table(rows: int) -> pa.Table:
    rng = np.random.default_rng(42)
    words = np.array([f"user-{i:011d}" for i in range(100_000)])  # 16 chars
    strings = pa.array(words[rng.integers(0, len(words), rows)])
    vecs = rng.standard_normal(rows * 8, dtype=np.float32)
    return pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "score": rng.standard_normal(rows),
            "name": strings,
            "ts": pa.array(np.datetime64("2024-01-01", "us") + rng.integers(0, 10**12, rows).astype("timedelta64[us]")),
            "flag": pa.array(rng.integers(0, 2, rows).astype(bool)),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vecs), 8),
        }
    )


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--versions", default="2.0,2.2")
    args = ap.parse_args()

    import lance.file as lf

    table = make_table(args.rows)
    work = args.dir or tempfile.mkdtemp(prefix="tessera-bench-")
    os.makedirs(work, exist_ok=True)
    print(f"rows={args.rows:,} repeat={args.repeat} (medians, seconds) in {work}")
    header = f"{'version':8} {'operation':44} {'tessera':>9} {'pylance':>9} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    try:
        for v in args.versions.split(","):
            ours, theirs = os.path.join(work, f"t{v}.lance"), os.path.join(work, f"p{v}.lance")

            def w_ours():
                tformat.write_file(ours, table, file_version=v)

            def w_theirs():
                with lf.LanceFileWriter(theirs, table.schema, version=v) as w:
                    w.write_batch(table)

            def r_ours_own():
                return tformat.read_file(ours)

            def r_ours_theirs():
                return tformat.read_file(theirs)

            def r_theirs():
                return lf.LanceFileReader(theirs).read_all().to_table()

            tw, pw = median_time(w_ours, args.repeat), median_time(w_theirs, args.repeat)
            assert r_ours_theirs().equals(table) and lf.LanceFileReader(ours).read_all().to_table().equals(table)
            pr = median_time(r_theirs, args.repeat)
            tr_own = median_time(r_ours_own, args.repeat)
            tr_theirs = median_time(r_ours_theirs, args.repeat)
            sizes = (
                f"(sizes: tessera {os.path.getsize(ours) / 1e6:.0f} MB, pylance {os.path.getsize(theirs) / 1e6:.0f} MB)"
            )
            for op, t, p in (
                ("write", tw, pw),
                ("read own file (vs pylance reading its own)", tr_own, pr),
                ("read pylance-written file", tr_theirs, pr),
            ):
                print(f"{v:8} {op:44} {t:9.3f} {p:9.3f} {t / p:6.2f}x")
            print(f"{'':8} {sizes}")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
