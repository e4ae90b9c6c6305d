"""The read half of the ``tessera`` Spark data source.

``DataSource.reader()`` (a planning worker) resolves the version once — the
latest, or the ``version``/``tag`` option — and everything after reads that
version.  With pushdown on (:class:`TesseraFilteringReader`),
``pushFilters`` keeps the filters it can apply exactly and hands the rest
back; ``partitions()`` then prunes fragments with the per-file statistics
(:mod:`tessera.catalog.spark.stats`).  The data source refuses pushdown on PySpark
versions that reuse a pushed plan for other queries of the same DataFrame
(all so far: see :func:`tessera.catalog.spark.pushdown_refusal`), so this reader is
only reached by tests and by a Spark where pushdown is known to be safe.  ``partitions()`` cuts the rest into as few
tasks as keep every core busy (:func:`plan_partitions`: several small
fragments per task, large fragments split by row range), and ``read()``
(executors) reads the filter columns first, skips slices where nothing
matches, then reads the other columns and yields Arrow batches cast to
exactly the schema Spark expects.

Pickled to the executors: the reader (a :class:`ReadPlan` of plain values —
URI, storage options, version, serialized field protobufs, pushed filters)
and each partition (serialized ``DataFragment``s, each with a row range).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

try:
    from pyspark.sql.datasource import DataSourceReader, InputPartition
except ImportError as _exc:  # pragma: no cover - pyspark is an optional dependency
    raise ImportError("the tessera Spark data source needs pyspark>=4.1: pip install 'tessera[spark]'") from _exc

from tessera.catalog.errors import UnknownColumnError
from tessera.catalog.fragments import FragmentReader
from tessera.catalog.scan import mask_of
from tessera.commit.committer import fragment_live_rows
from tessera.format import schema as lschema
from tessera.format.protos import file_pb2, table_pb2
from tessera.stores.object_store import open_object_store

from .stats import Pushed, prune, translate
from .types import spark_arrow_schema, to_spark_batch

log = logging.getLogger(__name__)

DEFAULT_READ_BATCH_ROWS = 64 * 1024
DEFAULT_MAX_PARTITION_BYTES = 128 << 20  # as Spark's spark.sql.files.maxPartitionBytes
DEFAULT_OPEN_COST_BYTES = 4 << 20  # as Spark's spark.sql.files.openCostInBytes


class ReadPartition(InputPartition):
    """The rows one task reads: ``(serialized DataFragment, start, stop)``
    pieces, in table order."""

    def __init__(self, pieces: list[tuple[bytes, int, int]]) -> None:
        super().__init__(None)
        self.pieces = pieces

    def __repr__(self) -> str:
        rows = sum(stop - start for _, start, stop in self.pieces)
        return f"ReadPartition({len(self.pieces)} pieces, {rows} rows)"


@dataclass(frozen=True)
class PartitionSizing:
    """How :func:`plan_partitions` cuts a scan into tasks: Spark's own rule for
    files (``maxPartitionBytes``, ``openCostInBytes``, at least
    ``min_partitions`` when there is enough data), plus an optional cap on rows."""

    min_partitions: int = 1
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    open_cost_bytes: int = DEFAULT_OPEN_COST_BYTES
    rows_per_partition: int | None = None


def _fragment_bytes(frag: table_pb2.DataFragment) -> int:
    """The fragment's data file bytes (8 per value when a writer did not record sizes)."""
    size = sum(df.file_size_bytes for df in frag.files)
    return size if size > 0 else frag.physical_rows * 8 * max(1, sum(len(df.fields) for df in frag.files))


def plan_partitions(frags: list[table_pb2.DataFragment], sizing: PartitionSizing) -> list[list[tuple[int, int, int]]]:
    """Cut the live rows of ``frags`` into read tasks: ``[(fragment index, start, stop), ...]`` each.

    Every task pays a Python worker's fixed start-up cost (tens of ms), so a
    scan gets as few tasks as keep every core busy: like Spark's file sources,
    a split is ``min(max_partition_bytes, max(open_cost, total / min_partitions))``
    bytes, where every piece also costs ``open_cost``.  Fragments larger than a
    split are cut into equal row ranges; consecutive pieces are packed into one
    task while they fit (and stay under ``rows_per_partition``), so tasks read
    the table in order."""
    live = [(i, f) for i, f in enumerate(frags) if f.physical_rows and fragment_live_rows(f) > 0]
    if not live:
        return []
    total = sum(_fragment_bytes(f) + sizing.open_cost_bytes for _, f in live)
    split = min(sizing.max_partition_bytes, max(sizing.open_cost_bytes, total // max(1, sizing.min_partitions)))
    pieces: list[tuple[int, int, int, int]] = []  # (fragment index, start, stop, bytes)
    for i, f in live:
        rows, size = f.physical_rows, _fragment_bytes(f)
        n = max(1, math.ceil(size / split))
        if sizing.rows_per_partition:
            n = max(n, math.ceil(rows / sizing.rows_per_partition))
        n = min(n, rows)
        step = math.ceil(rows / n)
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            pieces.append((i, start, stop, math.ceil(size * (stop - start) / rows)))
    tasks: list[list[tuple[int, int, int]]] = []
    cur: list[tuple[int, int, int]] = []
    cur_bytes = cur_rows = 0
    for i, start, stop, size in pieces:
        full = cur_bytes + size > split
        if sizing.rows_per_partition and cur_rows + (stop - start) > sizing.rows_per_partition:
            full = True
        if cur and full:
            tasks.append(cur)
            cur, cur_bytes, cur_rows = [], 0, 0
        cur.append((i, start, stop))
        cur_bytes += size + sizing.open_cost_bytes
        cur_rows += stop - start
    if cur:
        tasks.append(cur)
    return tasks


@dataclass
class ReadPlan:
    """A pinned version and the columns to produce, as plain picklable values."""

    uri: str
    storage_options: dict[str, str]
    version: int
    field_protos: list[bytes]  # the whole table schema (for the columns Spark asks for)
    schema_metadata: dict
    columns: list[str]  # the output columns, in Spark's order
    batch_rows: int = DEFAULT_READ_BATCH_ROWS
    sizing: PartitionSizing = field(default_factory=PartitionSizing)
    pushed: list[Pushed] = field(default_factory=list)

    def fields(self) -> list[lschema.LanceField]:
        return lschema.fields_from_protos(file_pb2.Field.FromString(b) for b in self.field_protos)

    def arrow_schema(self) -> pa.Schema:
        return lschema.to_arrow_schema(self.fields(), self.schema_metadata)


class TesseraReader(DataSourceReader):
    """Plans and reads one pinned version of a table."""

    def __init__(self, plan: ReadPlan, spark_schema, fragments: list[bytes]) -> None:
        self.plan = plan
        self.spark_schema = spark_schema
        self._fragments = fragments  # planning only; partitions carry their own

    # -- planning worker --------------------------------------------------------------------

    def partitions(self):
        p = self.plan
        frags = [table_pb2.DataFragment.FromString(b) for b in self._fragments]
        if p.pushed:
            store = open_object_store(p.uri, p.storage_options)
            kept = prune(store, frags, p.pushed, p.arrow_schema())
            log.info(
                "tessera read %s@%d: %d of %d fragments after pruning with %s",
                p.uri,
                p.version,
                len(kept),
                len(frags),
                p.pushed,
            )
            frags = kept
        tasks = plan_partitions(frags, p.sizing)
        data = {i: frags[i].SerializeToString() for task in tasks for i, _, _ in task}
        self._fragments = []  # the reader is pickled to every task next: partitions carry their own
        return [ReadPartition([(data[i], start, stop) for i, start, stop in task]) for task in tasks]

    # -- executors ----------------------------------------------------------------------------

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadPartition):
            return  # Spark's stand-in InputPartition(None) when there is nothing to read
        from .worker_memory import keep_freed_memory

        keep_freed_memory()
        target = spark_arrow_schema(self.spark_schema)
        for fragment, start, stop in partition.pieces:
            yield from read_range(self.plan, target, fragment, start, stop)


class TesseraFilteringReader(TesseraReader):
    """A :class:`TesseraReader` with filter pushdown (needs the session conf
    ``spark.sql.python.filterPushdown.enabled=true``, which ``register`` sets)."""

    def pushFilters(self, filters):  # noqa: N802 - pyspark's name
        """Keep what can be applied exactly in ``read()``; hand back the rest."""
        schema = self.plan.arrow_schema()
        ids = {f.name: f.id for f in self.plan.fields()}
        for flt in filters:
            pushed = translate(flt, schema, ids)
            if pushed is None:
                yield flt
            else:
                self.plan.pushed.append(pushed)


def read_range(plan: ReadPlan, target: pa.Schema, fragment: bytes, first: int, last: int) -> Iterator[pa.RecordBatch]:
    """Rows ``[first, last)`` of a serialized fragment that pass the pushed
    filters, as batches of ``target``."""
    store = open_object_store(plan.uri, plan.storage_options)
    frag = table_pb2.DataFragment.FromString(fragment)
    by_name = {f.name: f for f in plan.fields()}
    schema = plan.arrow_schema()
    missing = [c for c in plan.columns if c not in by_name]
    if missing:
        raise UnknownColumnError(f"{plan.uri} version {plan.version} has no columns {missing}")
    filter_cols = sorted({p.column for p in plan.pushed}, key=list(by_name).index)
    expr = None
    for p in plan.pushed:
        e = p.expression(schema.field(p.column).type)
        expr = e if expr is None else expr & e
    rest = [c for c in plan.columns if c not in filter_cols]
    freader = FragmentReader(store, frag, [by_name[c] for c in filter_cols])
    # the second reader shares the first one's open files
    rreader = FragmentReader(store, frag, [by_name[c] for c in rest], _readers=freader._readers)
    try:
        for start in range(first, last, plan.batch_rows):
            stop = min(last, start + plan.batch_rows)
            live = freader.live_mask(start, stop)
            cols: dict[str, pa.Array] = {}
            keep = live
            if expr is not None:
                arrays = freader.read(start, stop)
                batch = pa.RecordBatch.from_arrays(arrays, names=filter_cols)
                m = mask_of(expr, batch)
                keep = m if keep is None else keep & m
                if not keep.any():
                    continue
                cols.update(zip(filter_cols, arrays))
            elif keep is not None and not keep.any():
                continue
            if rest:
                cols.update(zip(rest, rreader.read(start, stop)))
            arrays = [cols[c] for c in plan.columns]
            if keep is not None and not keep.all():
                sel = pa.array(np.flatnonzero(keep))
                arrays = [a.take(sel) for a in arrays]
            yield to_spark_batch(arrays, target)
    finally:
        freader.close()
