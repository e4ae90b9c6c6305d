"""Spark benchmark: the ``tessera`` data source vs Spark's built-in Parquet, same run.

    python tests/bench/bench_spark.py [--rows 5000000] [--partitions 4] [--repeat 5] [--dir DIR]

Rows: int64 id, float64, ~16-char string, timestamp (``spark.range`` plus
expressions, so the source costs the same for both).  Times, on ``local[2]``
with the default (C2) JIT:

* write: ``df.write.format("tessera").mode("overwrite")`` vs ``df.write.parquet``
* read:  every column materialised into Spark's ``noop`` sink, both formats
* the source alone into ``noop`` (the floor both writers share)
* the floor of *any* Python data source: a writer that drops Spark's batches
  and a reader that yields batches already in memory (``--no-floor`` skips
  them).  What a Python source cannot avoid is Spark's JVM<->Arrow
  conversion, the socket transfer and task set-up; the gap between the floor
  and Tessera is Tessera's own work.

Prints medians, rows/s and Tessera / Parquet throughput ratios (higher is
better for Tessera; the target is >= 0.8).  Not part of the test run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time


def session(arrow_batch_rows: int | None, lift_arrow_byte_cap: bool = True):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from tessera.catalog import spark as tspark

    b = (
        SparkSession.builder.master("local[2]")
        .appName("tessera-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "2")
    )
    if arrow_batch_rows:
        b = b.config("spark.sql.execution.arrow.maxRecordsPerBatch", str(arrow_batch_rows))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    tspark.register(spark, lift_arrow_byte_cap=lift_arrow_byte_cap)
    return spark


def source(spark, rows: int, partitions: int):
    return spark.range(0, rows, numPartitions=partitions).selectExpr(
        "id",
        "cast(pmod(hash(id), 1000003) AS double) / 7.0 AS x",
        "concat('user-', lpad(cast(pmod(hash(id, 1), 100000) AS string), 11, '0')) AS s",
        "timestamp_seconds(1700000000 + id) AS ts",
    )


def floor_source(rows: int, partitions: int, batch_rows: int = 64 * 1024):
    """The do-nothing Python data source (pickled by value to Spark's workers)."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )

    class DropWriter(DataSourceArrowWriter):
        def write(self, iterator):
            for _ in iterator:
                pass
            return WriterCommitMessage()

        def commit(self, messages):
            pass

    class MemoryReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):
            import sys as _sys

            import numpy as np
            import pyarrow as pa

            cache = _sys.__dict__.setdefault("_bench_floor_batches", {})  # built once per worker process
            key = (rows, partitions, batch_rows)
            if key not in cache:
                ids = np.arange(rows // partitions, dtype=np.int64)
                strings = np.char.add("user-", np.char.zfill((ids % 100000).astype(str), 11))
                cache[key] = pa.table(
                    {
                        "id": ids,
                        "x": ids / 7.0,
                        "s": pa.array(strings, pa.string()),
                        "ts": pa.array(1_700_000_000_000_000 + ids * 1_000_000, pa.timestamp("us", tz="UTC")),
                    }
                ).to_batches(max_chunksize=batch_rows)
            yield from cache[key]

    class FloorSource(DataSource):
        @classmethod
        def name(cls):
            return "bench_floor"

        def schema(self):
            return "id bigint, x double, s string, ts timestamp"

        def writer(self, schema, overwrite):
            return DropWriter()

        def reader(self, schema):
            return MemoryReader()

    return FloorSource


def tree_cpu_seconds() -> float | None:
    """CPU seconds (user + system, reaped children included) of this process
    and every descendant: the JVM and its Python workers.  Linux only; CPU
    time is far steadier than wall time on a small shared machine."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        parent, cpu = {}, {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            parent[int(pid)] = int(fields[1])
            cpu[int(pid)] = sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    except (OSError, ValueError, AttributeError):
        return None
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in tree]
        tree.update(kids)
        frontier.extend(kids)
    return sum(cpu.get(p, 0.0) for p in tree)


def timed(fn) -> tuple[float, float | None]:
    c0 = tree_cpu_seconds()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    c1 = tree_cpu_seconds()
    return wall, (c1 - c0 if c0 is not None and c1 is not None else None)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--no-floor", action="store_true", help="skip the do-nothing Python source")
    ap.add_argument(
        "--arrow-batch-rows",
        type=int,
        default=None,
        help="spark.sql.execution.arrow.maxRecordsPerBatch (Spark's default: 10000)",
    )
    ap.add_argument(
        "--keep-arrow-byte-cap",
        action="store_true",
        help="register without lifting spark.sql.execution.arrow.maxBytesPerBatch (Spark's per-row "
        "byte accounting stays on, as in a session that sets the cap itself)",
    )
    args = ap.parse_args(argv)

    spark = session(args.arrow_batch_rows, lift_arrow_byte_cap=not args.keep_arrow_byte_cap)
    scratch = tempfile.mkdtemp(prefix="bench-spark-", dir=args.dir)
    try:
        df = source(spark, args.rows, args.partitions)
        tess, parq = os.path.join(scratch, "tessera"), os.path.join(scratch, "parquet")
        noop = lambda d: d.write.format("noop").mode("overwrite").save()  # noqa: E731
        ops = {
            "source -> noop": lambda: noop(df),
            "write tessera": lambda: df.write.format("tessera").mode("overwrite").save(tess),
            "write parquet": lambda: df.write.mode("overwrite").parquet(parq),
            "read tessera": lambda: noop(spark.read.format("tessera").load(tess)),
            "read parquet": lambda: noop(spark.read.parquet(parq)),
        }
        if not args.no_floor:  # as many read tasks as Tessera plans: one per core
            spark.dataSource.register(floor_source(args.rows, spark.sparkContext.defaultParallelism))
            ops["write floor"] = lambda: df.write.format("bench_floor").mode("append").save()
            ops["read floor"] = lambda: noop(spark.read.format("bench_floor").load())
        # warm-up: JIT, Python workers, planning workers
        small = source(spark, 200_000, args.partitions)
        small.write.format("tessera").mode("overwrite").save(tess)
        small.write.mode("overwrite").parquet(parq)
        noop(spark.read.format("tessera").load(tess))
        noop(spark.read.parquet(parq))
        if not args.no_floor:
            ops["read floor"]()  # builds the in-memory batches in the workers
        times: dict[str, list[float]] = {k: [] for k in ops}
        cpus: dict[str, list[float]] = {k: [] for k in ops}
        for _ in range(args.repeat):
            for name, fn in ops.items():
                wall, cpu = timed(fn)
                times[name].append(wall)
                if cpu is not None:
                    cpus[name].append(cpu)
        med = {k: statistics.median(v) for k, v in times.items()}
        cpu_med = {k: statistics.median(v) for k, v in cpus.items() if v}

        from tessera.catalog import Table

        tess_bytes = sum(df.file_size_bytes for f in Table.open(tess).fragments for df in f.files)
        parq_bytes = sum(os.path.getsize(os.path.join(parq, f)) for f in os.listdir(parq) if f.endswith(".parquet"))

        print(
            f"\n{args.rows:,} rows x (int64, float64, string, timestamp), {args.partitions} partitions, "
            f"local[2], median of {args.repeat}; "
            f"arrow.maxBytesPerBatch={spark.conf.get('spark.sql.execution.arrow.maxBytesPerBatch')}"
        )
        print(f"{'operation':<16} {'seconds':>8} {'M rows/s':>9} {'CPU s':>7}   runs (wall seconds)")
        for name, t in med.items():
            runs = ", ".join(f"{x:.2f}" for x in times[name])
            cpu = f"{cpu_med[name]:>7.2f}" if name in cpu_med else f"{'n/a':>7}"
            print(f"{name:<16} {t:>8.2f} {args.rows / t / 1e6:>9.2f} {cpu}   [{runs}]")
        print(
            f"\nTessera / Parquet throughput: write {med['write parquet'] / med['write tessera']:.2f}x, "
            f"read {med['read parquet'] / med['read tessera']:.2f}x (target >= 0.8x)"
        )
        if {"write tessera", "write parquet", "read tessera", "read parquet"} <= cpu_med.keys():
            print(
                "Tessera / Parquet by CPU seconds:    "
                f"write {cpu_med['write parquet'] / cpu_med['write tessera']:.2f}x, "
                f"read {cpu_med['read parquet'] / cpu_med['read tessera']:.2f}x"
            )
        if not args.no_floor:
            print(
                f"do-nothing Python source / Parquet:  write {med['write parquet'] / med['write floor']:.2f}x, "
                f"read {med['read parquet'] / med['read floor']:.2f}x (the ceiling for any Python source)"
            )
        print(f"data files (latest version): tessera {tess_bytes / 1e6:.1f} MB, parquet {parq_bytes / 1e6:.1f} MB")
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
