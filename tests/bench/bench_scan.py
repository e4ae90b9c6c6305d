"""Scans: Tessera vs pylance on a table sorted by a key, local disk and moto S3.

    python tests/bench/bench_scan.py [--rows 10000000] [--fragments 20] [--repeat 3] [--only local,s3]
                                     [--s3-latency-ms 10]
    python tests/bench/bench_scan.py --utf8 [--rows 4000000] [--repeat 7]

Every run writes the same table with both writers (sorted by ``key``, int64
plus float and string payload columns: ``s`` of 1,000 distinct values, a
dictionary column, and ``u`` of distinct values, plain or FSST-compressed;
``--fragments`` fragments) and times, in the same process, medians of ``--repeat``:
  full         every column
  project2     two columns (key, f0)
  strings      the two string columns (s, u): what UTF-8 validation costs
  filter1pct   key in a 1% range (all columns)
  unindexed1pct  f1 (random, no index) below its 1% quantile (all columns)
``--utf8``: what UTF-8 validation of string pages costs, local disk only:
the same scans (``strings``, ``full``) by Tessera with the check and with it
switched off, alternating, wall and CPU time medians.
pylance runs without an index and with its own ZONEMAP index on ``key``;
Tessera's table carries a ZONEMAP index on ``key`` that Tessera built
(``Table.create_index``).  Tessera keeps the parsed tails of data files it
read (per process, pinned to the file's identity): "tessera s" is a scan
through a fresh ``Table.open`` with that cache as earlier scans left it,
"cold s" the same scan with the cache emptied first.  Tessera's bytes read
come from the scan's own counters.  On S3, moto's server runs in a process of its own
(``moto_process.py``) and adds ``--s3-latency-ms`` to every GET it answers,
whoever sends it (a real store's round trip); GETs are counted there for
all three, and Tessera's most GETs in flight at its reader.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _moto_process(latency_ms: float):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from moto_process import MotoProcess

    return MotoProcess(latency_ms)


def make_data(rows: int) -> pa.Table:
    rng = np.random.default_rng(7)
    key = np.arange(rows, dtype=np.int64)
    return pa.table(
        {
            "key": key,
            "f0": rng.random(rows),
            "f1": rng.integers(0, 1 << 40, rows),
            "s": pa.array(np.char.add("v", (key % 1000).astype(str))),
            "u": pa.array(np.char.add("user-", rng.integers(0, 1 << 62, rows).astype(str))),
        }
    )


def median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


class GetCounter:
    """Counts GETs (and the most in flight) at Tessera's S3 reader."""

    def __init__(self) -> None:
        import tessera.stores.s3_io as s3io

        self.n = self.now = self.max = 0
        self._lock = threading.Lock()
        real = s3io.S3RangeReader._get
        counter = self

        def counted(reader, a, b):
            with counter._lock:
                counter.n += 1
                counter.now += 1
                counter.max = max(counter.max, counter.now)
            try:
                return real(reader, a, b)
            finally:
                with counter._lock:
                    counter.now -= 1

        s3io.S3RangeReader._get = counted

    def reset(self) -> None:
        self.n = self.now = self.max = 0


def run(where: str, args, data: pa.Table) -> list[tuple]:
    import lance

    from tessera.catalog import Table
    from tessera.format.file.datafile import clear_parsed_cache

    rows = data.num_rows
    per_frag = -(-rows // args.fragments)
    lo, hi = rows // 2, rows // 2 + rows // 100
    flt = f"key >= {lo} AND key < {hi}"
    work = tempfile.mkdtemp(prefix="bench-scan-")
    server = None
    try:
        if where == "s3":
            server = _moto_process(args.s3_latency_ms)
            bucket = server.new_bucket()
            topts = server.storage_options()
            lopts = server.lance_storage_options()
            t_uri, p_uri, pi_uri = (f"s3://{bucket}/{n}" for n in ("tessera", "pylance", "pylance-zm"))
        else:
            topts = lopts = None
            t_uri, p_uri, pi_uri = (os.path.join(work, n) for n in ("tessera", "pylance", "pylance-zm"))
        Table.create(t_uri, data, storage_options=topts, max_rows_per_file=per_frag).create_index("key")
        lance.write_dataset(data, p_uri, max_rows_per_file=per_frag, storage_options=lopts)
        zm = lance.write_dataset(data, pi_uri, max_rows_per_file=per_frag, storage_options=lopts)
        zm.create_scalar_index("key", "ZONEMAP")
        gets = GetCounter() if where == "s3" else None

        def server_gets():
            return server.reset().get("GET", 0) // args.repeat if server is not None else "-"

        out = []
        cases = [
            ("full", None, None),
            ("project2", ["key", "f0"], None),
            ("strings", ["s", "u"], None),
            ("filter1pct", None, flt),
            ("unindexed1pct", None, f"f1 < {(1 << 40) // 100}"),  # scattered rows: no zone can skip
        ]
        for name, cols, where_sql in cases:
            if gets:
                gets.reset()

            def ours(cols=cols, where_sql=where_sql):
                scan = Table.open(t_uri, storage_options=topts).scanner(columns=cols, filter=where_sql)
                return scan.to_table(), scan.stats

            if server is not None:
                server.reset()
            tt, (tab, stats) = median_time(ours, args.repeat)
            tget = (server_gets(), gets.max if gets else "-")

            def cold(ours=ours):
                clear_parsed_cache()
                return ours()

            ct, _ = median_time(cold, args.repeat)
            if server is not None:
                server.reset()
            pt, ptab = median_time(
                lambda cols=cols, where_sql=where_sql: lance.dataset(p_uri, storage_options=lopts).to_table(
                    columns=cols, filter=where_sql
                ),
                args.repeat,
            )
            pget = server_gets()
            zt, ztab = median_time(
                lambda cols=cols, where_sql=where_sql: lance.dataset(pi_uri, storage_options=lopts).to_table(
                    columns=cols, filter=where_sql
                ),
                args.repeat,
            )
            zget = server_gets()
            assert tab.num_rows == ptab.num_rows == ztab.num_rows, (name, tab.num_rows, ptab.num_rows)
            out.append((where, name, tt, ct, pt, zt, stats["bytes_read"], stats["fragments"], *tget, pget, zget))
        return out
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--fragments", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="local,s3")
    ap.add_argument("--s3-latency-ms", type=float, default=10.0)
    ap.add_argument("--utf8", action="store_true", help="the cost of UTF-8 validation only")
    args = ap.parse_args()
    sys.path.insert(0, _ROOT)
    data = make_data(args.rows)
    if args.utf8:
        utf8_cost(args, data)
        return
    results = []
    for where in args.only.split(","):
        results += run(where, args, data)
    print(f"{args.rows:,} rows sorted by key, {args.fragments} fragments; medians of {args.repeat}")
    head = (
        f"{'where':<6} {'case':<11} {'tessera s':>9} {'cold s':>7} {'pylance s':>9} {'pl+zonemap s':>12} "
        f"{'vs pl':>6} {'vs pl+zm':>8} {'cold vs pl+zm':>13} {'MB read':>8} {'frags':>5} {'GETs':>5} {'in flight':>9} "
        f"{'pl GETs':>7} {'pl+zm GETs':>10}"
    )
    print(head)
    for where, name, tt, ct, pt, zt, nbytes, frags, g, gmax, pg, zg in results:
        print(
            f"{where:<6} {name:<11} {tt:>9.3f} {ct:>7.3f} {pt:>9.3f} {zt:>12.3f} {tt / pt:>5.2f}x {tt / zt:>7.2f}x "
            f"{ct / zt:>12.2f}x "
            f"{nbytes / 1e6:>8.1f} {frags:>5} {g!s:>5} {gmax!s:>9} {pg!s:>7} {zg!s:>10}"
        )


def utf8_cost(args, data: pa.Table) -> None:
    """Tessera's scans with and without the UTF-8 check of string data, alternating
    in one process (the check switched off by replacing format.file.utf8's entry points)."""
    from tessera.catalog import Table
    from tessera.format.file import utf8

    checks = (utf8.check_chunks, utf8.check_array)
    work = tempfile.mkdtemp(prefix="bench-utf8-")
    try:
        uri = os.path.join(work, "t")
        Table.create(uri, data, max_rows_per_file=-(-data.num_rows // args.fragments))
        print(f"{data.num_rows:,} rows, {args.fragments} fragments, local disk; medians of {args.repeat}")
        print(
            f"{'case':<9} {'checked s':>9} {'cpu s':>7} {'unchecked s':>11} {'cpu s':>7} {'wall +%':>7} {'cpu +%':>7}"
        )
        for name, cols in (("strings", ["s", "u"]), ("full", None)):
            times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            Table.open(uri).scanner(columns=cols).to_table()  # warm: parsed tails, page cache
            for i in range(2 * args.repeat):
                checked = i % 2 == 0
                if not checked:
                    utf8.check_chunks = utf8.check_array = lambda *a, **k: None  # type: ignore[assignment]
                try:
                    w0, c0 = time.perf_counter(), time.process_time()
                    n = Table.open(uri).scanner(columns=cols).to_table().num_rows
                    times[checked].append((time.perf_counter() - w0, time.process_time() - c0))
                finally:
                    utf8.check_chunks, utf8.check_array = checks
                assert n == data.num_rows
            (cw, cc), (uw, uc) = (
                tuple(statistics.median(x[k] for x in times[c]) for k in (0, 1)) for c in (True, False)
            )
            print(
                f"{name:<9} {cw:>9.3f} {cc:>7.3f} {uw:>11.3f} {uc:>7.3f} "
                f"{(cw / uw - 1) * 100:>6.1f}% {(cc / uc - 1) * 100:>6.1f}%"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
