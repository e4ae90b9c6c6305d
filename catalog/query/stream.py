"""The batches of one pass of a scan, read only when the consumer asks for
them, on the consumer's thread; every stream still open is closed at
interpreter exit.

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

So ``TesseraDataset.scanner`` (:mod:`.arrow_dataset`) returns a ``TesseraScanner``, not an
Arrow scanner.  Its ``to_reader`` is a plain ``pyarrow.RecordBatchReader`` over a
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
from collections.abc import Generator

import pyarrow as pa

log = logging.getLogger(__name__)

_open_streams: weakref.WeakSet[BatchStream] = weakref.WeakSet()
_open_lock = threading.Lock()
#: every thread that has made or pulled a stream (thread idents; a small set: thread pools)
_pullers: set[int] = set()


class BatchStream:
    """The batches of one pass of a :class:`~tessera.catalog.query.scan.Scan`,
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
