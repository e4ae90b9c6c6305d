"""A pyarrow ``Dataset`` view of a table, so engines that push projection and
filters into pyarrow datasets (DuckDB, Polars' ``scan_pyarrow_dataset``) read
only the columns and rows they need from Tessera.

Filters: the engines push pyarrow compute Expressions (DuckDB's ``key >= 5
AND key < 9`` arrives as ``(key >= 5) and (key < 9)``, its ``IN`` as
``if_else(is_valid(key), is_in(key, ...), null)``).  Every pass is a
``Table.scanner`` scan, so the filter prunes fragments and zones with the
table's ZONEMAP indices exactly as a SQL filter does
(:func:`tessera.catalog.predicate.range_terms` reads the top-level AND terms
of an Expression, :mod:`tessera.catalog.pruning` turns them into row ranges).

Threads and interpreter exit
----------------------------
Tessera reads in Python, so every batch an engine receives is made by Python
code.  The view must never let a thread that is not waiting for the engine run
that code on its own: an Arrow ``Scanner`` built from a Python iterator
(``pyarrow.dataset.Scanner.from_batches``) reads ahead on Arrow's I/O thread,
independently of the consumer, and keeps doing so after the consumer has
stopped (a ``LIMIT 5``).  When the script then ends, that thread is inside
Python while the interpreter finalizes, and the process aborts
(``terminate called without an active exception``) or hangs.

So ``TesseraDataset.scanner`` returns a :class:`TesseraScanner`, not an Arrow
scanner.  Its ``to_reader`` is a plain ``pyarrow.RecordBatchReader`` over a
:class:`BatchStream`: a batch is read only when the consumer asks for one, on
the consumer's thread (DuckDB exports that reader as an Arrow C stream and
pulls it from its worker threads while the calling thread waits in
``execute``); nothing of ours reads in the background.

An engine may still drive a stream from its own thread after the caller has
its rows (Polars runs its Python generator over ``to_batches`` in a Tokio task
and reads ahead of a finished ``head(5)``; a user may wrap a Tessera reader in
``Scanner.from_batches``).  So an ``atexit`` hook, which runs before the
interpreter starts finalizing, closes every stream still open (its fragment
readers close, a later pull ends the stream at once) and waits, briefly, until
no such foreign thread is running Python (see :func:`close_open_streams`).
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
import weakref
from collections.abc import Generator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from .errors import InvalidArgumentError, UnsupportedDatasetOperationError

log = logging.getLogger(__name__)

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


# -- streams ---------------------------------------------------------------------------

_open_streams: weakref.WeakSet[BatchStream] = weakref.WeakSet()
_open_lock = threading.Lock()
#: every thread that has made or pulled a stream (thread idents; a small set: thread pools)
_pullers: set[int] = set()


class BatchStream:
    """The batches of one pass of a :class:`~tessera.catalog.scan.Scan`,
    read only when asked for (``next``), on the asking thread.

    Nothing is read before the first ``next``.  ``close`` (also on exhaustion,
    on an error, and for every stream still open at interpreter exit) closes
    the scan's fragment readers; a closed stream is exhausted.  A stream that
    read anything logs what its scan read (``Scan.stats``: fragments read and
    pruned, bytes) at DEBUG level when it ends, the numbers also in the
    record's ``tessera_scan_stats`` attribute: what an engine's query through
    the view cost, where the engine keeps the dataset object to itself."""

    def __init__(self, scan) -> None:
        self.scan = scan
        self.schema: pa.Schema = scan.schema
        self._batches: Generator[pa.RecordBatch, None, None] | None = None
        self._closed = False
        self._lock = threading.Lock()  # one pull (or close) at a time
        #: the thread of the latest pull, when it ended, and whether a puller has
        #: been told the stream ended (see ``close_open_streams``)
        self._puller: int | None = None
        self._pulled_at = 0.0
        self._end_seen = False
        _pullers.add(threading.get_ident())  # the maker pulls next, as a rule
        with _open_lock:
            _open_streams.add(self)

    def __iter__(self) -> BatchStream:
        return self

    def __next__(self) -> pa.RecordBatch:
        with self._lock:
            self._puller = me = threading.get_ident()
            _pullers.add(me)
            try:
                if self._closed:
                    self._end_seen = True
                    raise StopIteration
                if self._batches is None:
                    self._batches = self.scan.batches()
                try:
                    return next(self._batches)
                except BaseException:  # StopIteration or an error: the pass is over
                    self._end_seen = True
                    self._close_locked()
                    raise
            finally:
                self._pulled_at = time.monotonic()

    def read_all(self) -> pa.Table:
        try:
            return pa.Table.from_batches(list(self), schema=self.schema)
        finally:
            self.close()

    def close(self, timeout: float = -1) -> None:
        """Close the fragment readers; waits for a pull under way (at most
        ``timeout`` seconds when given, then only marks the stream closed)."""
        if not self._lock.acquire(timeout=timeout):
            self._closed = True  # the pull under way finishes, the next one ends the stream
            return
        try:
            self._close_locked()
        finally:
            self._lock.release()

    def _close_locked(self) -> None:
        was_closed, self._closed = self._closed, True
        batches, self._batches = self._batches, None
        with _open_lock:
            _open_streams.discard(self)
        if batches is not None:
            batches.close()  # runs the scan's ``finally``: the fragment reader closes
        if not was_closed and batches is not None:
            stats = dict(getattr(self.scan, "stats", {}))
            log.debug(
                "scan of %s: %d fragments read, %d pruned, %d bytes in %d reads",
                getattr(self.scan.store, "uri", "?"),
                stats.get("fragments", 0),
                stats.get("pruned_fragments", 0),
                stats.get("bytes_read", 0),
                stats.get("reads", 0),
                extra={"tessera_scan_stats": stats},
            )

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> BatchStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # a stream dropped half way closes its readers too
        try:
            if not self._closed:
                self.close(timeout=0)
        except Exception:  # noqa: BLE001 - nothing useful to do in a finalizer
            pass

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self)


def open_stream_count() -> int:
    """Streams made and not yet exhausted or closed (for tests and diagnostics)."""
    with _open_lock:
        return len(_open_streams)


#: at exit, the longest wait for other threads to stop running Tessera's
#: streams, and how recent a foreign thread's last pull must be to count as busy
EXIT_WAIT = 5.0
EXIT_QUIET = 0.2


def _foreign_pullers_in_python(me: int) -> list[int]:
    """Threads not made by ``threading`` (DuckDB's, Arrow's, Polars') that pulled
    a stream and are executing Python right now."""
    frames = sys._current_frames()
    dummy = getattr(threading, "_DummyThread", ())
    ours = {t.ident for t in threading.enumerate() if not isinstance(t, dummy)}
    return [i for i in list(_pullers) if i != me and i not in ours and frames.get(i) is not None]


@atexit.register
def close_open_streams() -> None:
    """Close every stream still open: the interpreter is about to finalize.

    Threads that are not Python's own must not be running Python once
    finalization starts (they are killed mid-C++/Rust and the process aborts).
    An engine may still be pulling a stream from such a thread after the
    caller got its rows: Polars keeps running its Python generator over
    ``to_batches`` in a Tokio task after a ``head(5)`` returned.  So after
    closing the streams, this waits (at most ``EXIT_WAIT`` seconds) until

    * no foreign thread that pulled a stream is executing Python, and
    * every stream a foreign thread pulled in the last ``EXIT_QUIET`` seconds
      has told that thread it ended (so its loop stops instead of pulling
      again during finalization).

    Threads idle longer than that (DuckDB's, between queries) are not waited for."""
    with _open_lock:
        streams = list(_open_streams)
    for s in streams:
        try:
            s.close(timeout=EXIT_WAIT)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
    me = threading.get_ident()
    deadline = time.monotonic() + EXIT_WAIT
    while time.monotonic() < deadline:
        now = time.monotonic()
        pulling = [
            s for s in streams if s._puller not in (None, me) and not s._end_seen and now - s._pulled_at < EXIT_QUIET
        ]
        if not pulling and not _foreign_pullers_in_python(me):
            break
        time.sleep(0.002)  # lets them run


# -- scanner ---------------------------------------------------------------------------


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
