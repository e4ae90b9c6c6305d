"""A pyarrow ``Dataset`` view of a table, so engines that push projection and
filters into pyarrow datasets (DuckDB, Polars' ``scan_pyarrow_dataset``) read
only the columns and rows they need from Tessera.

Filters: the engines push pyarrow compute Expressions (DuckDB's ``key >= 5
AND key < 9`` arrives as ``(key >= 5) and (key < 9)``, its ``IN`` as
``if_else(is_valid(key), is_in(key, ...), null)``).  Every pass is a
``Table.scanner`` scan, so the filter prunes fragments and zones with the
table's ZONEMAP indices exactly as a SQL filter does
(:func:`tessera.catalog.query.predicate.range_terms` reads the top-level AND terms
of an Expression, :mod:`tessera.catalog.query.pruning` turns them into row ranges).

Every pass is read through a :class:`~tessera.catalog.query.stream.BatchStream`
(batches made on the consumer's thread only; see that module for why).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from ..errors import InvalidArgumentError, UnsupportedDatasetOperationError
from .stream import BatchStream

#: keyword arguments of ``pyarrow.dataset.Dataset.scanner`` that tune Arrow's
#: own scanning (threads, read-ahead, memory); a Tessera scan has no use for them
_ARROW_SCAN_OPTIONS = frozenset(
    {
        "batch_readahead",
        "fragment_readahead",
        "fragment_scan_options",
        "use_threads",
        "cache_metadata",
        "memory_pool",
    }
)


def _check_columns(columns) -> list[str] | None:
    if columns is None:
        return None
    if isinstance(columns, dict):
        raise UnsupportedDatasetOperationError(
            "projections with expressions are not supported by a Tessera dataset; pass column names"
        )
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence):
        raise InvalidArgumentError(f"columns must be a list of column names, not {type(columns).__name__}")
    bad = [c for c in columns if not isinstance(c, str)]
    if bad:
        raise InvalidArgumentError(f"columns must be column names (strings), got {bad[0]!r}")
    return list(columns)


def _check_batch_size(batch_size) -> int:
    if batch_size is None:
        return 64 * 1024
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise InvalidArgumentError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


def _check_filter(filter) -> None:
    if filter is not None and not isinstance(filter, (str, pc.Expression)):
        raise InvalidArgumentError(
            f"filter must be SQL text or a pyarrow.compute.Expression, not {type(filter).__name__}"
        )


def _check_options(options: dict) -> None:
    unknown = sorted(set(options) - _ARROW_SCAN_OPTIONS)
    if unknown:
        raise InvalidArgumentError(f"unknown scanner option(s) {unknown}")


def _check_rows(n, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative integer, got {n!r}")
    return int(n)


def _check_indices(indices, rows: int) -> pa.Array:
    try:
        idx = pa.array(indices, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
        raise InvalidArgumentError(f"take needs a list of integer indices: {e}") from None
    if idx.null_count or len(idx) and (pc.min(idx).as_py() < 0 or pc.max(idx).as_py() >= rows):
        raise InvalidArgumentError(f"take index out of range [0, {rows})")
    return idx


class TesseraScanner:
    """What ``TesseraDataset.scanner`` returns: the parts of
    ``pyarrow.dataset.Scanner`` engines use, without Arrow's background reading.

    Every pass (``to_reader``, ``to_batches``, ``to_table``, ...) is a new
    Tessera scan with this projection and filter; the dataset's ``last_scan``
    is the latest pass's scan (its ``stats`` say what it read)."""

    def __init__(self, dataset: TesseraDataset, columns, filter, batch_size) -> None:
        self._dataset = dataset
        self._columns, self._filter, self._batch_size = columns, filter, batch_size
        self._first = self._new_scan()  # checks the arguments now, not on the first batch
        self._schema = self._first.schema

    def _new_scan(self, limit: int | None = None):
        scan = self._dataset._table.scanner(
            columns=self._columns, filter=self._filter, limit=limit, batch_size=self._batch_size
        )
        self._dataset.last_scan = scan
        return scan

    def _scan(self, limit: int | None = None):
        if limit is None and self._first is not None:
            scan, self._first = self._first, None
            self._dataset.last_scan = scan
            return scan
        return self._new_scan(limit)

    @property
    def projected_schema(self) -> pa.Schema:
        return self._schema

    @property
    def dataset_schema(self) -> pa.Schema:
        return self._dataset.schema

    def to_reader(self) -> pa.RecordBatchReader:
        """A RecordBatchReader that reads a batch only when one is asked for."""
        return BatchStream(self._scan()).to_reader()

    def to_batches(self) -> BatchStream:
        return BatchStream(self._scan())

    def to_table(self) -> pa.Table:
        return BatchStream(self._scan()).read_all()

    def head(self, num_rows: int) -> pa.Table:
        return BatchStream(self._scan(limit=_check_rows(num_rows, "num_rows"))).read_all()

    def count_rows(self) -> int:
        if self._filter is None:
            return self._dataset._table.count_rows()
        return self._dataset._table.count_rows(self._filter)

    def take(self, indices) -> pa.Table:
        rows = self.to_table()
        return rows.take(_check_indices(indices, rows.num_rows))

    def __arrow_c_stream__(self, requested_schema=None):
        return self.to_reader().__arrow_c_stream__(requested_schema)


# -- dataset ---------------------------------------------------------------------------


def _and(a, b, schema: pa.Schema):
    from . import predicate as lpred

    if a is None:
        return b
    if b is None:
        return a
    return lpred.to_expression(a, schema) & lpred.to_expression(b, schema)


class TesseraDataset(pads.Dataset):
    """Read-only dataset over one version of a table.

    ``scanner(columns=..., filter=...)`` runs a Tessera scan with that
    projection and filter; ``last_scan`` keeps the last scan's statistics.

    Only what a Tessera scan can do is offered; pyarrow Dataset operations that
    need a C++ dataset (fragments, joins, sorting, schema replacement) raise
    :class:`UnsupportedDatasetOperationError`."""

    def __init__(self, table, filter=None) -> None:  # noqa: D107 - pyarrow's base has no Python __init__ to call
        self._table = table
        self._filter = filter
        _check_filter(filter)
        if filter is not None:  # a bad filter fails here, not in the engine
            from . import predicate as lpred

            lpred.to_expression(filter, table.schema)
        self.last_scan = None

    def __repr__(self) -> str:
        where = f", filter={self._filter}" if self._filter is not None else ""
        return f"<TesseraDataset {self._table.uri} version {self._table.version}{where}>"

    @property
    def schema(self) -> pa.Schema:
        return self._table.schema

    @property
    def table(self):
        """The Tessera table (one version) the dataset reads."""
        return self._table

    def scanner(self, columns=None, filter=None, batch_size=None, **options) -> TesseraScanner:
        _check_options(options)
        _check_filter(filter)
        return TesseraScanner(
            self, _check_columns(columns), _and(self._filter, filter, self.schema), _check_batch_size(batch_size)
        )

    def to_table(self, columns=None, filter=None, **kw) -> pa.Table:
        return self.scanner(columns=columns, filter=filter, **kw).to_table()

    def to_batches(self, columns=None, filter=None, **kw) -> BatchStream:
        return self.scanner(columns=columns, filter=filter, **kw).to_batches()

    def count_rows(self, filter=None, **kw) -> int:
        return self.scanner(columns=[], filter=filter, **kw).count_rows()

    def head(self, num_rows: int, columns=None, filter=None, **kw) -> pa.Table:
        return self.scanner(columns=columns, filter=filter, **kw).head(num_rows)

    def take(self, indices, columns=None, filter=None, **kw) -> pa.Table:
        if filter is None and self._filter is None:
            _check_options({k: v for k, v in kw.items() if k != "batch_size"})
            idx = _check_indices(indices, self._table.count_rows())
            return self._table.take(idx.to_numpy(), _check_columns(columns))
        return self.scanner(columns=columns, filter=filter, **kw).take(indices)

    def filter(self, expression) -> TesseraDataset:
        """A view of the rows where ``expression`` (and this view's filter) holds."""
        if expression is None:
            raise InvalidArgumentError("filter needs an expression")
        _check_filter(expression)
        return TesseraDataset(self._table, _and(self._filter, expression, self.schema))

    @property
    def partition_expression(self) -> pc.Expression:
        return pc.scalar(True)

    def _unsupported(self, what: str):
        raise UnsupportedDatasetOperationError(
            f"a Tessera dataset does not support {what}; read it with to_table() and use pyarrow on the result"
        )

    def get_fragments(self, filter=None):
        self._unsupported("get_fragments (Lance fragments are not pyarrow fragments)")

    def replace_schema(self, schema):
        self._unsupported("replace_schema")

    def sort_by(self, sorting, **kwargs):
        self._unsupported("sort_by")

    def join(self, *args, **kwargs):
        self._unsupported("join")

    def join_asof(self, *args, **kwargs):
        self._unsupported("join_asof")

    def __reduce__(self):
        self._unsupported("pickling (open the table again in the other process)")
