#!/usr/bin/env python3
"""Spark job: overwrite a Tessera table, as one new version.

The new contents are the rows of a source — another Tessera table, a Parquet
path, or (by default) the table itself — that match an optional SQL
``--where``; for example, keep only the last 30 days:

    spark-submit deploy/spark_overwrite_table.py \\
        --table s3://bucket/events --commit-store redis://redis:6379/0 \\
        --storage-option endpoint_url=http://minio:9000 \\
        --where "day >= DATE'2024-04-01'"

Overwriting a table from itself is safe: the job reads the version current
when it started, and older versions (and their files) stay until cleaned up.
Concurrent appends committed while the job runs are replaced by the overwrite.
Prints one JSON line: ``{"table": ..., "version": ..., "rows": ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the shared helpers next to this file
from spark_append_events import get_spark, table_arguments, writer_options  # noqa: E402


def main(argv: Sequence[str] | None = None, spark=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    table_arguments(parser)
    parser.add_argument("--source", help="read from this URI instead of the table itself")
    parser.add_argument("--source-format", default="tessera", help="tessera (default) or any Spark format (parquet...)")
    parser.add_argument("--where", help="SQL condition selecting the rows to keep")
    parser.add_argument("--partitions", type=int, help="repartition to this many data files before writing")
    args = parser.parse_args(argv)

    from tessera.catalog import Table

    spark = spark or get_spark("tessera-overwrite-table")
    opts = writer_options(args)
    reader = spark.read.format(args.source_format)
    if args.source_format == "tessera" and not args.source:
        reader = reader.options(**opts)
    df = reader.load(args.source or args.table)
    if args.where:
        df = df.where(args.where)
    if args.partitions:
        df = df.repartition(args.partitions)
    df.write.format("tessera").mode("overwrite").options(**opts).save(args.table)

    table = Table.open(args.table, commit_store=args.commit_store, storage_options=dict(args.storage_option))
    summary = {"table": args.table, "version": table.version, "rows": table.count_rows()}
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
