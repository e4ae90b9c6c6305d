"""Costs as tables grow: many fragments, many versions, repeated updates and
deletes; Tessera vs pylance 14 in the same run, local disk.

    python tests/bench/bench_growth.py [--rows 500000] [--fragments 100,1000]
                                       [--versions 100,1000] [--repeat 3]
                                       [--only fragments,mutations,versions,process,write]

Each line prints medians of ``--repeat`` runs: Tessera's and pylance's wall
time, their ratio, and the ratio of CPU times (process time, steadier than
wall time on a shared machine) in brackets.  Both tables are written by their
own library (the same rows; ``--fragments`` fragments of equal size), no index.

  fragments  full scan, 2 columns, filtered count, a 1% filter, take 1,000 rows
             (each on a table already opened, after one untimed call: the held
             table's steady state), then open + full scan, compaction
             of n fragments of 100 rows (timed alone, on a fresh copy each time)
  mutations  update one row by filter and delete one row by filter, 20 in a row
             (the 20 as one line: the table grows a fragment per update)
  versions   versions() of a table of n versions (one-row appends), and open of
             version n/2 + count
  process    a new process: import, open, one filtered count
  write      a bulk write of --rows rows x 6 columns, and the bytes on disk

Lines that write (compaction, updates, deletes, bulk write) are timed twice
for Tessera: with its default durability ("sync": data files and manifests
fsynced) and with "none", pylance's behaviour (no fsync); pylance once.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

#: Tessera's durability settings timed where a line writes: its default
#: ("sync": fsyncs) and pylance's behaviour ("none": no fsync)
DURABILITIES = ("sync", "none")


def make_data(rows: int, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "key": np.arange(rows, dtype=np.int64),
            "f0": rng.random(rows),
            "f1": rng.integers(0, 1_000_000, rows),
            "s": pa.array(np.char.add("s", (np.arange(rows) % 997).astype(str))),
        }
    )


def timed(fn: Callable[[], object], repeat: int, warm: bool = False) -> tuple[float, float]:
    """Median wall and CPU seconds of ``repeat`` calls (after one untimed call
    when ``warm``: a held table's steady state, on both sides)."""
    if warm:
        fn()
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def line(name: str, ours: tuple[float, float], theirs: tuple[float, float]) -> None:
    ratio = ours[0] / theirs[0] if theirs[0] else float("inf")
    cpu = ours[1] / theirs[1] if theirs[1] else float("inf")
    a, b = ours[0] * 1000, theirs[0] * 1000
    print(f"{name:44s} tessera {a:9.1f} ms  pylance {b:9.1f} ms  {ratio:5.2f}x [{cpu:5.2f}]")
    sys.stdout.flush()


def write_both(root: str, data: pa.Table, fragments: int) -> tuple[str, str]:
    import lance

    from tessera.catalog import Table

    per = -(-data.num_rows // fragments)
    ours, theirs = os.path.join(root, "tessera"), os.path.join(root, "pylance")
    shutil.rmtree(ours, ignore_errors=True)
    shutil.rmtree(theirs, ignore_errors=True)
    Table.create(ours, data, max_rows_per_file=per)
    lance.write_dataset(data, theirs, max_rows_per_file=per, max_rows_per_group=min(per, 1024))
    return ours, theirs


def bench_fragments(root: str, rows: int, counts: list[int], repeat: int) -> None:
    import lance

    from tessera.catalog import Table

    data = make_data(rows)
    rng = np.random.default_rng(1)
    take_rows = np.sort(rng.choice(rows, 1000, replace=False))
    lo = rows // 2
    one_pct = f"key >= {lo} AND key < {lo + rows // 100}"
    for n in counts:
        ours, theirs = write_both(root, data, n)
        t, ds = Table.open(ours), lance.dataset(theirs)
        assert t.count_rows() == ds.count_rows() == rows
        assert len(t.fragments) == len(ds.get_fragments()) == n
        print(f"-- {rows:,} rows in {n:,} fragments")
        line(
            "full scan", timed(lambda: t.to_arrow(), repeat, warm=True), timed(lambda: ds.to_table(), repeat, warm=True)
        )
        line(
            "2 columns",
            timed(lambda: t.to_arrow(columns=["key", "f0"]), repeat, warm=True),
            timed(lambda: ds.to_table(columns=["key", "f0"]), repeat, warm=True),
        )
        line(
            "filtered count (f1 < 500000)",
            timed(lambda: t.count_rows("f1 < 500000"), repeat, warm=True),
            timed(lambda: ds.count_rows("f1 < 500000"), repeat, warm=True),
        )
        line("1% filter (all columns)", timed(lambda: t.to_arrow(filter=one_pct), repeat, warm=True), timed(
            lambda: ds.to_table(filter=one_pct), repeat, warm=True))  # fmt: skip
        line(
            "take 1,000 rows",
            timed(lambda: t.take(take_rows), repeat, warm=True),
            timed(lambda: ds.take(take_rows), repeat, warm=True),
        )
        line(
            "open + full scan",
            timed(lambda: Table.open(ours).to_arrow(), repeat),
            timed(lambda: lance.dataset(theirs).to_table(), repeat),
        )

        # compaction of n fragments of 100 rows each: both tables written once, each
        # compaction timed alone on a fresh copy of its table (the copy is not timed)
        src_ours, src_theirs = write_both(root + "-c", data.slice(0, min(rows, 100 * n)), n)

        def compaction(src: str, compact: Callable[[str], object]) -> tuple[float, float]:
            walls, cpus = [], []
            for _ in range(repeat):
                dst = src + "-run"
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst)
                os.sync()  # the copy's dirty files are not the compaction's to flush (its first fsync would)
                w, c = time.perf_counter(), time.process_time()
                compact(dst)
                walls.append(time.perf_counter() - w)
                cpus.append(time.process_time() - c)
            return statistics.median(walls), statistics.median(cpus)

        theirs = compaction(src_theirs, lambda p: lance.dataset(p).optimize.compact_files())
        for d in DURABILITIES:
            ours_line = compaction(src_ours, lambda p, d=d: Table.open(p, durability=d).compact())
            line(f"compaction of {n:,} small fragments {d}", ours_line, theirs)


def bench_mutations(root: str, rows: int, repeat: int) -> None:
    import lance

    from tessera.catalog import Table

    data = make_data(rows)
    print(f"-- {rows:,} rows in 10 fragments: 20 updates / 20 deletes in a row")

    def run(kind: str, who: str, durability: str = "sync") -> tuple[float, float]:
        """Median over ``repeat`` fresh tables of the time of 20 mutations in a row."""
        walls, cpus = [], []
        for _ in range(repeat):
            ours, theirs = write_both(root, data, 10)
            t, ds = Table.open(ours, durability=durability), lance.dataset(theirs)
            w, c = time.perf_counter(), time.process_time()
            for k in range(20):
                where = f"key = {k * (rows // 20) + 7}"
                target = t if who == "tessera" else ds
                if kind == "update":
                    target.update({"f0": "-1.0"}, where=where)
                else:
                    target.delete(where)
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
        return statistics.median(walls), statistics.median(cpus)

    for kind in ("update", "delete"):
        theirs = run(kind, "pylance")
        for d in DURABILITIES:
            line(f"20 x {kind} one row by filter {d}", run(kind, "tessera", d), theirs)


def bench_versions(root: str, counts: list[int], repeat: int) -> None:
    import lance

    from tessera.catalog import Table

    for n in counts:
        ours, theirs = os.path.join(root, f"tv{n}"), os.path.join(root, f"pv{n}")
        if not os.path.exists(ours):
            t = Table.create(ours, make_data(1))
            ds = lance.write_dataset(make_data(1), theirs)
            for i in range(n - 1):
                t.append(make_data(1, seed=i))
                ds = lance.write_dataset(make_data(1, seed=i), theirs, mode="append")
        print(f"-- a table of {n:,} versions (one-row appends)")
        t, ds = Table.open(ours), lance.dataset(theirs)
        assert len(t.versions()) == len(ds.versions()) == n
        line("versions()", timed(lambda: t.versions(), repeat), timed(lambda: ds.versions(), repeat))
        half = n // 2
        line(
            f"open version {half:,} + count",
            timed(lambda: Table.open(ours, version=half).count_rows(), repeat),
            timed(lambda: lance.dataset(theirs, version=half).count_rows(), repeat),
        )


def bench_process(root: str, rows: int, repeat: int) -> None:
    data = make_data(rows)
    ours, theirs = write_both(root, data, 10)
    py = sys.executable
    ours_code = f"from tessera.catalog import Table; print(Table.open({ours!r}).count_rows('f1 < 500000'))"
    theirs_code = f"import lance; print(lance.dataset({theirs!r}).count_rows('f1 < 500000'))"

    # a user's Python keeps compiled modules: the children do too (this
    # environment may forbid it, and then every child compiles every module)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def child(code: str) -> Callable[[], object]:
        def run() -> None:
            got = subprocess.run([py, "-c", code], capture_output=True, text=True, check=True, env=env)
            assert int(got.stdout.strip()) > 0

        return run

    def timed_child(code: str) -> tuple[float, float]:
        """Median wall and CPU seconds (the child's own, user + system) of ``repeat`` children."""
        child(code)()  # compiles what is not yet compiled
        walls, cpus = [], []
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            w = time.perf_counter()
            child(code)()
            walls.append(time.perf_counter() - w)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        return statistics.median(walls), statistics.median(cpus)

    print(f"-- a new process: import, open, one filtered count ({rows:,} rows)")
    line("new process first filtered count", timed_child(ours_code), timed_child(theirs_code))


def make_wide(rows: int, seed: int = 5) -> pa.Table:
    """Six columns: make_data's four, a small integer and a low-cardinality 64-bit one."""
    rng = np.random.default_rng(seed)
    data = make_data(rows, seed)
    data = data.append_column("small", pa.array(rng.integers(0, 100, rows).astype(np.int8)))
    return data.append_column("code", pa.array(rng.integers(0, 50, rows) * 1_000_003))


def disk_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def bench_write(root: str, rows: int, repeat: int) -> None:
    import lance

    from tessera.catalog import Table

    data = make_wide(rows)
    ours, theirs = os.path.join(root, "w-tessera"), os.path.join(root, "w-pylance")

    def write_ours(durability: str) -> Callable[[], None]:
        def run() -> None:
            shutil.rmtree(ours, ignore_errors=True)
            Table.create(ours, data, durability=durability)

        return run

    def write_theirs() -> None:
        shutil.rmtree(theirs, ignore_errors=True)
        lance.write_dataset(data, theirs)

    print(f"-- bulk write of {rows:,} rows x 6 columns")
    theirs_time = timed(write_theirs, repeat)
    for d in DURABILITIES:
        line(f"bulk write {d}", timed(write_ours(d), repeat), theirs_time)
    a, b = disk_bytes(ours), disk_bytes(theirs)
    print(f"{'bytes on disk':44s} tessera {a / 1e6:9.1f} MB  pylance {b / 1e6:9.1f} MB  {a / b:5.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--fragments", default="100,1000")
    ap.add_argument("--versions", default="100,1000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="fragments,mutations,versions,process,write")
    a = ap.parse_args()
    only = set(a.only.split(","))
    root = tempfile.mkdtemp(prefix="bench-growth-")
    try:
        if "fragments" in only:
            bench_fragments(root, a.rows, [int(x) for x in a.fragments.split(",")], a.repeat)
        if "mutations" in only:
            bench_mutations(root, min(a.rows, 200_000), a.repeat)
        if "versions" in only:
            bench_versions(root, [int(x) for x in a.versions.split(",")], a.repeat)
        if "process" in only:
            bench_process(root, a.rows, a.repeat)
        if "write" in only:
            bench_write(root, a.rows, a.repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(root + "-c", ignore_errors=True)


if __name__ == "__main__":
    main()
