"""A Tessera table as a Structured Streaming source: each micro-batch is the
versions committed since the last one.

``spark.readStream.format("tessera").load(uri)`` starts with the table's rows
at the latest version (the first batch), then delivers the rows each later
version appends, as Delta's streaming source does.  A version that updates
or deletes rows cannot be followed as appends: the query fails saying so,
unless ``skipChangeCommits`` (Delta's name) skips such versions whole.  With
``readChangeFeed`` the stream is the change feed instead
(:mod:`tessera.catalog.table.changes`), from ``startingVersion`` on: every
insert, update and delete with ``_change_type``, ``_commit_version`` and
``_commit_timestamp``.  With ``startingVersion`` and no feed, the stream
starts with the rows that version appended rather than the whole table.

An offset is ``{"version": v}``: every change up to version ``v`` has been
delivered.  Versions are read from storage (every committed version's
manifest is there); a batch is cut into tasks by fragments (the first) or by
ranges of versions (the others), up to ``min_partitions``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from tessera.catalog.errors import SparkOptionError, SparkStreamError
from tessera.catalog.table.changes import CHANGE_TYPE
from tessera.catalog.table.changes import changes as table_changes
from tessera.commit import NativeCommitHandler
from tessera.stores.registry import open_object_store

from .errors import reported
from .types import spark_arrow_schema, to_spark_batch

__all__ = ["StreamPlan", "TesseraStreamReader"]


@dataclass(frozen=True)
class StreamPlan:
    uri: str
    storage_options: dict[str, str]
    columns: list[str]
    #: option startingVersion (None: start with the whole table at the latest version)
    starting: int | None
    feed: bool
    skip_changes: bool
    tasks: int


class _Snapshot(InputPartition):
    def __init__(self, version: int, fragment_ids: list[int]) -> None:
        super().__init__((version, fragment_ids))
        self.version, self.fragment_ids = version, fragment_ids


class _Changes(InputPartition):
    def __init__(self, first: int, last: int) -> None:
        super().__init__((first, last))
        self.first, self.last = first, last


def _chunks(items: list, k: int) -> list[list]:
    k = max(1, min(k, len(items)))
    return [items[len(items) * i // k : len(items) * (i + 1) // k] for i in range(k)]


class TesseraStreamReader(DataSourceStreamReader):
    """Micro-batches of the versions a table commits (see the module)."""

    def __init__(self, plan: StreamPlan, spark_schema) -> None:
        self.plan = plan
        self.spark_schema = spark_schema

    def _open(self, version: int | None = None):
        from tessera.catalog.table.snapshot import TableSnapshot

        store = open_object_store(self.plan.uri, self.plan.storage_options)
        handler = NativeCommitHandler()  # committed manifests, read from storage
        return TableSnapshot(store, handler.load(store, version), handler)

    @reported
    def initialOffset(self) -> dict:  # noqa: N802 - Spark's name
        return {"version": (self.plan.starting - 1) if self.plan.starting is not None else 0}

    @reported
    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:  # noqa: N802 - Spark's name
        """The latest version (every version since ``start`` is admitted: no read limit)."""
        return {"version": self._open().version}

    @reported
    def partitions(self, start: dict, end: dict):
        a, b = int(start["version"]), int(end["version"])
        if b <= a:
            return []
        if a == 0 and self.plan.starting is None:  # the first batch: the table as it is at version b
            ids = [f.id for f in self._open(b).fragments]
            return [_Snapshot(b, chunk) for chunk in _chunks(ids, self.plan.tasks) if chunk] or [_Snapshot(b, [])]
        versions = list(range(a + 1, b + 1))
        return [_Changes(c[0], c[-1]) for c in _chunks(versions, self.plan.tasks)]

    @reported
    def read(self, partition) -> Iterator[pa.RecordBatch]:
        target = spark_arrow_schema(self.spark_schema)
        got = self._snapshot(partition) if isinstance(partition, _Snapshot) else self._changes(partition)
        for batch in got.select(target.names).to_batches(max_chunksize=64 * 1024):
            yield to_spark_batch(batch.columns, target)

    def _snapshot(self, part: _Snapshot) -> pa.Table:
        from tessera.catalog.query.scan import Scan

        snap = self._open(part.version)
        wanted = set(part.fragment_ids)
        frags = [f for f in snap.fragments if f.id in wanted]
        scan = Scan(snap.store, frags, snap.fields, snap.schema, columns=self.plan.columns)
        return pa.Table.from_batches(list(scan.batches()), schema=scan.schema)

    def _changes(self, part: _Changes) -> pa.Table:
        p = self.plan
        got = table_changes(self._open(part.last), part.first, part.last, p.columns)
        if p.feed:
            return got
        kinds = got.column(CHANGE_TYPE).to_pylist()
        versions = got.column("_commit_version").to_pylist()
        changed = sorted({v for k, v in zip(kinds, versions) if k != "insert"})
        if changed and not p.skip_changes:
            raise SparkStreamError(
                f"{p.uri} version {changed[0]} updates or deletes rows: a stream of the table's appends cannot "
                "follow it; read the change feed (option readChangeFeed) or skip such versions whole "
                "(option skipChangeCommits)"
            )
        keep = pa.array([k == "insert" and v not in changed for k, v in zip(kinds, versions)])
        return got.filter(keep).select(p.columns)


def stream_plan(opts, table, columns: list[str], tasks: int) -> StreamPlan:
    """The plan of a streaming read of ``table`` (options checked)."""
    from .changes import version_option, wants_feed

    def flag(key: str) -> bool:
        raw = opts.get(key)
        if raw is None:
            return False
        if raw.lower() not in ("true", "false"):
            raise SparkOptionError(f"option {key} must be true or false, got {raw!r}")
        return raw.lower() == "true"

    for key in ("endingVersion", "version", "tag", "filter", "pushdown"):
        if opts.get(key) is not None:
            raise SparkOptionError(f"option {key} does not apply to a streaming read")
    starting = version_option(opts, "startingVersion")
    feed = wants_feed(opts)
    if feed and starting is None:
        raise SparkOptionError("a streaming change feed read (readChangeFeed) needs option startingVersion")
    return StreamPlan(
        uri=table.uri,
        storage_options={},
        columns=columns,
        starting=starting,
        feed=feed,
        skip_changes=flag("skipChangeCommits"),
        tasks=tasks,
    )
