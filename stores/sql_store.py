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

This module is the store itself (its statements' outcomes, retries and
schema checks); the rest of the SQL store is one idea a module: the tables
and statements (:mod:`stores.sql_schema`), their migrations
(:mod:`stores.sql_migrate`), the engine, its settings and connect arguments
(:mod:`stores.sql_engine`), PostgreSQL's client-side deadlines
(:mod:`stores.sql_deadlines`) and what a driver's error means
(:mod:`stores.sql_errors`).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.engine.interfaces import ReflectedColumn

from . import sql_engine, sql_migrate
from .backoff import backoff
from .errors import (
    AmbiguousStoreError,
    IncarnationMismatchError,
    StoreSchemaError,
    StoreUnavailableError,
    VersionExistsError,
)
from .local import requested_durability
from .manifest_checks import check_bound, check_flip_paths, check_key, check_record, check_version
from .manifest_store import ManifestStore, VersionRecord, predecessor_error
from .sql_deadlines import CHECKOUT, WATCHDOG, Attempt, pg_socket
from .sql_errors import classify, orig
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
from .store_url import provisioned

log = logging.getLogger(__name__)

__all__ = ["Base", "ManifestVersionRow", "SqlManifestStore", "TABLE_NAME", "table_hash"]

_TRANSIENT_RETRIES = 8

T = TypeVar("T")


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


def _run(conn: Connection, stmt: Any, params: dict[str, Any]) -> int:
    return int(conn.execute(stmt, params).rowcount)


def _sqlite_unsynced(conn: Connection, stmt: Any, params: dict[str, Any]) -> int:
    """Run ``stmt`` on SQLite with ``synchronous=NORMAL`` (in WAL mode: no
    fsync at its commit; the next ``FULL`` commit, a reservation, syncs the
    WAL and this transaction with it).  For the flip, which a crash may lose
    harmlessly (the next reader finishes it), and for a reservation under
    durability "none".  The connection goes back to ``FULL`` before it
    returns to the pool, or is discarded."""
    conn.exec_driver_sql("PRAGMA synchronous=NORMAL")
    try:
        return _run(conn, stmt, params)
    finally:
        try:
            conn.exec_driver_sql("PRAGMA synchronous=FULL")
        except Exception:
            conn.invalidate()  # never pool a connection that commits unsynced
            raise


class SqlManifestStore(ManifestStore):
    """A :class:`~stores.manifest_store.ManifestStore` in a SQL database."""

    kind = "sql"
    #: seconds one attempt may wait for the database (set by from_url)
    _io_timeout: float = sql_engine.SETTINGS.defaults["io_timeout"]

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

        ``create`` runs the Alembic upgrade (True), or never (False: the
        schema must already be at the head revision).  By default SQLite is
        upgraded on every open and a server's database when its check finds
        the schema missing or behind (provisioned on first use), unless the
        URL says ``?provision=false``.  With
        ``check`` the schema is verified (StoreSchemaError) and the database
        reached (StoreUnavailableError) before returning.

        Settings (keyword arguments, or the same names in the URL's query;
        a keyword argument wins): ``io_timeout`` (seconds, default 30: see the
        module), ``connect_timeout`` (5), ``busy_timeout_ms`` (SQLite, 10000),
        ``pool_size`` (5), ``max_overflow`` (10), ``pool_pre_ping`` (true).
        A bad value is InvalidURIError (from the URL) or
        InvalidStorageOptionError (a keyword argument), naming the setting."""
        engine, parsed, settings = sql_engine.open_engine(
            url,
            {
                "io_timeout": io_timeout,
                "connect_timeout": connect_timeout,
                "busy_timeout_ms": busy_timeout_ms,
                "pool_size": pool_size,
                "max_overflow": max_overflow,
                "pool_pre_ping": pool_pre_ping,
            },
        )
        store = cls(engine, parsed)
        store._io_timeout = settings["io_timeout"]

        def provision(store: SqlManifestStore) -> None:
            store._refuse_foreign_table()
            sql_engine.migrate(parsed, settings)

        def provision_if_needed(store: SqlManifestStore) -> None:
            try:
                store.check()
            except StoreSchemaError:  # missing or behind: provisioned now (a foreign table is refused)
                log.info("%s: no Tessera schema at the head revision: provisioning it", store._identity)
                provision(store)

        if create is not None:
            migrate = provision if create else None
        elif parsed.get_backend_name() == "sqlite":
            migrate = provision  # embedded: always
        else:
            # a server: provisioned on first use, unless the URL says ?provision=false (an application
            # role that may not create tables; `tessera store provision URL` does it ahead of time);
            # a store opened without its check (check=False) is not connected to here at all
            migrate = provision_if_needed if settings["provision"] and check else None
        provisioned(store, migrate, check=check)
        store._db_file = sql_engine.database_file(parsed)
        store._db_file_id = sql_engine.file_id(store._db_file)
        return store

    _db_file: str | None = None
    _db_file_id: tuple[int, int] | None = None

    def replaced(self) -> bool:
        """Whether this SQLite store's database file was deleted or replaced
        since the store was opened (then open the URL anew)."""
        return self._db_file is not None and sql_engine.file_id(self._db_file) != self._db_file_id

    # ------------------------------------------------------------ the protocol
    def identity(self) -> str:
        """``backend://host:port/database#table`` with no user or password."""
        return self._identity

    def reserve(self, record: VersionRecord) -> bool:
        """Insert ``record`` if its version is free and its predecessor (if
        any) has the same incarnation, in one statement; False when the row
        already held this transaction."""
        check_record(record, max_id_chars=MAX_ID_CHARS)
        params = _reserve_params(record)
        what = f"reserve {record.table_key} v{record.version}"
        # SQLite under durability "none" (the caller's: a table's setting or a
        # block's): as the table's own files, the row is not synced at commit
        # (a crash of the process loses nothing; a power loss may lose it)
        run = _sqlite_unsynced if self._backend == "sqlite" and requested_durability() == "none" else _run
        try:
            inserted = self._write(lambda c: run(c, RESERVE, params), what)
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
                    if conn.execute(RESERVE, _reserve_params(r)).rowcount != 1:
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
        cached = self._store_id
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
            ctx = MigrationContext.configure(conn, opts={"version_table": sql_migrate.VERSION_TABLE})
            return _reflect_tables(conn), ctx.get_current_revision()

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
        for name, (columns, pk) in self._read(_reflect_tables).items():
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

    def _connect(self, attempt: Attempt | None = None) -> Connection:
        """A pooled connection (pinged, on PostgreSQL within ``attempt``'s deadline)."""
        CHECKOUT.attempt = attempt or Attempt(self._io_timeout)
        try:
            return self._engine.connect()
        except (sa_exc.DBAPIError, sa_exc.TimeoutError) as exc:
            raise StoreUnavailableError(f"cannot connect to {self._identity}: {orig(exc)}") from exc
        finally:
            CHECKOUT.attempt = None

    def _guarded(self, conn: Connection, attempt: Attempt, fn: Callable[[Connection], T]) -> T:
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
            timer = WATCHDOG.arm(pg_socket(conn.connection.dbapi_connection), attempt)
        except Exception as exc:  # noqa: BLE001 - psycopg: the connection is already broken
            conn.invalidate()
            raise StoreUnavailableError(f"connection to {self._identity} is unusable: {exc}") from exc
        try:
            return fn(conn)
        finally:
            if WATCHDOG.disarm(timer) and not conn.invalidated:
                conn.invalidate()

    def _read(self, fn: Callable[[Connection], T]) -> T:
        for attempt in range(_TRANSIENT_RETRIES):
            this = Attempt(self._io_timeout)
            conn = self._connect(this)
            try:
                with conn:
                    return self._guarded(conn, this, fn)
            except sa_exc.DBAPIError as exc:
                kind = "timeout" if this.timed_out else classify(self._backend, exc)
                if kind == "schema":
                    raise StoreSchemaError(f"{self._identity}: {orig(exc)}; {sql_migrate.UPGRADE_HINT}") from exc
                if kind == "timeout":  # not retried: the bound is io_timeout, not a multiple of it
                    raise StoreUnavailableError(
                        f"read from {self._identity}: no answer within io_timeout={self._io_timeout:g}s ({orig(exc)})"
                    ) from exc
                if kind in ("retry", "lost") and attempt < 2:
                    _backoff(attempt)
                    continue
                raise StoreUnavailableError(f"read from {self._identity} failed: {orig(exc)}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(self, fn: Callable[[Connection], T], what: str) -> T:
        for attempt in range(_TRANSIENT_RETRIES):
            this = Attempt(self._io_timeout)
            conn = self._connect(this)
            try:
                with conn:
                    return self._guarded(conn, this, fn)
            except sa_exc.IntegrityError:
                raise
            except sa_exc.DBAPIError as exc:
                kind = "timeout" if this.timed_out else classify(self._backend, exc)
                if kind == "schema":
                    raise StoreSchemaError(f"{self._identity}: {orig(exc)}; {sql_migrate.UPGRADE_HINT}") from exc
                if kind == "retry" and (self._backend != "sqlite" or attempt < 1):
                    # rolled back by the database: definitely not applied (SQLite already
                    # waited busy_timeout before reporting a lock, so it is retried once)
                    log.debug("%s: transient conflict (%s), retrying", what, orig(exc))
                    _backoff(attempt)
                    continue
                if kind in ("refused", "retry"):
                    raise StoreUnavailableError(f"{what} was rejected by {self._identity}: {orig(exc)}") from exc
                if kind == "timeout":
                    raise AmbiguousStoreError(
                        f"{what}: no answer from {self._identity} within io_timeout={self._io_timeout:g}s after the "
                        f"statement was sent ({orig(exc)}); it may or may not have been applied - read the row back"
                    ) from exc
                raise AmbiguousStoreError(
                    f"{what}: the connection failed after the statement was sent ({orig(exc)}); "
                    "it may or may not have been applied - read the row back"
                ) from exc
        raise StoreUnavailableError(f"{what}: gave up after {_TRANSIENT_RETRIES} lock conflicts on {self._identity}")

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


def _reflect_tables(conn: Connection) -> dict[str, tuple[list[ReflectedColumn], list[str]]]:
    """The columns and primary key of each of Tessera's tables that exists."""
    insp = sa.inspect(conn)
    found = {}
    for name in TABLES:
        if insp.has_table(name):
            pk = list(insp.get_pk_constraint(name).get("constrained_columns") or [])
            found[name] = (insp.get_columns(name), pk)
    return found


def _reserve_params(record: VersionRecord) -> dict[str, Any]:
    """The parameters of :data:`RESERVE` for ``record``."""
    h = table_hash(record.table_key)
    return {
        "h": h,
        "v": record.version,
        "pv": record.version - 1,
        "key": record.table_key,
        "path": record.path,
        "size": record.size,
        "txn": record.transaction_uuid,
        "inc": record.incarnation,
        "h2": h,
        "inc2": record.incarnation,
        "pv2": record.version - 1,
    }


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
    backoff(attempt, first=0.005, cap=0.5)


def ensure_store_id(url: str | URL) -> str:
    """The store id of the database at ``url`` (at the head revision),
    creating it if absent: see :meth:`SqlManifestStore.store_id`."""
    store = SqlManifestStore.from_url(url, create=False)
    try:
        return store.store_id()
    finally:
        store.close()
