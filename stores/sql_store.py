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

SQLite (the embedded default) runs in WAL mode with ``synchronous=FULL`` and
a ``busy_timeout``; it coordinates processes on one host only.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine

from . import sql_migrate
from .errors import (
    AmbiguousStoreError,
    IncarnationMismatchError,
    StoreSchemaError,
    StoreUnavailableError,
    VersionExistsError,
)
from .manifest_checks import check_bound, check_flip_paths, check_key, check_record, check_version
from .manifest_store import VersionRecord, predecessor_error
from .sql_schema import (  # noqa: F401 - Base, ManifestVersionRow and TABLE_NAME are re-exported
    AFTER,
    DELETE,
    EXPECTED_COLUMNS,
    FLIP,
    GET,
    LATEST,
    MAX_ID_CHARS,
    RESERVE,
    TABLE_NAME,
    Base,
    ExactString,
    ManifestVersionRow,
    table_hash,
)

log = logging.getLogger(__name__)

__all__ = ["Base", "ManifestVersionRow", "SqlManifestStore", "TABLE_NAME", "table_hash"]

_TRANSIENT_RETRIES = 8
_SKIP_ROLLBACK_SUPPORTED = "skip_autocommit_rollback" in inspect.signature(sa.engine.default.DefaultDialect.__init__).parameters

T = TypeVar("T")


def _orig(exc: BaseException) -> BaseException:
    return getattr(exc, "orig", None) or exc


_LIVE: "weakref.WeakSet[SqlManifestStore]" = weakref.WeakSet()


def _dispose_after_fork() -> None:
    for store in list(_LIVE):
        store._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_dispose_after_fork)


class SqlManifestStore:
    """A :class:`~stores.manifest_store.ManifestStore` in a SQL database."""

    kind = "sql"

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
        busy_timeout_ms: int = 10_000,
        connect_timeout: float = 5.0,
        io_timeout: float = 30.0,
        pool_size: int = 5,
        max_overflow: int = 10,
        pool_pre_ping: bool = True,
    ) -> SqlManifestStore:
        """Open a store on a SQLAlchemy URL (``sqlite:///file.db``,
        ``postgresql+psycopg://user@host/db``, ``mysql+pymysql://user@host/db``;
        a URL without a driver gets psycopg / pymysql).

        ``create`` (default: True for SQLite only) runs the Alembic upgrade;
        otherwise the schema must already be at the head revision.  With
        ``check`` the schema is verified (StoreSchemaError) and the database
        reached (StoreUnavailableError) before returning."""
        parsed = sql_migrate.parse_sql_url(url)
        backend = parsed.get_backend_name()
        connect_args = _connect_args(backend, busy_timeout_ms, connect_timeout, io_timeout)
        kwargs: dict[str, Any] = {
            "isolation_level": "AUTOCOMMIT",
            "pool_reset_on_return": None,  # autocommit leaves no transaction to roll back
            "connect_args": connect_args,
        }
        if _SKIP_ROLLBACK_SUPPORTED:  # SQLAlchemy >= 2.0.43: no ROLLBACK round trip per checkout
            kwargs["skip_autocommit_rollback"] = True
        if backend != "sqlite":
            kwargs.update(pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=pool_pre_ping, pool_recycle=1800)
        else:
            # no pooled SQLite connection survives an operation: a connection that
            # is open across fork() corrupts the locking of the WAL (lost commits
            # were observed when a parent held one while children committed)
            kwargs.update(poolclass=sa.pool.NullPool)
        engine = sql_migrate.create_sql_engine(parsed, **kwargs)
        if backend == "sqlite":
            _install_sqlite_pragmas(engine, busy_timeout_ms)
        store = cls(engine, parsed)
        migrate = create if create is not None else backend == "sqlite"
        try:
            if migrate:
                store._refuse_foreign_table()
                migrate_engine = sql_migrate.create_sql_engine(parsed, poolclass=sa.pool.NullPool, connect_args=connect_args)
                try:
                    sql_migrate.upgrade(migrate_engine)
                finally:
                    migrate_engine.dispose()
            if check:
                store.check()
        except BaseException:
            store.close()
            raise
        return store

    # ------------------------------------------------------------ the protocol
    def identity(self) -> str:
        """``backend://host:port/database#table`` with no user or password."""
        return self._identity

    def reserve(self, record: VersionRecord) -> None:
        """Insert ``record`` if its version is free and its predecessor (if
        any) has the same incarnation, in one statement."""
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
                return
            raise VersionExistsError(
                f"version {record.version} of {record.table_key} is already reserved"
                + (f" by transaction {existing.transaction_uuid}" if existing else "")
            ) from None
        if inserted == 1:
            return
        if inserted != 0:  # the driver reported no row count: read back
            row = self.get(record.table_key, record.version)
            if row is not None and row.transaction_uuid == record.transaction_uuid:
                return
        pred = self.get(record.table_key, record.version - 1)
        raise predecessor_error(what, record, pred.incarnation if pred else None)

    def flip(self, table_key: str, version: int, staged_path: str, final_path: str) -> bool:
        """Point the row at ``final_path`` if it still holds ``staged_path``
        (``final_path`` + ``-<uuid>``; anything else is a ValueError)."""
        check_key(table_key)
        check_version(version)
        check_flip_paths(staged_path, final_path)
        params = {"h": table_hash(table_key), "v": version, "staged": staged_path, "final": final_path}
        if self._write(lambda c: c.execute(FLIP, params).rowcount, f"flip {table_key} v{version}") == 1:
            return True
        row = self.get(table_key, version)
        return row is not None and row.path == final_path

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
                        "h": table_hash(r.table_key), "v": r.version, "pv": r.version - 1, "key": r.table_key,
                        "path": r.path, "size": r.size, "txn": r.transaction_uuid, "inc": r.incarnation,
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
            raise VersionExistsError(f"one of {[(r.table_key, r.version) for r in records]} is already reserved") from exc

    def snapshot(self) -> "SqlSnapshot":
        """A read-only view of the latest rows as of one database snapshot,
        so several tables' latest versions are read consistently."""
        return SqlSnapshot(self)

    def delete_table(self, table_key: str) -> int:
        """Remove every row of a table; returns how many were removed."""
        check_key(table_key)
        params = {"h": table_hash(table_key)}
        return int(self._write(lambda c: c.execute(DELETE, params).rowcount, f"delete {table_key}"))

    def check(self) -> None:
        """Verify the database is reachable, the table has Tessera's columns
        and the schema revision is the migrations' head."""
        from alembic.runtime.migration import MigrationContext

        def read_schema(conn: Connection) -> tuple[set[str] | None, list[str], str | None]:
            insp = sa.inspect(conn)
            if not insp.has_table(TABLE_NAME):
                return None, [], None
            cols = {c["name"] for c in insp.get_columns(TABLE_NAME)}
            pk = list(insp.get_pk_constraint(TABLE_NAME).get("constrained_columns") or [])
            ctx = MigrationContext.configure(conn, opts={"version_table": sql_migrate.VERSION_TABLE})
            return cols, pk, ctx.get_current_revision()

        cols, pk, revision = self._read(read_schema)
        where = f"{self._identity}"
        if cols is None:
            raise StoreSchemaError(f"{where}: table {TABLE_NAME} does not exist; {sql_migrate.UPGRADE_HINT}")
        self._check_columns(cols, pk)
        head = sql_migrate.head_revision()
        if revision == head:
            return
        if revision is None:
            raise StoreSchemaError(
                f"{where}: table {TABLE_NAME} exists but {sql_migrate.VERSION_TABLE} records no Tessera migration "
                f"(expected revision {head}); it was not created by Tessera's migrations - {sql_migrate.UPGRADE_HINT}"
            )
        if revision not in sql_migrate.known_revisions():
            raise StoreSchemaError(
                f"{where}: schema revision {revision} is newer than this Tessera knows (head {head}); upgrade Tessera"
            )
        raise StoreSchemaError(f"{where}: schema revision {revision} is behind head {head}; {sql_migrate.UPGRADE_HINT}")

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    def __repr__(self) -> str:
        return f"SqlManifestStore({self._identity!r})"

    # --------------------------------------------------------------- internals
    def _check_columns(self, cols: set[str], pk: list[str]) -> None:
        missing, extra = EXPECTED_COLUMNS - cols, cols - EXPECTED_COLUMNS
        if missing or extra or sorted(pk) != ["table_hash", "version"]:
            raise StoreSchemaError(
                f"{self._identity}: table {TABLE_NAME} has columns {sorted(cols)} with primary key {pk}; "
                f"Tessera expects {sorted(EXPECTED_COLUMNS)} with primary key ['table_hash', 'version']"
                + (f" (missing {sorted(missing)})" if missing else "")
                + (f" (unexpected {sorted(extra)})" if extra else "")
                + f". Rename or drop the foreign table, then {sql_migrate.UPGRADE_HINT}"
            )

    def _refuse_foreign_table(self) -> None:
        """Before upgrading: a same-named table that is not ours is an error,
        not something to migrate over (nothing is written)."""

        def read_schema(conn: Connection) -> tuple[set[str], list[str]] | None:
            insp = sa.inspect(conn)
            if not insp.has_table(TABLE_NAME):
                return None
            pk = list(insp.get_pk_constraint(TABLE_NAME).get("constrained_columns") or [])
            return {c["name"] for c in insp.get_columns(TABLE_NAME)}, pk

        found = self._read(read_schema)
        if found is not None:
            self._check_columns(*found)

    def _connect(self) -> Connection:
        try:
            return self._engine.connect()
        except (sa_exc.DBAPIError, sa_exc.TimeoutError) as exc:
            raise StoreUnavailableError(f"cannot connect to {self._identity}: {_orig(exc)}") from exc

    def _read(self, fn: Callable[[Connection], T]) -> T:
        for attempt in range(_TRANSIENT_RETRIES):
            conn = self._connect()
            try:
                with conn:
                    return fn(conn)
            except sa_exc.DBAPIError as exc:
                kind = self._classify(exc)
                if kind == "schema":
                    raise StoreSchemaError(f"{self._identity}: {_orig(exc)}; {sql_migrate.UPGRADE_HINT}") from exc
                if kind in ("retry", "lost") and attempt < 2:
                    _backoff(attempt)
                    continue
                raise StoreUnavailableError(f"read from {self._identity} failed: {_orig(exc)}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(self, fn: Callable[[Connection], T], what: str) -> T:
        for attempt in range(_TRANSIENT_RETRIES):
            conn = self._connect()
            try:
                with conn:
                    return fn(conn)
            except sa_exc.IntegrityError:
                raise
            except sa_exc.DBAPIError as exc:
                kind = self._classify(exc)
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
                raise AmbiguousStoreError(
                    f"{what}: the connection failed after the statement was sent ({_orig(exc)}); "
                    "it may or may not have been applied - read the row back"
                ) from exc
        raise StoreUnavailableError(f"{what}: gave up after {_TRANSIENT_RETRIES} lock conflicts on {self._identity}")

    def _classify(self, exc: sa_exc.DBAPIError) -> str:
        """'retry' (rolled back, try again), 'schema', 'refused' (the server
        answered with an error: not applied) or 'lost' (no answer: unknown)."""
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
            return "lost" if code is None or code.startswith("08") or code.startswith("57P") else "refused"
        code = orig.args[0] if getattr(orig, "args", None) and isinstance(orig.args[0], int) else None
        if code in (1213, 1205):
            return "retry"
        if code in (1146, 1054):
            return "schema"
        return "refused" if code is not None and 0 < code < 2000 else "lost"

    @staticmethod
    def _render_identity(url: URL) -> str:
        backend = url.get_backend_name()
        if backend == "sqlite":
            return f"sqlite:///{os.path.abspath(url.database or '')}#{TABLE_NAME}"
        port = f":{url.port}" if url.port else ""
        return f"{backend}://{url.host or ''}{port}/{url.database}#{TABLE_NAME}"


_TXN_ISOLATION = {"sqlite": "SERIALIZABLE", "postgresql": "REPEATABLE READ", "mysql": "REPEATABLE READ",
                  "mariadb": "REPEATABLE READ"}


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


def _record(row: sa.Row[Any]) -> VersionRecord:
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


def _connect_args(backend: str, busy_timeout_ms: int, connect_timeout: float, io_timeout: float) -> dict[str, Any]:
    if backend == "sqlite":
        return {"timeout": busy_timeout_ms / 1000, "check_same_thread": False}
    if backend == "postgresql":
        # libpq has no read timeout: TCP keepalives and tcp_user_timeout detect a dead peer
        # (a write then fails as ambiguous) instead of waiting forever
        return {
            "connect_timeout": max(1, int(round(connect_timeout))),
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            "tcp_user_timeout": int(io_timeout * 1000),
        }
    return {"connect_timeout": connect_timeout, "read_timeout": io_timeout, "write_timeout": io_timeout}


def _install_sqlite_pragmas(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cur.execute("PRAGMA synchronous=FULL")
        finally:
            cur.close()
