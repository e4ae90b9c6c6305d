"""SQL manifest store over SQLAlchemy 2.0: SQLite, PostgreSQL, MySQL/MariaDB.

One table, ``tessera_manifest_versions``, created and upgraded only by the
Alembic migrations in ``migrations/`` (see :mod:`stores.sql_migrate`).  Its
primary key is ``(table_hash, version)`` where ``table_hash`` is the SHA-256
hex digest of the normalised table key; the full key is stored beside it
(MySQL cannot index a 2 KB VARCHAR).

How each write is decided:

* ``reserve`` is ONE autocommitted statement::

      INSERT INTO tessera_manifest_versions (...)
      SELECT :hash, :version, ... WHERE :version - 1 < 1 OR EXISTS (
          SELECT 1 FROM tessera_manifest_versions
          WHERE table_hash = :hash AND version = :version - 1 AND incarnation = :inc)

  The primary key decides the winner (a duplicate raises an integrity error
  -> VersionExistsError); a zero row count means the predecessor is missing
  or belongs to another incarnation (IncarnationMismatchError).  The check and the insert
  are one statement, so one transaction, on every backend.  The predecessor
  row is immutable apart from its path, so no lock on it is needed; on InnoDB
  the statement may deadlock with a concurrent reservation (gap locks), which
  rolls it back and is retried.
* ``flip`` is ``UPDATE ... SET path = :final WHERE table_hash = :hash AND
  version = :v AND path = :staged``; a zero row count is followed by a read to
  report True when the row already holds the final path.
* A reservation whose row already exists with the same transaction uuid is
  reported as success: it is this writer's own earlier attempt whose response
  was lost.

Errors: failing to connect is StoreUnavailableError; a write whose connection
drops after the statement was sent is AmbiguousStoreError (the caller reads
the row back); a missing or foreign table is StoreSchemaError.

Timeouts.  ``io_timeout`` (seconds, default 30) bounds how long one attempt of
an operation waits for the database's answers; ``connect_timeout`` (default 5)
bounds opening a connection.  Both, like ``busy_timeout_ms``, ``pool_size``,
``max_overflow`` and ``pool_pre_ping``, may be given as keyword arguments or
in the URL's query (``postgresql+psycopg://u@host/db?io_timeout=5``; see
:mod:`stores.store_options`: our parameters are removed before SQLAlchemy
passes the rest to the driver, and a keyword argument wins over the URL).

* PostgreSQL (libpq has no read timeout): every attempt gets a deadline,
  ``io_timeout`` after it has a connection, covering the pool's liveness ping
  and the statements.  A process-wide watchdog thread shuts the connection's socket
  down (``shutdown(2)`` on a duplicate of libpq's descriptor) when the deadline
  passes, so the blocked driver call fails at once; that connection is then
  invalidated, never returned to the pool.  The server is also given
  ``statement_timeout`` = 90 % of ``io_timeout`` (as a ``-c`` startup option,
  merged with any ``options`` in the URL), so a statement the server itself is
  slow to run (waiting on a lock) is cancelled by the server first: SQLSTATE
  57014 is a definite answer, the write was not applied (StoreUnavailableError,
  not ambiguous).  TCP keepalives and ``tcp_user_timeout`` still detect a dead
  peer.  Behind PgBouncer, allow the ``options`` startup parameter.
* MySQL/MariaDB: pymysql's ``read_timeout``/``write_timeout`` = ``io_timeout``
  bound every socket read and write, so each reply (set them through
  ``io_timeout``, not in the URL).
* SQLite: lock waits are bounded by ``busy_timeout_ms``; ``io_timeout`` is
  accepted and has no effect.

A write whose reply does not come within ``io_timeout`` is AmbiguousStoreError
(read back); such a read is StoreUnavailableError and is not retried, so a
store call waits about ``io_timeout`` at most for a server that stopped
answering (plus ``connect_timeout`` - psycopg's minimum is 2 s - when a new
connection has to be opened).  Reads that fail fast (a dropped connection, a
deadlock) are retried twice; writes only when the database reported that
nothing was applied.

SQLite (the embedded default) runs in WAL mode with ``synchronous=FULL`` and
a ``busy_timeout``; it coordinates processes on one host only.
"""

from __future__ import annotations

import heapq
import inspect
import itertools
import logging
import os
import random
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.engine.interfaces import ReflectedColumn

from . import sql_migrate, store_options
from .errors import (
    AmbiguousStoreError,
    IncarnationMismatchError,
    InvalidURIError,
    StoreSchemaError,
    StoreUnavailableError,
    VersionExistsError,
)
from .manifest_checks import check_bound, check_flip_paths, check_key, check_record, check_version
from .manifest_store import VersionRecord, predecessor_error
from .sql_schema import (  # noqa: F401 - Base, ManifestVersionRow and TABLE_NAME are re-exported  # noqa: E402
    AFTER,
    DELETE,
    EXPECTED_COLUMNS,
    FLIP,
    FLIP_ASYNC_WAL,
    GET,
    GET_META,
    LATEST,
    MAX_ID_CHARS,
    META_TABLE_NAME,
    PUT_META,
    RESERVE,
    STORE_ID_NAME,
    TABLE_NAME,
    TABLES,
    Base,
    ExactString,
    ManifestVersionRow,
    schema_problems,
    table_hash,
)

log = logging.getLogger(__name__)

__all__ = ["Base", "ManifestVersionRow", "SqlManifestStore", "TABLE_NAME", "table_hash"]

_TRANSIENT_RETRIES = 8
_SKIP_ROLLBACK_SUPPORTED = (
    "skip_autocommit_rollback" in inspect.signature(sa.engine.default.DefaultDialect.__init__).parameters
)

T = TypeVar("T")


def _orig(exc: BaseException) -> BaseException:
    return getattr(exc, "orig", None) or exc


_LIVE: weakref.WeakSet[SqlManifestStore] = weakref.WeakSet()


def _dispose_after_fork() -> None:
    for store in list(_LIVE):
        store._after_fork()


def _close_sqlite_before_fork() -> None:
    """No pooled SQLite connection may be open across fork(): SQLite's
    per-process lock bookkeeping is copied into the child, whose own
    connections then misjudge the locks they hold (lost commits were observed
    when a parent held a connection while children committed).  The pool's
    idle connections are closed here, in the parent, before every fork; the
    parent reopens on its next use.  (A connection another thread is using at
    that instant stays open, as it did when every operation opened its own.)"""
    for store in list(_LIVE):
        if store._backend == "sqlite":
            store._engine.dispose()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_close_sqlite_before_fork, after_in_child=_dispose_after_fork)


# ----------------------------------------------------- settings and deadlines
#: the settings from_url takes as keyword arguments or URL query parameters
_SETTINGS: dict[str, store_options.Converter] = {
    "io_timeout": store_options.seconds,
    "connect_timeout": store_options.seconds,
    "busy_timeout_ms": store_options.whole(0),
    "pool_size": store_options.whole(0),
    "max_overflow": store_options.whole(-1),
    "pool_pre_ping": store_options.flag,
}
_DEFAULTS: dict[str, Any] = {
    "io_timeout": 30.0,
    "connect_timeout": 5.0,
    "busy_timeout_ms": 10_000,
    "pool_size": 5,
    "max_overflow": 10,
    "pool_pre_ping": True,
}
#: the server cancels a statement after this share of io_timeout, so its definite
#: "cancelled" answer (57014: not applied) arrives before the client's deadline
_STATEMENT_TIMEOUT_SHARE = 0.9
#: query parameters SQLAlchemy's SQLite dialect reads itself
_SQLITE_QUERY_KEYS = frozenset(
    {
        "timeout",
        "isolation_level",
        "detect_types",
        "check_same_thread",
        "cached_statements",
        "uri",
        "mode",
        "cache",
        "vfs",
        "immutable",
        "nolock",
        "psow",
        "modeof",
    }
)
#: MySQL URL parameters that io_timeout sets (a second knob would silently lose)
_MYSQL_IO_KEYS = ("read_timeout", "write_timeout")


def _driver_keys(backend: str) -> frozenset[str]:
    """Query parameters the backend's driver (or SQLAlchemy's dialect) accepts:
    they are passed on even when they look like one of ours."""
    if backend == "postgresql":
        try:
            import psycopg

            return frozenset(o.keyword.decode() for o in psycopg.pq.Conninfo.get_defaults())
        except Exception:  # noqa: BLE001 - no psycopg: create_sql_engine reports the missing driver
            return frozenset(
                {
                    "tcp_user_timeout",
                    "keepalives",
                    "keepalives_idle",
                    "keepalives_interval",
                    "keepalives_count",
                    "options",
                    "application_name",
                    "sslmode",
                }
            )
    if backend in ("mysql", "mariadb"):
        try:
            import pymysql

            params = inspect.signature(pymysql.connections.Connection.__init__).parameters
            ssl = {"ssl_ca", "ssl_key", "ssl_cert", "ssl_capath", "ssl_cipher", "ssl_check_hostname"}  # SQLAlchemy's
            return frozenset(params) | ssl
        except Exception:  # noqa: BLE001
            return frozenset(_MYSQL_IO_KEYS)
    return _SQLITE_QUERY_KEYS


class _Attempt:
    """One attempt of a store operation: when its time is up, and whether the
    watchdog had to cut it short.  The clock starts when the attempt first
    has a connection (:meth:`begin`): waiting for a free pooled connection is
    bounded by the pool's own timeout, not by io_timeout."""

    __slots__ = ("deadline", "io_timeout", "timed_out")

    def __init__(self, io_timeout: float) -> None:
        self.io_timeout = io_timeout
        self.deadline: float | None = None
        self.timed_out = False

    def begin(self) -> float:
        """The deadline, starting the clock now if it has not started."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.io_timeout
        return self.deadline


class _Timer:
    __slots__ = ("attempt", "deadline", "done", "fired", "sock")

    def __init__(self, sock: socket.socket, attempt: _Attempt) -> None:
        self.sock = sock
        self.attempt = attempt
        self.deadline = attempt.begin()
        self.done = False
        self.fired = False


class _Watchdog:
    """A process-wide daemon thread enforcing client-side read deadlines for
    drivers without a read timeout (libpq).

    :meth:`arm` takes the connection's socket descriptor and duplicates it, so
    the timer always refers to that connection's socket even if the driver
    closes its own descriptor (and the number is reused) meanwhile.  At the
    deadline the socket is shut down (both ways): the driver's blocked poll
    wakes up, reads end-of-file and reports a broken connection.  The caller
    must discard that connection (:meth:`disarm` says whether it fired)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # also the after-fork hook: the child has no watchdog thread, and the
        # parent's lock may have been held when it forked
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._finished = 0  # disarmed timers still in the heap

    def arm(self, fd: int, attempt: _Attempt) -> _Timer:
        timer = _Timer(socket.socket(fileno=os.dup(fd)), attempt)
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tessera-sql-deadlines", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (timer.deadline, next(self._seq), timer))
            if self._heap[0][2] is timer:
                self._cond.notify()
        return timer

    def disarm(self, timer: _Timer) -> bool:
        """Stop ``timer``; True if it fired (the connection is unusable)."""
        with self._cond:
            if not timer.done:
                timer.done = True
                self._finished += 1
                if self._finished > 256 and 2 * self._finished > len(self._heap):
                    self._heap = [e for e in self._heap if not e[2].done]
                    heapq.heapify(self._heap)
                    self._finished = 0
        timer.sock.close()
        return timer.fired

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                    self._finished -= 1
                if not self._heap:
                    self._cond.wait()
                    continue
                delay = self._heap[0][0] - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                timer = heapq.heappop(self._heap)[2]
                timer.done = timer.fired = True
                timer.attempt.timed_out = True
                try:
                    timer.sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # already closed by the peer
                    pass


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WATCHDOG._reset)

#: the attempt whose connection is being checked out on this thread (read by
#: the pool's checkout hook, which pings under the attempt's deadline)
_CHECKOUT = threading.local()


def _pg_socket(dbapi_connection: Any) -> int:
    return int(dbapi_connection.pgconn.socket)


#: a pooled connection used less than this many seconds ago is not pinged at checkout
IDLE_PING_SECONDS = 1.0


def _install_ping(engine: Engine, io_timeout: float, backend: str) -> None:
    """Ping a pooled connection at checkout when it sat idle for
    :data:`IDLE_PING_SECONDS` or more (a server or a firewall may have closed it
    meanwhile): a statement sent on a dead connection fails with its outcome
    unknown, which the commit protocol settles by reading back, but a ping
    avoids that for the idle connections where it is likely.  A connection in
    steady use is not pinged: the ping was a second round trip per statement.
    On PostgreSQL the ping runs under the current attempt's deadline
    (SQLAlchemy's ``pool_pre_ping`` would wait without bound); MySQL's driver
    bounds it with its read/write timeouts.  A failed or timed-out ping
    invalidates the pool (SQLAlchemy then opens a fresh connection, which is
    not pinged)."""

    @event.listens_for(engine, "connect")
    def _fresh(_dbapi_connection: Any, record: Any) -> None:
        record.info["tessera_fresh"] = True

    @event.listens_for(engine, "checkin")
    def _used(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info["tessera_used"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if record.info.pop("tessera_fresh", False):
            return
        if time.monotonic() - record.info.get("tessera_used", float("-inf")) < IDLE_PING_SECONDS:
            return
        attempt = getattr(_CHECKOUT, "attempt", None) or _Attempt(io_timeout)
        timer = None
        if backend == "postgresql":
            try:
                timer = _WATCHDOG.arm(_pg_socket(dbapi_connection), attempt)
            except Exception as exc:  # noqa: BLE001 - a broken connection has no socket
                raise sa_exc.InvalidatePoolError(f"pooled connection unusable: {exc}") from exc
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # noqa: BLE001
            raise sa_exc.InvalidatePoolError(f"ping failed: {exc}") from exc
        finally:
            if timer is not None and _WATCHDOG.disarm(timer):
                raise sa_exc.InvalidatePoolError(f"no answer to the ping within io_timeout={attempt.io_timeout:g}s")


def _run(conn: Connection, stmt: Any, params: dict[str, Any]) -> int:
    return int(conn.execute(stmt, params).rowcount)


def _sqlite_unsynced(conn: Connection, stmt: Any, params: dict[str, Any]) -> int:
    """Run ``stmt`` on SQLite with ``synchronous=NORMAL`` (in WAL mode: no
    fsync at its commit; the next ``FULL`` commit, a reservation, syncs the
    WAL and this transaction with it).  For the flip only, which a crash may
    lose harmlessly (the next reader finishes it).  The connection goes back
    to ``FULL`` before it returns to the pool, or is discarded."""
    conn.exec_driver_sql("PRAGMA synchronous=NORMAL")
    try:
        return _run(conn, stmt, params)
    finally:
        try:
            conn.exec_driver_sql("PRAGMA synchronous=FULL")
        except Exception:
            conn.invalidate()  # never pool a connection that commits unsynced
            raise


class SqlManifestStore:
    """A :class:`~stores.manifest_store.ManifestStore` in a SQL database."""

    kind = "sql"
    #: seconds one attempt may wait for the database (set by from_url)
    _io_timeout: float = _DEFAULTS["io_timeout"]

    def __init__(self, engine: Engine, url: URL) -> None:
        self._engine = engine
        self._url = url
        self._backend = url.get_backend_name()
        self._identity = self._render_identity(url)
        _LIVE.add(self)

    def _after_fork(self) -> None:
        # a child must never use the parent's pooled connections
        self._engine.dispose(close=False)

    # ------------------------------------------------------------------ opening
    @classmethod
    def from_url(
        cls,
        url: str | URL,
        *,
        create: bool | None = None,
        check: bool = True,
        busy_timeout_ms: int | None = None,
        connect_timeout: float | None = None,
        io_timeout: float | None = None,
        pool_size: int | None = None,
        max_overflow: int | None = None,
        pool_pre_ping: bool | None = None,
    ) -> SqlManifestStore:
        """Open a store on a SQLAlchemy URL (``sqlite:///file.db``,
        ``postgresql+psycopg://user@host/db``, ``mysql+pymysql://user@host/db``;
        a URL without a driver gets psycopg / pymysql).

        ``create`` (default: True for SQLite only) runs the Alembic upgrade;
        otherwise the schema must already be at the head revision.  With
        ``check`` the schema is verified (StoreSchemaError) and the database
        reached (StoreUnavailableError) before returning.

        Settings (keyword arguments, or the same names in the URL's query;
        a keyword argument wins): ``io_timeout`` (seconds, default 30: see the
        module), ``connect_timeout`` (5), ``busy_timeout_ms`` (SQLite, 10000),
        ``pool_size`` (5), ``max_overflow`` (10), ``pool_pre_ping`` (true).
        A bad value is InvalidURIError (from the URL) or
        InvalidStorageOptionError (a keyword argument), naming the setting."""
        parsed = sql_migrate.parse_sql_url(url)
        backend = parsed.get_backend_name()
        settings, rest = store_options.resolve(
            f"{backend} store",
            list(parsed.query.items()),
            {
                "io_timeout": io_timeout,
                "connect_timeout": connect_timeout,
                "busy_timeout_ms": busy_timeout_ms,
                "pool_size": pool_size,
                "max_overflow": max_overflow,
                "pool_pre_ping": pool_pre_ping,
            },
            _SETTINGS,
            _DEFAULTS,
            driver_keys=_driver_keys(backend),
        )
        if backend in ("mysql", "mariadb"):
            for key, _ in rest:
                if key in _MYSQL_IO_KEYS:
                    raise InvalidURIError(f"{backend} store URL: set io_timeout instead of {key!r} (it sets both)")
        parsed = parsed.set(query=dict(rest))  # our settings never reach the driver
        io_timeout = settings["io_timeout"]
        busy_timeout_ms = settings["busy_timeout_ms"]
        connect_args = _connect_args(backend, busy_timeout_ms, settings["connect_timeout"], io_timeout, parsed.query)
        kwargs: dict[str, Any] = {
            "isolation_level": "AUTOCOMMIT",
            "pool_reset_on_return": None,  # autocommit leaves no transaction to roll back
            "connect_args": connect_args,
        }
        if _SKIP_ROLLBACK_SUPPORTED:  # SQLAlchemy >= 2.0.43: no ROLLBACK round trip per checkout
            kwargs["skip_autocommit_rollback"] = True
        pre_ping = settings["pool_pre_ping"]
        if backend != "sqlite":
            kwargs.update(
                pool_size=settings["pool_size"],
                max_overflow=settings["max_overflow"],
                # pinged by _install_ping when idle (PostgreSQL: under the attempt's deadline)
                pool_pre_ping=False,
                pool_recycle=1800,
            )
        else:
            # pooled (a connection's setup and close cost more than a commit's
            # statement), but never open across fork(): see _close_sqlite_before_fork
            kwargs.update(poolclass=sa.pool.QueuePool, pool_size=settings["pool_size"], max_overflow=-1)
        engine = sql_migrate.create_sql_engine(parsed, **kwargs)
        db_file = None
        if backend == "sqlite" and parsed.database and parsed.database != ":memory:":
            db_file = os.path.abspath(parsed.database)
        if backend == "sqlite":
            _install_sqlite_pragmas(engine, busy_timeout_ms, db_file)
        elif pre_ping:
            _install_ping(engine, io_timeout, backend)
        store = cls(engine, parsed)
        store._io_timeout = io_timeout
        migrate = create if create is not None else backend == "sqlite"
        try:
            if migrate:
                store._refuse_foreign_table()
                # no statement_timeout: a migration may wait long for another process's migration lock
                migrate_args = _connect_args(
                    backend,
                    busy_timeout_ms,
                    settings["connect_timeout"],
                    io_timeout,
                    parsed.query,
                    server_timeout=False,
                )
                migrate_engine = sql_migrate.create_sql_engine(
                    parsed, poolclass=sa.pool.NullPool, connect_args=migrate_args
                )
                try:
                    sql_migrate.upgrade(migrate_engine)
                finally:
                    migrate_engine.dispose()
            if check:
                store.check()
        except BaseException:
            store.close()
            raise
        store._db_file = db_file
        store._db_file_id = _file_id(db_file)
        return store

    _db_file: str | None = None
    _db_file_id: tuple[int, int] | None = None

    def replaced(self) -> bool:
        """Whether this SQLite store's database file was deleted or replaced
        since the store was opened (then open the URL anew)."""
        return self._db_file is not None and _file_id(self._db_file) != self._db_file_id

    # ------------------------------------------------------------ the protocol
    def identity(self) -> str:
        """``backend://host:port/database#table`` with no user or password."""
        return self._identity

    def reserve(self, record: VersionRecord) -> bool:
        """Insert ``record`` if its version is free and its predecessor (if
        any) has the same incarnation, in one statement; False when the row
        already held this transaction."""
        check_record(record, max_id_chars=MAX_ID_CHARS)
        params = {
            "h": table_hash(record.table_key),
            "v": record.version,
            "pv": record.version - 1,
            "key": record.table_key,
            "path": record.path,
            "size": record.size,
            "txn": record.transaction_uuid,
            "inc": record.incarnation,
        }
        params.update(h2=params["h"], inc2=record.incarnation, pv2=params["pv"])
        what = f"reserve {record.table_key} v{record.version}"
        try:
            inserted = self._write(lambda c: c.execute(RESERVE, params).rowcount, what)
        except sa_exc.IntegrityError:
            existing = self.get(record.table_key, record.version)
            if existing is not None and existing.transaction_uuid == record.transaction_uuid:
                log.info("%s: the row already holds this transaction (an earlier attempt landed)", what)
                return False
            raise VersionExistsError(
                f"version {record.version} of {record.table_key} is already reserved"
                + (f" by transaction {existing.transaction_uuid}" if existing else "")
            ) from None
        if inserted == 1:
            return True
        if inserted != 0:  # the driver reported no row count: read back
            row = self.get(record.table_key, record.version)
            if row is not None and row.transaction_uuid == record.transaction_uuid:
                return True
        pred = self.get(record.table_key, record.version - 1)
        raise predecessor_error(what, record, pred.incarnation if pred else None)

    def flip(self, table_key: str, version: int, staged_path: str, final_path: str) -> bool:
        """Point the row at ``final_path`` if it still holds ``staged_path``
        (``final_path`` + ``-<uuid>``; anything else is a ValueError)."""
        check_key(table_key)
        check_version(version)
        check_flip_paths(staged_path, final_path)
        params = {"h": table_hash(table_key), "v": version, "staged": staged_path, "final": final_path}
        stmt = FLIP_ASYNC_WAL if self._backend == "postgresql" else FLIP
        run = _sqlite_unsynced if self._backend == "sqlite" else _run
        if self._write(lambda c: run(c, stmt, params), f"flip {table_key} v{version}") == 1:
            return True
        row = self.get(table_key, version)
        return row is not None and row.path == final_path

    def adopt(self, table_key: str, version: int, expected_path: str, final_path: str, transaction_uuid: str) -> bool:
        """Point the row at a foreign writer's final manifest and transaction,
        if it still holds ``expected_path`` (one conditional UPDATE)."""
        check_key(table_key)
        check_version(version)
        check_flip_paths(expected_path, final_path)
        check_record(VersionRecord(table_key, version, final_path, 0, transaction_uuid, "x"), max_id_chars=MAX_ID_CHARS)
        table = TABLES[TABLE_NAME]
        stmt = (
            sa.update(table)
            .where(
                table.c.table_hash == sa.bindparam("h"),
                table.c.version == sa.bindparam("v"),
                table.c.path == sa.bindparam("staged"),
            )
            .values(path=sa.bindparam("final"), transaction_uuid=sa.bindparam("txn"))
        )
        params = {
            "h": table_hash(table_key),
            "v": version,
            "staged": expected_path,
            "final": final_path,
            "txn": transaction_uuid,
        }
        if self._write(lambda c: c.execute(stmt, params).rowcount, f"adopt {table_key} v{version}") == 1:
            return True
        row = self.get(table_key, version)
        return row is not None and row.path == final_path and row.transaction_uuid == transaction_uuid

    def get(self, table_key: str, version: int) -> VersionRecord | None:
        """The row of ``version``, or None."""
        check_key(table_key)
        check_version(version)
        rows = self._read(lambda c: c.execute(GET, {"h": table_hash(table_key), "v": version}).all())
        return _record(rows[0]) if rows else None

    def latest(self, table_key: str) -> VersionRecord | None:
        """The row with the highest version, or None."""
        check_key(table_key)
        rows = self._read(lambda c: c.execute(LATEST, {"h": table_hash(table_key)}).all())
        return _record(rows[0]) if rows else None

    def versions_after(self, table_key: str, version: int) -> list[VersionRecord]:
        """Rows with a version greater than ``version``, ascending."""
        check_key(table_key)
        check_bound(version)
        params = {"h": table_hash(table_key), "v": version}
        return [_record(r) for r in self._read(lambda c: c.execute(AFTER, params).all())]

    def reserve_many(self, records: list[VersionRecord]) -> None:
        """Reserve several rows (of one or several tables) in ONE database
        transaction: all of them or none.  VersionExistsError when any is taken
        (nothing is kept), IncarnationMismatchError on a predecessor mismatch."""
        for r in records:
            check_record(r, max_id_chars=MAX_ID_CHARS)

        def run(conn: Connection) -> None:
            conn = conn.execution_options(isolation_level=_TXN_ISOLATION.get(self._backend, "READ COMMITTED"))
            with conn.begin():
                for r in records:
                    params = {
                        "h": table_hash(r.table_key),
                        "v": r.version,
                        "pv": r.version - 1,
                        "key": r.table_key,
                        "path": r.path,
                        "size": r.size,
                        "txn": r.transaction_uuid,
                        "inc": r.incarnation,
                    }
                    params.update(h2=params["h"], inc2=r.incarnation, pv2=params["pv"])
                    if conn.execute(RESERVE, params).rowcount != 1:
                        raise IncarnationMismatchError(
                            f"reserve {r.table_key} v{r.version}: version {r.version - 1} is missing or belongs "
                            "to another incarnation; reload the table"
                        )

        try:
            self._write(run, f"reserve {len(records)} versions")
        except sa_exc.IntegrityError as exc:
            raise VersionExistsError(
                f"one of {[(r.table_key, r.version) for r in records]} is already reserved"
            ) from exc

    def snapshot(self) -> SqlSnapshot:
        """A read-only view of the latest rows as of one database snapshot,
        so several tables' latest versions are read consistently."""
        return SqlSnapshot(self)

    def delete_table(self, table_key: str) -> int:
        """Remove every row of a table; returns how many were removed."""
        check_key(table_key)
        params = {"h": table_hash(table_key)}
        return int(self._write(lambda c: c.execute(DELETE, params).rowcount, f"delete {table_key}"))

    def store_id(self) -> str:
        """This database's id: the ``store_id`` row of ``tessera_store_meta``,
        written by migration 0003 or, failing that, here on first use (an
        insert that the primary key lets only one process win; the others read
        the winner's).  Cached on this object.

        Raises StoreSchemaError when the meta table is missing (the schema is
        older than Tessera's) or the row is unusable, StoreUnavailableError
        when unreachable, AmbiguousStoreError when the insert's outcome is
        unknown and the row cannot be read back (call again)."""
        cached = getattr(self, "_store_id", None)
        if cached is not None:
            return cached
        found = self._read_store_id()
        if found is None:
            new = uuid.uuid4().hex
            try:
                self._write(lambda c: c.execute(PUT_META, {"n": STORE_ID_NAME, "val": new}), "create the store id")
            except sa_exc.IntegrityError:
                log.debug("%s: another process created the store id first", self._identity)
            except AmbiguousStoreError:
                if self._read_store_id() is None:
                    raise
            found = self._read_store_id()
            if found is None:  # pragma: no cover - deleted between the insert and the read
                raise StoreSchemaError(
                    f"{self._identity}: the store id row of {META_TABLE_NAME} vanished right after it was written; "
                    "something is deleting it - stop it, then retry"
                )
        self._store_id = found
        return found

    def check(self) -> None:
        """Verify the database is reachable, both tables have Tessera's
        columns (names, types by affinity, nullability, defaults, primary key)
        and the schema revision is the migrations' head."""
        from alembic.runtime.migration import MigrationContext

        def read_schema(conn: Connection) -> tuple[dict[str, tuple[list[ReflectedColumn], list[str]]], str | None]:
            insp = sa.inspect(conn)
            found = {}
            for name in TABLES:
                if insp.has_table(name):
                    pk = list(insp.get_pk_constraint(name).get("constrained_columns") or [])
                    found[name] = (insp.get_columns(name), pk)
            ctx = MigrationContext.configure(conn, opts={"version_table": sql_migrate.VERSION_TABLE})
            return found, ctx.get_current_revision()

        found, revision = self._read(read_schema)
        where = f"{self._identity}"
        if TABLE_NAME not in found:
            raise StoreSchemaError(f"{where}: table {TABLE_NAME} does not exist; {sql_migrate.UPGRADE_HINT}")
        self._check_columns(TABLE_NAME, *found[TABLE_NAME])
        head = sql_migrate.head_revision()
        if revision != head:
            if revision is None:
                raise StoreSchemaError(
                    f"{where}: table {TABLE_NAME} exists but {sql_migrate.VERSION_TABLE} records no Tessera "
                    f"migration (expected revision {head}); it was not created by Tessera's migrations - "
                    f"{sql_migrate.UPGRADE_HINT}"
                )
            if revision not in sql_migrate.known_revisions():
                raise StoreSchemaError(
                    f"{where}: schema revision {revision} is newer than this Tessera knows (head {head}); "
                    "upgrade Tessera"
                )
            raise StoreSchemaError(
                f"{where}: schema revision {revision} is behind head {head}; {sql_migrate.UPGRADE_HINT}"
            )
        if META_TABLE_NAME not in found:
            raise StoreSchemaError(
                f"{where}: table {META_TABLE_NAME} (which holds the store id) is missing although the schema is at "
                f"revision {head}: it was dropped by hand. Restore it from a backup of this database; recreating it "
                "gives the store a new id, which the tables it coordinates will refuse"
            )
        self._check_columns(META_TABLE_NAME, *found[META_TABLE_NAME])

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    def __repr__(self) -> str:
        return f"SqlManifestStore({self._identity!r})"

    # --------------------------------------------------------------- internals
    def _check_columns(self, table: str, columns: list[ReflectedColumn], pk: list[str]) -> None:
        """StoreSchemaError naming every column of ``table`` (reflected
        ``columns`` and primary key ``pk``) that differs from Tessera's model."""
        problems = schema_problems(self._backend, TABLES[table], columns, pk)
        if problems:
            raise StoreSchemaError(
                f"{self._identity}: table {table} is not the one Tessera's migrations create: "
                + "; ".join(problems)
                + f". It was created or altered by something else: rename or drop it (keep a copy if its data "
                f"matters), then {sql_migrate.UPGRADE_HINT}"
            )

    def _refuse_foreign_table(self) -> None:
        """Before upgrading: a same-named table that is not ours (other
        columns, types, nullability or primary key) is an error, not something
        to migrate over (nothing is written)."""

        def read_schema(conn: Connection) -> dict[str, tuple[list[ReflectedColumn], list[str]]]:
            insp = sa.inspect(conn)
            found = {}
            for name in TABLES:
                if insp.has_table(name):
                    pk = list(insp.get_pk_constraint(name).get("constrained_columns") or [])
                    found[name] = (insp.get_columns(name), pk)
            return found

        for name, (columns, pk) in self._read(read_schema).items():
            self._check_columns(name, columns, pk)

    def _read_store_id(self) -> str | None:
        """The ``store_id`` row's value, or None when there is no row yet."""
        value = self._read(lambda c: c.execute(GET_META, {"n": STORE_ID_NAME}).scalar())
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip() or value != value.strip():
            raise StoreSchemaError(
                f"{self._identity}: the store id in {META_TABLE_NAME} is {value!r}, not an id; restore the row from a "
                f"backup, or delete it to give this store a new id (tables bound to the old id will refuse it)"
            )
        return value

    def _connect(self, attempt: _Attempt | None = None) -> Connection:
        """A pooled connection (pinged, on PostgreSQL within ``attempt``'s deadline)."""
        _CHECKOUT.attempt = attempt or _Attempt(self._io_timeout)
        try:
            return self._engine.connect()
        except (sa_exc.DBAPIError, sa_exc.TimeoutError) as exc:
            raise StoreUnavailableError(f"cannot connect to {self._identity}: {_orig(exc)}") from exc
        finally:
            _CHECKOUT.attempt = None

    def _guarded(self, conn: Connection, attempt: _Attempt, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)``; on PostgreSQL under the watchdog until ``attempt``'s
        deadline.  A connection the watchdog cut is invalidated (closed and
        dropped from the pool), even if ``fn`` got its answer just in time."""
        if self._backend != "postgresql":
            return fn(conn)  # pymysql's read/write timeouts; SQLite is local
        if time.monotonic() >= attempt.begin():  # the ping used it all up: nothing sent yet
            raise StoreUnavailableError(
                f"{self._identity} did not answer within io_timeout={attempt.io_timeout:g}s (nothing was sent)"
            )
        try:
            timer = _WATCHDOG.arm(_pg_socket(conn.connection.dbapi_connection), attempt)
        except Exception as exc:  # noqa: BLE001 - psycopg: the connection is already broken
            conn.invalidate()
            raise StoreUnavailableError(f"connection to {self._identity} is unusable: {exc}") from exc
        try:
            return fn(conn)
        finally:
            if _WATCHDOG.disarm(timer) and not conn.invalidated:
                conn.invalidate()

    def _read(self, fn: Callable[[Connection], T]) -> T:
        for attempt in range(_TRANSIENT_RETRIES):
            this = _Attempt(self._io_timeout)
            conn = self._connect(this)
            try:
                with conn:
                    return self._guarded(conn, this, fn)
            except sa_exc.DBAPIError as exc:
                kind = "timeout" if this.timed_out else self._classify(exc)
                if kind == "schema":
                    raise StoreSchemaError(f"{self._identity}: {_orig(exc)}; {sql_migrate.UPGRADE_HINT}") from exc
                if kind == "timeout":  # not retried: the bound is io_timeout, not a multiple of it
                    raise StoreUnavailableError(
                        f"read from {self._identity}: no answer within io_timeout={self._io_timeout:g}s ({_orig(exc)})"
                    ) from exc
                if kind in ("retry", "lost") and attempt < 2:
                    _backoff(attempt)
                    continue
                raise StoreUnavailableError(f"read from {self._identity} failed: {_orig(exc)}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(self, fn: Callable[[Connection], T], what: str) -> T:
        for attempt in range(_TRANSIENT_RETRIES):
            this = _Attempt(self._io_timeout)
            conn = self._connect(this)
            try:
                with conn:
                    return self._guarded(conn, this, fn)
            except sa_exc.IntegrityError:
                raise
            except sa_exc.DBAPIError as exc:
                kind = "timeout" if this.timed_out else self._classify(exc)
                if kind == "schema":
                    raise StoreSchemaError(f"{self._identity}: {_orig(exc)}; {sql_migrate.UPGRADE_HINT}") from exc
                if kind == "retry" and (self._backend != "sqlite" or attempt < 1):
                    # rolled back by the database: definitely not applied (SQLite already
                    # waited busy_timeout before reporting a lock, so it is retried once)
                    log.debug("%s: transient conflict (%s), retrying", what, _orig(exc))
                    _backoff(attempt)
                    continue
                if kind in ("refused", "retry"):
                    raise StoreUnavailableError(f"{what} was rejected by {self._identity}: {_orig(exc)}") from exc
                if kind == "timeout":
                    raise AmbiguousStoreError(
                        f"{what}: no answer from {self._identity} within io_timeout={self._io_timeout:g}s after the "
                        f"statement was sent ({_orig(exc)}); it may or may not have been applied - read the row back"
                    ) from exc
                raise AmbiguousStoreError(
                    f"{what}: the connection failed after the statement was sent ({_orig(exc)}); "
                    "it may or may not have been applied - read the row back"
                ) from exc
        raise StoreUnavailableError(f"{what}: gave up after {_TRANSIENT_RETRIES} lock conflicts on {self._identity}")

    def _classify(self, exc: sa_exc.DBAPIError) -> str:
        """'retry' (rolled back, try again), 'schema', 'refused' (the server
        answered with an error: not applied), 'timeout' (no answer within
        io_timeout: unknown, and not worth retrying) or 'lost' (no answer:
        unknown).  PostgreSQL's client-side deadline is recognised by the
        caller (the watchdog marks the attempt), and reported as 'timeout'."""
        orig = _orig(exc)
        text = str(orig).lower()
        if self._backend == "sqlite":
            if "locked" in text or "busy" in text:
                return "retry"
            if "no such table" in text or "no such column" in text or "has no column" in text:
                return "schema"
            if "i/o error" in text or "malformed" in text or "disk is full" in text:
                return "lost"
            return "refused"
        if self._backend == "postgresql":
            code = getattr(orig, "sqlstate", None)
            if code in ("40P01", "40001", "55P03"):
                return "retry"
            if code in ("42P01", "42703"):
                return "schema"
            if code == "57014":
                # query_canceled: statement_timeout (or a cancel request) stopped the
                # statement; in autocommit it was rolled back, so a write was not applied
                return "refused"
            # 08xxx connection exceptions and 57Pxx (server shutting down, connection
            # terminated): the statement may have committed before the connection died
            return "lost" if code is None or code.startswith("08") or code.startswith("57P") else "refused"
        code = orig.args[0] if getattr(orig, "args", None) and isinstance(orig.args[0], int) else None
        if code in (1213, 1205):
            return "retry"
        if code in (1146, 1054):
            return "schema"
        if code == 2013 and "timed out" in text:  # pymysql's read_timeout/write_timeout (= io_timeout)
            return "timeout"
        return "refused" if code is not None and 0 < code < 2000 else "lost"

    @staticmethod
    def _render_identity(url: URL) -> str:
        backend = url.get_backend_name()
        if backend == "sqlite":
            return f"sqlite:///{os.path.abspath(url.database or '')}#{TABLE_NAME}"
        port = f":{url.port}" if url.port else ""
        return f"{backend}://{url.host or ''}{port}/{url.database}#{TABLE_NAME}"


_TXN_ISOLATION = {
    "sqlite": "SERIALIZABLE",
    "postgresql": "REPEATABLE READ",
    "mysql": "REPEATABLE READ",
    "mariadb": "REPEATABLE READ",
}


class SqlSnapshot:
    """Reads of one consistent database snapshot (a repeatable-read transaction)."""

    def __init__(self, store: SqlManifestStore) -> None:
        self._store = store
        conn = store._connect()
        if store._backend == "sqlite":
            # pysqlite only opens transactions before DML; a read snapshot needs an
            # explicit BEGIN on the autocommit connection (WAL fixes it at the first read)
            self._conn, self._txn = conn, None
            conn.exec_driver_sql("BEGIN")
        else:
            self._conn = conn.execution_options(isolation_level=_TXN_ISOLATION.get(store._backend, "REPEATABLE READ"))
            self._txn = self._conn.begin()

    def latest(self, table_key: str) -> VersionRecord | None:
        check_key(table_key)
        rows = self._conn.execute(LATEST, {"h": table_hash(table_key)}).all()
        return _record(rows[0]) if rows else None

    def close(self) -> None:
        try:
            if self._txn is None:
                self._conn.exec_driver_sql("ROLLBACK")
            else:
                self._txn.rollback()
        finally:
            self._conn.close()


def _record(row: sa.Row[Any, Any, Any, Any, Any, Any]) -> VersionRecord:  # a row of RECORD_COLUMNS
    return VersionRecord(
        table_key=row.table_key,
        version=int(row.version),
        path=row.path,
        size=int(row.size),
        transaction_uuid=row.transaction_uuid,
        incarnation=row.incarnation,
    )


def _backoff(attempt: int) -> None:
    time.sleep(min(0.5, 0.005 * 2**attempt) * random.uniform(0.5, 1.5))


def _connect_args(
    backend: str,
    busy_timeout_ms: int,
    connect_timeout: float,
    io_timeout: float,
    url_query: Any = None,
    *,
    server_timeout: bool = True,
) -> dict[str, Any]:
    """The DBAPI connect arguments for the timeouts (see the module).

    ``url_query`` is what the URL passes to the driver: a driver parameter
    given there (``keepalives_idle``, ``tcp_user_timeout`` ...) is left to it,
    and PostgreSQL's ``options`` are merged with ours (theirs come later, so a
    ``-c statement_timeout`` of the user's wins).  ``server_timeout=False``
    leaves out ``statement_timeout`` (migrations may wait long for a lock)."""
    query = dict(url_query or {})
    if backend == "sqlite":
        return {"timeout": busy_timeout_ms / 1000, "check_same_thread": False}
    if backend == "postgresql":
        # libpq has no read timeout: the watchdog (see _Watchdog) bounds every attempt;
        # keepalives and tcp_user_timeout detect a dead peer even outside store calls
        args: dict[str, Any] = {
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            "tcp_user_timeout": max(1, int(io_timeout * 1000)),
        }
        args = {k: v for k, v in args.items() if k not in query}
        args["connect_timeout"] = max(1, int(round(connect_timeout)))  # libpq: whole seconds; psycopg: at least 2
        options = []
        if server_timeout:
            options.append(f"-c statement_timeout={max(1, int(io_timeout * 1000 * _STATEMENT_TIMEOUT_SHARE))}")
        theirs = query.get("options")
        if isinstance(theirs, str) and theirs.strip():
            options.append(theirs.strip())
        if options:
            args["options"] = " ".join(options)
        return args
    return {"connect_timeout": connect_timeout, "read_timeout": io_timeout, "write_timeout": io_timeout}


def _file_id(path: str | None) -> tuple[int, int] | None:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if st is not None else None


def _install_sqlite_pragmas(engine: Engine, busy_timeout_ms: int, path: str | None = None) -> None:
    """Per connection: WAL, the busy timeout, full sync.  With ``path`` (a
    database file), a pooled connection whose file is no longer the one at
    ``path`` (deleted, or replaced by another database) is discarded at
    checkout: it would read and write a database nobody else sees, and the
    store's identity check would never meet the new one."""
    if path:

        @event.listens_for(engine, "checkout")
        def _same_file(_dbapi_conn: Any, record: Any, _proxy: Any) -> None:
            opened = record.info.get("tessera_file")
            if opened is not None and _file_id(path) != opened:
                raise sa_exc.InvalidatePoolError(f"{path} was replaced since this connection opened it")

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, record: Any) -> None:
        if path:
            record.info["tessera_file"] = _file_id(path)
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cur.execute("PRAGMA synchronous=FULL")
        finally:
            cur.close()
