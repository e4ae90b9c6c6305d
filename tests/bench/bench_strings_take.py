"""Benchmark: FSST decompression, reading a 2.2 string column, and take.

    python tests/format/bench_strings_take.py [--rows 10000000] [--dir DIR]

Builds (once, in DIR) a table of an int64 column and a ~16-char string column,
written by pylance 14 (2.0 and 2.2) and by Tessera, then times in one run:

* ``fsst.decompress`` over every FSST page of the pylance 2.2 string column
  (the pages' compressed values, captured once);
* reading the string column: Tessera ``FileReader.read`` vs pylance
  ``LanceFileReader.read_all`` (default batches and one batch);
* 1,000 random rows (sorted, distinct): Tessera ``FileReader.take`` vs pylance
  ``LanceFileReader.take_rows``.

Best of ``--repeat`` runs.  Not collected by pytest.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tessera import format as tformat
from tessera.format.file.encodings import fsst


def best(f, repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        out = min(out, time.perf_counter() - t0)
    return out


def make_table(rows: int) -> pa.Table:
    rng = np.random.default_rng(0)
    words = np.array(["alpha", "bravo", "delta", "gamma", "omega", "sigma", "kappa", "theta"])
    ids = pc.cast(pa.array(rng.integers(0, 10**9, rows)), pa.string())
    s = pc.binary_join_element_wise(pa.array(words[rng.integers(0, 8, rows)]), ids, "-")
    s = pc.utf8_slice_codeunits(pc.binary_join_element_wise(s, pa.array(np.full(rows, "xyzw")), ""), 0, 16)
    return pa.table({"i": pa.array(rng.integers(0, 2**62, rows)), "s": s})


def main() -> None:
    import lance.file

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "tessera-bench-strings"))
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    table = None
    paths = {}
    for who in ("pylance", "tessera"):
        for v in ("2.0", "2.2"):
            path = os.path.join(args.dir, f"{who}-{v}-{args.rows}.lance")
            paths[who, v] = path
            if os.path.exists(path):
                continue
            table = table if table is not None else make_table(args.rows)
            if who == "pylance":
                with lance.file.LanceFileWriter(path, table.schema, version=v) as w:
                    for b in table.to_batches(max_chunksize=1 << 20):
                        w.write_batch(b)
            else:
                tformat.write_file(path, table, file_version=v)

    # FSST: capture the pages' compressed values once, then time decompress alone
    calls = []
    real = fsst.decompress

    def spy(*a, **k):
        calls.append((a, k))
        return real(*a, **k)

    fsst.decompress = spy
    try:
        tformat.FileReader(paths["pylance", "2.2"]).read(columns=["s"])
    finally:
        fsst.decompress = real
    if calls:
        n = sum(len(a[1]) - 1 for a, _ in calls)
        t = best(lambda: [real(*a, **k) for a, k in calls], args.repeat)
        print(f"fsst.decompress: {n:,} strings in {len(calls)} pages: {t:.3f} s")

    p22 = paths["pylance", "2.2"]
    print("read the string column of the pylance 2.2 file:")

    def theirs(**kw):
        return lance.file.LanceFileReader(p22, columns=["s"]).read_all(**kw).to_table()

    print(f"  pylance read_all (default batches) {best(theirs, args.repeat):.3f} s")
    print(f"  pylance read_all (one batch)       {best(lambda: theirs(batch_size=args.rows), args.repeat):.3f} s")
    ours = best(lambda: tformat.FileReader(p22).read(columns=["s"]), args.repeat)
    print(f"  tessera FileReader.read            {ours:.3f} s")

    idx = np.unique(np.random.default_rng(42).integers(0, args.rows, 1000))
    print(f"take {idx.size} random rows (int64 + string):")
    for (who, v), path in sorted(paths.items()):
        pr = lance.file.LanceFileReader(path)
        tr = tformat.FileReader(path)
        tr.take(idx[:2])  # page metadata loaded
        tp = best(lambda: pr.take_rows(idx.tolist()).to_table(), args.repeat)
        tt = best(lambda: tr.take(idx), args.repeat)
        print(f"  {who}-written {v}: pylance take_rows {tp * 1e3:6.1f} ms   tessera take {tt * 1e3:6.1f} ms")


if __name__ == "__main__":
    main()
