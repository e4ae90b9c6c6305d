"""What data file checksums cost: Tessera with checksums verified (the
default), written but not verified, and off, beside pylance 14 in the same
run, local disk.

    python tests/bench/bench_checksums.py [--rows 4000000] [--fragments 1,1000] [--repeat 3]

Lines (medians of ``--repeat`` runs; wall time, CPU-time ratio in brackets):

  write        Table.create of ``--rows`` rows (4 columns) in n fragments
  first scan   a full scan by a fresh table whose file tails were forgotten
               (the process cache of parsed tails cleared: every block is
               verified again; the operating system's page cache is warm)
  scan again   a full scan by a fresh table, tails (and verified blocks) kept
  take         1,000 random rows by position, tails forgotten first

Each mode's table is its own copy, written in that mode (``off``: no
checksums in the files at all).
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

MODES = ("verify", "write", "off")


def main() -> None:
    import lance

    import tessera
    from tessera.catalog import Table
    from tessera.format.file.datafile import clear_parsed_cache

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--fragments", default="1,1000")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(11)
    n = a.rows
    data = pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "x": rng.random(n),
            "k": rng.integers(0, 1 << 40, n),
            "s": pa.array(np.char.add("v", (np.arange(n) % 5000).astype(str))),
        }
    )
    picks = np.sort(rng.choice(n, 1000, replace=False))
    root = tempfile.mkdtemp(prefix="bench-checksums-")
    try:
        for frags in (int(x) for x in a.fragments.split(",")):
            per = -(-n // frags)
            print(f"-- {n:,} rows in {frags:,} fragment(s)")
            results: dict[str, dict[str, tuple[float, float]]] = {}
            for mode in MODES + ("pylance",):
                path = os.path.join(root, f"{mode}-{frags}")
                r: dict[str, tuple[float, float]] = {}

                def write(path: str = path, mode: str = mode) -> None:
                    shutil.rmtree(path, ignore_errors=True)
                    if mode == "pylance":
                        lance.write_dataset(data, path, max_rows_per_file=per)
                    else:
                        with tessera.checksums(mode):
                            Table.create(path, data, max_rows_per_file=per)

                r["write"] = timed(write, a.repeat)
                if mode == "pylance":
                    r["first scan"] = timed(lambda path=path: lance.dataset(path).to_table(), a.repeat)
                    r["scan again"] = r["first scan"]
                    r["take"] = timed(lambda path=path: lance.dataset(path).take(picks), a.repeat)
                else:
                    with tessera.checksums(mode):

                        def cold_scan(path: str = path) -> None:
                            clear_parsed_cache()
                            Table.open(path).to_arrow()

                        def cold_take(path: str = path) -> None:
                            clear_parsed_cache()
                            Table.open(path).take(picks)

                        r["first scan"] = timed(cold_scan, a.repeat)
                        Table.open(path).to_arrow()
                        r["scan again"] = timed(lambda path=path: Table.open(path).to_arrow(), a.repeat)
                        r["take"] = timed(cold_take, a.repeat)
                results[mode] = r
            base = results["pylance"]
            for what in ("write", "first scan", "scan again", "take"):
                cells = []
                for mode in MODES:
                    wall, cpu = results[mode][what]
                    cells.append(
                        f"{mode} {wall * 1000:8.1f} ms {wall / base[what][0]:5.2f}x [{cpu / base[what][1]:5.2f}]"
                    )
                print(f"{what:11s} " + "  ".join(cells) + f"  pylance {base[what][0] * 1000:8.1f} ms")
                sys.stdout.flush()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
