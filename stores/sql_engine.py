"""The SQL store's engine: its settings (keyword arguments or the URL's
query: ``io_timeout``, ``connect_timeout``, ``busy_timeout_ms``,
``pool_size``, ``max_overflow``, ``pool_pre_ping``; see
:mod:`stores.store_options`), the driver's connect arguments that carry the
timeouts, SQLite's pragmas and the ping of idle pooled connections; and the
engine a migration runs on (see :mod:`stores.sql_store` for what the
timeouts mean)."""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Engine

from . import sql_migrate, store_options
from .errors import InvalidURIError
from .sql_deadlines import CHECKOUT, WATCHDOG, Attempt, pg_socket
from .store_url import StoreSettings, resolve_settings

_SKIP_ROLLBACK_SUPPORTED = (
    "skip_autocommit_rollback" in inspect.signature(sa.engine.default.DefaultDialect.__init__).parameters
)

#: the settings from_url takes as keyword arguments or URL query parameters
#: (messages name the store by its backend: "postgresql store")
SETTINGS = StoreSettings(
    "SQL store",
    {
        "io_timeout": store_options.seconds,
        "connect_timeout": store_options.seconds,
        "busy_timeout_ms": store_options.whole(0),
        "pool_size": store_options.whole(0),
        "max_overflow": store_options.whole(-1),
        "pool_pre_ping": store_options.flag,
        "provision": store_options.flag,
    },
    {
        "io_timeout": 30.0,
        "connect_timeout": 5.0,
        "busy_timeout_ms": 10_000,
        "pool_size": 5,
        "max_overflow": 10,
        "pool_pre_ping": True,
        "provision": True,
    },
)
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
        attempt = getattr(CHECKOUT, "attempt", None) or Attempt(io_timeout)
        timer = None
        if backend == "postgresql":
            try:
                timer = WATCHDOG.arm(pg_socket(dbapi_connection), attempt)
            except Exception as exc:  # noqa: BLE001 - a broken connection has no socket
                raise sa_exc.InvalidatePoolError(f"pooled connection unusable: {exc}") from exc
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # noqa: BLE001
            raise sa_exc.InvalidatePoolError(f"ping failed: {exc}") from exc
        finally:
            if timer is not None and WATCHDOG.disarm(timer):
                raise sa_exc.InvalidatePoolError(f"no answer to the ping within io_timeout={attempt.io_timeout:g}s")


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
        # libpq has no read timeout: the watchdog (see sql_deadlines.Watchdog) bounds every attempt;
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


def file_id(path: str | None) -> tuple[int, int] | None:
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
            if opened is not None and file_id(path) != opened:
                raise sa_exc.InvalidatePoolError(f"{path} was replaced since this connection opened it")

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, record: Any) -> None:
        if path:
            record.info["tessera_file"] = file_id(path)
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cur.execute("PRAGMA synchronous=FULL")
        finally:
            cur.close()


def database_file(url: URL) -> str | None:
    """The absolute path of a SQLite database file (None for any other database, or SQLite in memory)."""
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return os.path.abspath(url.database)
    return None


def open_engine(url: str | URL, given: dict[str, Any]) -> tuple[Engine, URL, dict[str, Any]]:
    """The store's engine for ``url`` with the settings ``given`` as keyword
    arguments (None: from the URL, else the default); returns the engine, the
    URL it connects to (our settings removed from its query) and the settings."""
    parsed = sql_migrate.parse_sql_url(url)
    backend = parsed.get_backend_name()
    settings, rest = resolve_settings(
        dataclasses.replace(SETTINGS, label=f"{backend} store"),
        list(parsed.query.items()),
        given,
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
        # statement), but never open across fork(): see sql_store._close_sqlite_before_fork
        kwargs.update(poolclass=sa.pool.QueuePool, pool_size=settings["pool_size"], max_overflow=-1)
    engine = sql_migrate.create_sql_engine(parsed, **kwargs)
    if backend == "sqlite":
        _install_sqlite_pragmas(engine, busy_timeout_ms, database_file(parsed))
    elif settings["pool_pre_ping"]:
        _install_ping(engine, io_timeout, backend)
    return engine, parsed, settings


def migrate(url: URL, settings: dict[str, Any]) -> None:
    """Upgrade the database at ``url`` to the migrations' head, on an engine
    of its own without ``statement_timeout`` (a migration may wait long for
    another process's migration lock)."""
    backend = url.get_backend_name()
    args = _connect_args(
        backend,
        settings["busy_timeout_ms"],
        settings["connect_timeout"],
        settings["io_timeout"],
        url.query,
        server_timeout=False,
    )
    engine = sql_migrate.create_sql_engine(url, poolclass=sa.pool.NullPool, connect_args=args)
    try:
        sql_migrate.upgrade(engine)
    finally:
        engine.dispose()
