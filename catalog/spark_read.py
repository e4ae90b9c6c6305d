"""The read half of the ``tessera`` Spark data source.

``DataSource.reader()`` (a planning worker) resolves the version once — the
latest, or the ``version``/``tag`` option — and everything after reads that
version.  With pushdown on (:class:`TesseraFilteringReader`),
``pushFilters`` keeps the filters it can apply exactly and hands the rest
back; ``partitions()`` then prunes fragments with the per-file statistics
(:mod:`catalog.spark_stats`).  ``partitions()`` returns one
:class:`FragmentRange` per fragment (large fragments split by row range), and
``read()`` (executors) reads the filter columns first, skips slices where
nothing matches, then reads the other columns and yields Arrow batches cast
to exactly the schema Spark expects.

Pickled to the executors: the reader (a :class:`ReadPlan` of plain values —
URI, storage options, version, serialized field protobufs, pushed filters)
and each partition (a serialized ``DataFragment`` and a row range).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa

try:
    from pyspark.sql.datasource import DataSourceReader, InputPartition
except ImportError as _exc:  # pragma: no cover - pyspark is an optional dependency
    raise ImportError("the tessera Spark data source needs pyspark>=4.1: pip install 'tessera[spark]'") from _exc

from commit.committer import fragment_live_rows
from format import schema as lschema
from format.protos import file_pb2, table_pb2
from stores.object_store import open_object_store

from .errors import UnknownColumnError
from .fragments import FragmentReader
from .scan import mask_of
from .spark_stats import Pushed, prune, translate
from .spark_types import spark_arrow_schema, to_spark_batch

log = logging.getLogger(__name__)

DEFAULT_READ_BATCH_ROWS = 64 * 1024
DEFAULT_ROWS_PER_PARTITION = 1024 * 1024
DEFAULT_BYTES_PER_PARTITION = 256 << 20


class FragmentRange(InputPartition):
    """Rows ``[start, stop)`` of one fragment (a serialized ``DataFragment``)."""

    def __init__(self, fragment: bytes, start: int, stop: int) -> None:
        super().__init__(None)
        self.fragment, self.start, self.stop = fragment, start, stop

    def __repr__(self) -> str:
        return f"FragmentRange(rows {self.start}..{self.stop})"


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
    rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION
    bytes_per_partition: int = DEFAULT_BYTES_PER_PARTITION
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
            log.info("tessera read %s@%d: %d of %d fragments after pruning with %s", p.uri, p.version, len(kept),
                     len(frags), p.pushed)
            frags = kept
        out = []
        for frag in frags:
            rows = frag.physical_rows
            if fragment_live_rows(frag) == 0:
                continue
            size = sum(df.file_size_bytes for df in frag.files)
            pieces = max(1, math.ceil(rows / p.rows_per_partition), math.ceil(size / p.bytes_per_partition))
            step = math.ceil(rows / pieces) if rows else 0
            data = frag.SerializeToString()
            for start in range(0, rows, step or 1):
                out.append(FragmentRange(data, start, min(rows, start + step)))
        self._fragments = []  # the reader is pickled to every task next: partitions carry their own
        return out

    # -- executors ----------------------------------------------------------------------------

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FragmentRange):
            return  # Spark's stand-in InputPartition(None) when there is nothing to read
        yield from read_range(self.plan, spark_arrow_schema(self.spark_schema), partition)


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


def read_range(plan: ReadPlan, target: pa.Schema, part: FragmentRange) -> Iterator[pa.RecordBatch]:
    """The rows of one partition that pass the pushed filters, as batches of ``target``."""
    store = open_object_store(plan.uri, plan.storage_options)
    frag = table_pb2.DataFragment.FromString(part.fragment)
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
        for start in range(part.start, part.stop, plan.batch_rows):
            stop = min(part.stop, start + plan.batch_rows)
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
