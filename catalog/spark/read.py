"""The read half of the ``tessera`` Spark data source.

``DataSource.reader()`` (a planning worker) resolves the version once — the
latest, or the ``version``/``tag`` option — and everything after reads that
version.  With pushdown on (:class:`TesseraFilteringReader`),
``pushFilters`` keeps the filters it can apply exactly and hands the rest
back; ``partitions()`` then reads the table's zone maps (ZONEMAP indices)
once and prunes with the pushed filters' range terms, as ``Table.scanner``
does (:func:`tessera.catalog.query.pruning.terms_pruner`): fragments no zone can
match get no task, and each task is handed only the row ranges of the zones
that may match.  The data source refuses pushdown on PySpark
versions that reuse a pushed plan for other queries of the same DataFrame
(all so far: see :func:`tessera.catalog.spark.pushdown_refusal`), so this reader is
only reached by tests and by a Spark where pushdown is known to be safe.  ``partitions()`` cuts the rest into as few
tasks as keep every core busy (:func:`plan_partitions`: several small
fragments per task, large fragments split by row range), and ``read()``
(executors) reads the filter columns first, skips slices where nothing
matches, then reads the other columns and yields Arrow batches cast to
exactly the schema Spark expects; the pushed filters are applied exactly to
every row read.

Pickled to the executors: the reader (a :class:`ReadPlan` of plain values —
URI, storage options, version, serialized field protobufs, pushed filters)
and each partition (serialized ``DataFragment``s, each with a row range).

With the ``read_stats_dir`` option, every task writes what it read (pieces,
fragments, rows, bytes read from data files, as ``Scan.stats`` counts them)
to a JSON file in that directory on its executor's file system: how much
pruning saved, where Spark's own metrics cannot see inside a Python source.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

try:
    from pyspark.sql.datasource import DataSourceReader, InputPartition
except ImportError as _exc:  # pragma: no cover - pyspark is an optional dependency
    raise ImportError("the tessera Spark data source needs pyspark>=4.1: pip install 'tessera[spark]'") from _exc

from tessera.catalog.errors import InvalidArgumentError, SparkOptionError, UnknownColumnError
from tessera.catalog.query.scan import mask_of, merge_ranges
from tessera.commit import fragment_live_rows
from tessera.format.file import schema as lschema
from tessera.format.protos import file_pb2, table_pb2
from tessera.format.table.fragments import FragmentReader
from tessera.stores.registry import open_object_store

from .errors import reported
from .stats import Pushed, range_terms_of, translate
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


def _spans(frag: table_pb2.DataFragment, ranges: Sequence[tuple[int, int]] | None) -> list[tuple[int, int]]:
    """``ranges`` clipped to the fragment's rows, sorted and merged (None: all its rows)."""
    return merge_ranges(ranges, frag.physical_rows)


def plan_partitions(
    frags: list[table_pb2.DataFragment],
    sizing: PartitionSizing,
    ranges: Sequence[Sequence[tuple[int, int]] | None] | None = None,
) -> list[list[tuple[int, int, int]]]:
    """Cut the live rows of ``frags`` into read tasks: ``[(fragment index, start, stop), ...]`` each.

    ``ranges[i]`` (when given) are the row ranges of ``frags[i]`` to read
    (None: all its rows, []: none): what zone maps left of the fragment.

    Every task pays a Python worker's fixed start-up cost (tens of ms), so a
    scan gets as few tasks as keep every core busy: like Spark's file sources,
    a split is ``min(max_partition_bytes, max(open_cost, total / min_partitions))``
    bytes, where every piece also costs ``open_cost``.  Fragments larger than a
    split are cut into equal row ranges; consecutive pieces are packed into one
    task while they fit (and stay under ``rows_per_partition``), so tasks read
    the table in order."""
    if ranges is not None and len(ranges) != len(frags):
        raise InvalidArgumentError(f"{len(ranges)} row range lists for {len(frags)} fragments")
    wanted: list[tuple[int, table_pb2.DataFragment, list[tuple[int, int]], int]] = []
    for i, f in enumerate(frags):
        if not f.physical_rows or fragment_live_rows(f) <= 0:
            continue
        spans = _spans(f, ranges[i] if ranges is not None else None)
        if spans:  # the bytes of the rows to read, in proportion
            rows = sum(b - a for a, b in spans)
            wanted.append((i, f, spans, math.ceil(_fragment_bytes(f) * rows / f.physical_rows)))
    if not wanted:
        return []
    total = sum(size + sizing.open_cost_bytes for *_, size in wanted)
    split = min(sizing.max_partition_bytes, max(sizing.open_cost_bytes, total // max(1, sizing.min_partitions)))
    pieces: list[tuple[int, int, int, int]] = []  # (fragment index, start, stop, bytes)
    for i, _, spans, size in wanted:
        rows = sum(b - a for a, b in spans)
        n = max(1, math.ceil(size / split))
        if sizing.rows_per_partition:
            n = max(n, math.ceil(rows / sizing.rows_per_partition))
        n = min(n, rows)
        step = math.ceil(rows / n)
        for a, b in spans:
            for start in range(a, b, step):
                stop = min(b, start + step)
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
    #: option ``read_stats_dir``: where each task writes what it read (a JSON file)
    read_stats_dir: str | None = None
    #: option ``filter``: a SQL filter applied exactly to every row read, and
    #: whose range terms prune with the zone maps at planning
    filter_sql: str | None = None

    def fields(self) -> list[lschema.LanceField]:
        return lschema.fields_from_protos(file_pb2.Field.FromString(b) for b in self.field_protos)

    def arrow_schema(self) -> pa.Schema:
        return lschema.to_arrow_schema(self.fields(), self.schema_metadata)


class TesseraReader(DataSourceReader):
    """Plans and reads one pinned version of a table."""

    def __init__(
        self, plan: ReadPlan, spark_schema, fragments: list[bytes], index_section: bytes | None = None
    ) -> None:
        self.plan = plan
        self.spark_schema = spark_schema
        self._fragments = fragments  # planning only; partitions carry their own
        self._index_section = index_section  # planning only: the version's indices (zone maps)

    # -- planning worker --------------------------------------------------------------------

    @reported
    def partitions(self):
        p = self.plan
        frags = [table_pb2.DataFragment.FromString(b) for b in self._fragments]
        ranges = self._zone_ranges(frags) if p.pushed or p.filter_sql else None
        tasks = plan_partitions(frags, p.sizing, ranges)
        data = {i: frags[i].SerializeToString() for task in tasks for i, _, _ in task}
        # the reader is pickled to every task next: partitions carry their own fragments
        self._fragments, self._index_section = [], None
        return [ReadPartition([(data[i], start, stop) for i, start, stop in task]) for task in tasks]

    def _zone_ranges(self, frags: list[table_pb2.DataFragment]) -> list[list[tuple[int, int]] | None] | None:
        """Per fragment, the row ranges the pushed filters' range terms leave
        after the table's zone maps (None: read it whole); None: no pruning."""
        from tessera.catalog.query.pruning import terms_pruner

        p = self.plan
        terms = range_terms_of(p.pushed, p.arrow_schema())
        if p.filter_sql:
            from tessera.catalog.query.predicate import range_terms

            terms = [*terms, *range_terms(p.filter_sql, p.arrow_schema())]
        if not terms or not self._index_section:
            return None
        store = open_object_store(p.uri, p.storage_options)
        row_ranges = terms_pruner(store, self._index_section, p.fields(), terms, frags)
        if row_ranges is None:
            return None
        ranges = [row_ranges(f) for f in frags]
        log.info(
            "tessera read %s@%d: %d of %d fragments, %d of %d rows after zone maps with %s",
            p.uri,
            p.version,
            sum(r is None or bool(_spans(f, r)) for f, r in zip(frags, ranges)),
            len(frags),
            sum(sum(b - a for a, b in _spans(f, r)) for f, r in zip(frags, ranges)),
            sum(f.physical_rows for f in frags),
            terms,
        )
        return ranges

    # -- executors ----------------------------------------------------------------------------

    @reported
    def read(self, partition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadPartition):
            return  # Spark's stand-in InputPartition(None) when there is nothing to read
        from .worker_memory import keep_freed_memory

        keep_freed_memory()
        target = spark_arrow_schema(self.spark_schema)
        stats: dict[str, int] = {"pieces": len(partition.pieces), "fragments": 0, "rows": 0, "bytes_read": 0}
        # consecutive pieces of one fragment (its zones' row ranges) share its open files
        groups: list[tuple[bytes, list[tuple[int, int]]]] = []
        for fragment, start, stop in partition.pieces:
            if groups and (groups[-1][0] is fragment or groups[-1][0] == fragment):
                groups[-1][1].append((start, stop))
            else:
                groups.append((fragment, [(start, stop)]))
        for fragment, ranges in groups:
            stats["fragments"] += 1
            stats["rows"] += sum(b - a for a, b in ranges)
            yield from read_ranges(self.plan, target, fragment, ranges, stats)
        if self.plan.read_stats_dir:
            _write_read_stats(self.plan.read_stats_dir, stats)


class TesseraFilteringReader(TesseraReader):
    """A :class:`TesseraReader` with filter pushdown (needs the session conf
    ``spark.sql.python.filterPushdown.enabled=true``, which ``register`` sets)."""

    @reported
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


def _write_read_stats(folder: str, stats: dict) -> None:
    """One task's read statistics as ``<folder>/<uuid>.json`` (written whole, then renamed)."""
    name = os.path.join(folder, f"{uuid.uuid4().hex}.json")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(name + ".tmp", "w") as out:
            json.dump(stats, out)
        os.replace(name + ".tmp", name)
    except OSError as exc:
        raise SparkOptionError(f"option read_stats_dir: cannot write {name}: {exc}") from exc


def read_ranges(
    plan: ReadPlan,
    target: pa.Schema,
    fragment: bytes,
    ranges: Sequence[tuple[int, int]],
    stats: dict | None = None,
) -> Iterator[pa.RecordBatch]:
    """Rows ``[first, last)`` of a serialized fragment for each ``(first, last)``
    of ``ranges``, those that pass the pushed filters, as batches of
    ``target``; ``stats["bytes_read"]`` (when given) counts the bytes read
    from data files."""
    store = open_object_store(plan.uri, plan.storage_options)
    frag = table_pb2.DataFragment.FromString(fragment)
    by_name = {f.name: f for f in plan.fields()}
    schema = plan.arrow_schema()
    missing = [c for c in plan.columns if c not in by_name]
    if missing:
        raise UnknownColumnError(f"{plan.uri} version {plan.version} has no columns {missing}")
    wanted = {p.column for p in plan.pushed}
    expr = None
    if plan.filter_sql:
        from tessera.catalog.query import predicate

        expr = predicate.to_expression(plan.filter_sql, schema)
        wanted |= predicate.referenced_columns(plan.filter_sql, schema)
    filter_cols = sorted(wanted, key=list(by_name).index)
    for p in plan.pushed:
        e = p.expression(schema.field(p.column).type)
        expr = e if expr is None else expr & e
    rest = [c for c in plan.columns if c not in filter_cols]
    lock = threading.Lock() if stats is not None else None
    freader = FragmentReader(store, frag, [by_name[c] for c in filter_cols], stats=stats, stats_lock=lock)
    # the second reader shares the first one's open files
    rreader = FragmentReader(
        store, frag, [by_name[c] for c in rest], _readers=freader._readers, stats=stats, stats_lock=lock
    )
    try:
        for start, stop in _batches(ranges, plan.batch_rows):
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


def _batches(ranges: Sequence[tuple[int, int]], rows: int) -> Iterator[tuple[int, int]]:
    for first, last in ranges:
        for start in range(first, last, rows):
            yield start, min(last, start + rows)
