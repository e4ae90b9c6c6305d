"""The change data feed as a Spark read: ``.option("readChangeFeed", "true")``
with ``startingVersion`` (required) and ``endingVersion`` (default: the
version the read opens, the latest unless ``version``/``tag`` say otherwise),
as Delta's Spark reader names them.  The rows are ``Table.changes``'
(:mod:`tessera.catalog.table.changes`): the table's columns (or the
``columns`` option's) with ``_change_type``, ``_commit_version`` and
``_commit_timestamp``.

The versions are cut into contiguous ranges, one task each (up to
``min_partitions``); a task reads its range's manifests from storage (every
committed version's manifest is there) and only the fragments and rows they
changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from tessera.catalog.errors import SparkOptionError
from tessera.catalog.table.changes import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from tessera.catalog.table.changes import changes as table_changes
from tessera.commit import NativeCommitHandler
from tessera.stores.registry import open_object_store

from .errors import reported
from .options import SparkOptions
from .types import spark_arrow_schema, to_spark_batch

__all__ = ["ChangeFeedReader", "change_columns", "feed_range", "version_option", "wants_feed"]

#: the read options of a change feed (Delta's names), besides the location's and ``columns``
FEED_OPTIONS = ("readChangeFeed", "startingVersion", "endingVersion")
#: read options that do not apply to a change feed
_NOT_WITH_FEED = ("filter", "pushdown", "rows_per_partition", "max_partition_bytes", "read_stats_dir")


def wants_feed(opts: SparkOptions) -> bool:
    raw = opts.get("readChangeFeed")
    if raw is None:
        return False
    if raw.lower() not in ("true", "false"):
        raise SparkOptionError(f"option readChangeFeed must be true or false, got {raw!r}")
    return raw.lower() == "true"


def version_option(opts: SparkOptions, key: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SparkOptionError(f"option {key} must be a version number, got {raw!r}") from None
    if value < 1:
        raise SparkOptionError(f"option {key} must be a version number (1 or more), got {raw!r}")
    return value


def feed_range(opts: SparkOptions, opened: int) -> tuple[int, int]:
    """(first, last) version of a change-feed read of a table opened at version ``opened``."""
    for key in _NOT_WITH_FEED:
        if opts.get(key) is not None:
            raise SparkOptionError(f"option {key} does not apply to a change feed read (readChangeFeed)")
    first = version_option(opts, "startingVersion")
    if first is None:
        raise SparkOptionError("a change feed read (readChangeFeed) needs option startingVersion")
    last = version_option(opts, "endingVersion") or opened
    if last > opened:
        raise SparkOptionError(f"option endingVersion {last} is after the table's version {opened}")
    if first > last:
        raise SparkOptionError(f"option startingVersion {first} is after endingVersion {last}")
    return first, last


def change_columns():
    """The Spark fields the feed adds to the table's columns."""
    from pyspark.sql import types as T

    return [
        T.StructField(CHANGE_TYPE, T.StringType(), False),
        T.StructField(COMMIT_VERSION, T.LongType(), False),
        T.StructField(COMMIT_TIMESTAMP, T.TimestampType(), False),
    ]


class FeedPartition(InputPartition):
    def __init__(self, first: int, last: int) -> None:
        super().__init__((first, last))
        self.first, self.last = first, last


@dataclass(frozen=True)
class FeedPlan:
    uri: str
    storage_options: dict[str, str]
    first: int
    last: int
    columns: list[str]
    tasks: int


class ChangeFeedReader(DataSourceReader):
    """Reads versions ``first`` to ``last`` of a table's change feed."""

    def __init__(self, plan: FeedPlan, spark_schema) -> None:
        self.plan = plan
        self.spark_schema = spark_schema

    @reported
    def partitions(self):
        p = self.plan
        n = p.last - p.first + 1
        k = max(1, min(p.tasks, n))
        bounds = [p.first + (n * i) // k for i in range(k + 1)]
        return [FeedPartition(a, b - 1) for a, b in zip(bounds, bounds[1:]) if b > a]

    @reported
    def read(self, partition) -> Iterator[pa.RecordBatch]:
        from tessera.catalog.table.snapshot import TableSnapshot

        p = self.plan
        store = open_object_store(p.uri, p.storage_options)
        handler = NativeCommitHandler()  # committed manifests, read from storage
        snap = TableSnapshot(store, handler.load(store, p.last), handler)
        got = table_changes(snap, partition.first, partition.last, p.columns)
        target = spark_arrow_schema(self.spark_schema)
        got = got.select(target.names)
        for batch in got.to_batches(max_chunksize=64 * 1024):
            yield to_spark_batch(batch.columns, target)
