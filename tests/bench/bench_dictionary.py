"""Low-cardinality strings: Tessera's 2.2 writer (dictionary pages) vs pylance, same run.

    python tests/bench/bench_dictionary.py [--rows 2000000] [--repeat 5]

Table: a 200-value ``country`` column and a 3-value ``status`` column.  Prints
median write times, file sizes and Tessera / pylance ratios (lower is better
for Tessera), plus Tessera with dictionaries switched off for scale.  Not part
of the test run.
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

from tessera import format
from tessera.format.file.v21.write import dictionary as dictionary_encode


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    from lance.file import LanceFileReader, LanceFileWriter

    rng = np.random.default_rng(1)
    codes = np.array([f"country-{i:03d}" for i in range(200)])
    table = pa.table(
        {
            "country": pa.array(codes[rng.integers(0, 200, args.rows)]),
            "status": pa.array(np.array(["ok", "error", "retry"])[rng.integers(0, 3, args.rows)]),
        }
    )

    def tessera(path):
        format.write_file(path, table, file_version="2.2")

    def pylance(path):
        with LanceFileWriter(path, table.schema, version="2.2") as w:
            w.write_batch(table)

    scratch = tempfile.mkdtemp(prefix="bench-dict-")
    results = {}
    try:
        for name, fn, dictionaries in (
            ("tessera", tessera, True),
            ("pylance", pylance, True),
            ("tessera, no dictionary", tessera, False),
        ):
            dictionary_encode.ENABLED = dictionaries
            times = []
            for i in range(args.repeat):
                path = os.path.join(scratch, f"{i}.lance")
                t0 = time.perf_counter()
                fn(path)
                times.append(time.perf_counter() - t0)
            assert LanceFileReader(path).read_all().to_table().equals(table)  # pylance reads it back equal
            results[name] = (statistics.median(times), os.path.getsize(path))
    finally:
        dictionary_encode.ENABLED = True
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{args.rows:,} rows, 200-value and 3-value string columns, file format 2.2, median of {args.repeat}")
    print(f"{'writer':<24} {'write ms':>9} {'MB':>8}")
    for name, (t, size) in results.items():
        print(f"{name:<24} {t * 1000:>9.1f} {size / 1e6:>8.2f}")
    (tt, ts), (pt, ps) = results["tessera"], results["pylance"]
    print(f"Tessera / pylance: write time {tt / pt:.2f}x, size {ts / ps:.2f}x")


if __name__ == "__main__":
    main()
