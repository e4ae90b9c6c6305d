"""Spark benchmark: the ``tessera`` data source vs Spark's built-in Parquet, same run.

    python tests/bench/bench_spark.py [--rows 5000000] [--partitions 4] [--repeat 5] [--dir DIR]

Rows: int64 id, float64, ~16-char string, timestamp (``spark.range`` plus
expressions, so the source costs the same for both).  Times, on ``local[2]``
with the default (C2) JIT:

* write: ``df.write.format("tessera").mode("overwrite")`` vs ``df.write.parquet``
* read:  every column materialised into Spark's ``noop`` sink, both formats
* the source alone into ``noop`` (the floor both writers share)

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


def session(arrow_batch_rows: int | None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import catalog.spark

    b = (SparkSession.builder.master("local[2]").appName("tessera-bench")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "4g")
         .config("spark.sql.shuffle.partitions", "2"))
    if arrow_batch_rows:
        b = b.config("spark.sql.execution.arrow.maxRecordsPerBatch", str(arrow_batch_rows))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    catalog.spark.register(spark)
    return spark


def source(spark, rows: int, partitions: int):
    return spark.range(0, rows, numPartitions=partitions).selectExpr(
        "id",
        "cast(pmod(hash(id), 1000003) AS double) / 7.0 AS x",
        "concat('user-', lpad(cast(pmod(hash(id, 1), 100000) AS string), 11, '0')) AS s",
        "timestamp_seconds(1700000000 + id) AS ts",
    )


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--arrow-batch-rows", type=int, default=None,
                    help="spark.sql.execution.arrow.maxRecordsPerBatch (Spark's default: 10000)")
    args = ap.parse_args(argv)

    spark = session(args.arrow_batch_rows)
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
        # warm-up: JIT, Python workers, planning workers
        small = source(spark, 200_000, args.partitions)
        small.write.format("tessera").mode("overwrite").save(tess)
        small.write.mode("overwrite").parquet(parq)
        noop(spark.read.format("tessera").load(tess))
        noop(spark.read.parquet(parq))
        times: dict[str, list[float]] = {k: [] for k in ops}
        for _ in range(args.repeat):
            for name, fn in ops.items():
                times[name].append(timed(fn))
        med = {k: statistics.median(v) for k, v in times.items()}

        from catalog import Table

        tess_bytes = sum(df.file_size_bytes for f in Table.open(tess).fragments for df in f.files)
        parq_bytes = sum(os.path.getsize(os.path.join(parq, f)) for f in os.listdir(parq) if f.endswith(".parquet"))

        print(f"\n{args.rows:,} rows x (int64, float64, string, timestamp), {args.partitions} partitions, "
              f"local[2], median of {args.repeat}")
        print(f"{'operation':<16} {'seconds':>8} {'M rows/s':>9}   runs")
        for name, t in med.items():
            runs = ", ".join(f"{x:.2f}" for x in times[name])
            print(f"{name:<16} {t:>8.2f} {args.rows / t / 1e6:>9.2f}   [{runs}]")
        print(f"\nTessera / Parquet throughput: write {med['write parquet'] / med['write tessera']:.2f}x, "
              f"read {med['read parquet'] / med['read tessera']:.2f}x (target >= 0.8x)")
        print(f"data files (latest version): tessera {tess_bytes / 1e6:.1f} MB, parquet {parq_bytes / 1e6:.1f} MB")
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
