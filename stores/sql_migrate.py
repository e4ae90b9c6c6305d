"""Alembic migrations for Tessera's SQL tables, run programmatically.

There is no ``alembic.ini``: :func:`alembic_config` builds an
:class:`alembic.config.Config` whose ``script_location`` is the repository's
top-level ``migrations/`` folder (found next to the installed ``stores``
package, which is where an editable install or a source checkout puts it), or
the folder named by the ``TESSERA_MIGRATIONS_DIR`` environment variable.

Alembic records the applied revision in its own table,
:data:`VERSION_TABLE` (``tessera_alembic_version``), so a database shared with
other applications keeps their ``alembic_version`` untouched.

Typical use::

    from tessera.stores import sql_migrate
    sql_migrate.upgrade("postgresql+psycopg://user@host/db")
    assert sql_migrate.current_revision(url) == sql_migrate.head_revision()
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process lock for SQLite
    fcntl = None  # type: ignore[assignment]

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Engine

from .errors import InvalidURIError, StoreSchemaError, StoreUnavailableError

log = logging.getLogger(__name__)

#: Alembic's version table for Tessera's migrations.
VERSION_TABLE = "tessera_alembic_version"

#: Default driver for each SQL backend named without one.
_DEFAULT_DRIVERS = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mariadb+pymysql",
}

#: What to tell a user whose schema is missing or old.
UPGRADE_HINT = "run `tessera store provision URL` (or open the store with create=True)"


def parse_sql_url(url: str | URL) -> URL:
    """Parse a SQLAlchemy URL, filling in Tessera's default driver
    (``postgresql`` -> ``postgresql+psycopg``, ``mysql`` -> ``mysql+pymysql``).

    Raises InvalidURIError for anything that is not a usable SQL URL."""
    if isinstance(url, URL):
        parsed = url
    else:
        if not isinstance(url, str) or "://" not in url:
            raise InvalidURIError(f"not a SQL store URL: {url!r}")
        if "\x00" in url:
            raise InvalidURIError(f"SQL store URL {url!r} contains a NUL byte")
        try:
            parsed = sa.engine.make_url(url)
        except (sa_exc.ArgumentError, ValueError) as exc:
            raise InvalidURIError(f"malformed SQL store URL {url!r}: {exc}") from None
    if any("\x00" in str(v) for v in (parsed.database, parsed.host, parsed.username, parsed.password) if v):
        raise InvalidURIError("SQL store URL contains a NUL byte")
    drivername = _DEFAULT_DRIVERS.get(parsed.drivername, parsed.drivername)
    backend = drivername.split("+", 1)[0]
    if backend not in ("sqlite", "postgresql", "mysql", "mariadb"):
        raise InvalidURIError(f"unsupported SQL backend {backend!r} in {parsed!r}")
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:" or parsed.database.startswith("file::memory:"):
            raise InvalidURIError(
                "an in-memory SQLite database cannot coordinate commits; use sqlite:///path/to/file.db"
            )
    else:
        if not parsed.database:
            raise InvalidURIError(f"SQL store URL {parsed!r} names no database")
        try:
            _ = parsed.port  # a non-numeric port fails here on some versions
        except ValueError as exc:
            raise InvalidURIError(f"malformed port in SQL store URL: {exc}") from None
    return parsed.set(drivername=drivername)


def create_sql_engine(url: str | URL, **kwargs: object) -> Engine:
    """``sqlalchemy.create_engine`` with driver defaults, mapping an unknown or
    uninstalled driver to InvalidURIError."""
    parsed = parse_sql_url(url)
    try:
        return sa.create_engine(parsed, **kwargs)
    except sa_exc.NoSuchModuleError as exc:
        raise InvalidURIError(f"unknown SQL driver in {parsed!r}: {exc}") from None
    except ImportError as exc:
        raise InvalidURIError(
            f"the driver for {parsed.drivername!r} is not installed ({exc}); "
            "install tessera[postgres] or tessera[mysql]"
        ) from None
    except (sa_exc.ArgumentError, TypeError, ValueError) as exc:
        raise InvalidURIError(f"bad SQL store URL or options for {parsed!r}: {exc}") from None


def migrations_dir() -> Path:
    """The folder holding ``env.py`` and ``versions/``."""
    candidates: list[Path] = []
    env = os.environ.get("TESSERA_MIGRATIONS_DIR")
    if env:
        candidates.append(Path(env))
    candidates.append(Path(__file__).resolve().parent.parent / "migrations")
    for path in candidates:
        if (path / "env.py").is_file() and (path / "versions").is_dir():
            return path
    raise StoreSchemaError(
        "Tessera's Alembic migrations were not found (looked in "
        + ", ".join(str(p) for p in candidates)
        + "); set TESSERA_MIGRATIONS_DIR to the repository's migrations/ folder"
    )


def alembic_config(url: str | URL | None = None):  # -> alembic.config.Config
    """An Alembic ``Config`` for Tessera's migrations (no ini file).  ``url``
    is only needed for Alembic's offline (``--sql``) mode."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("version_table", VERSION_TABLE)
    if url is not None:
        rendered = parse_sql_url(url).render_as_string(hide_password=False)
        cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    """The newest revision in ``migrations/versions``."""
    return _revisions(str(migrations_dir()))[0]


def known_revisions() -> set[str]:
    """Every revision id in ``migrations/versions``."""
    return set(_revisions(str(migrations_dir()))[1])


@functools.lru_cache(maxsize=8)
def _revisions(folder: str) -> tuple[str, frozenset[str]]:
    """(head, all revisions) of a migrations folder, read once per process."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    if head is None:  # pragma: no cover - the folder always has a revision
        raise StoreSchemaError(f"the migrations folder {folder} has no revisions")
    return head, frozenset(s.revision for s in script.walk_revisions())


def _engine(target: str | URL | Engine) -> tuple[Engine, bool]:
    if isinstance(target, Engine):
        return target, False
    return create_sql_engine(target, poolclass=sa.pool.NullPool), True


def current_revision(target: str | URL | Engine) -> str | None:
    """The revision recorded in the database's ``tessera_alembic_version``
    table, or None when Tessera's migrations never ran there."""
    from alembic.runtime.migration import MigrationContext

    engine, owned = _engine(target)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return ctx.get_current_revision()
    except sa_exc.OperationalError as exc:
        raise StoreUnavailableError(f"cannot read the schema revision of {engine.url!r}: {exc.orig}") from exc
    finally:
        if owned:
            engine.dispose()


def upgrade(target: str | URL | Engine, revision: str = "head") -> str | None:
    """Apply Tessera's migrations up to ``revision`` (default: the head) and
    return the database's revision afterwards.  Running it again is a no-op.

    Concurrent upgrades of one database are serialised by a lock: an advisory
    transaction lock on PostgreSQL, ``GET_LOCK`` on MySQL/MariaDB, a lock file
    beside a SQLite database."""
    from alembic import command

    engine, owned = _engine(target)
    cfg = alembic_config()
    try:
        with _migration_lock(engine) as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
            conn.commit()
        return current_revision(engine)
    except sa_exc.OperationalError as exc:
        if _is_connect_error(exc):
            raise StoreUnavailableError(f"cannot connect to {engine.url!r}: {exc.orig}") from exc
        raise
    finally:
        cfg.attributes.pop("connection", None)
        if owned:
            engine.dispose()


def downgrade(target: str | URL | Engine, revision: str) -> str | None:
    """Revert Tessera's migrations down to ``revision`` (``"base"`` removes
    every Tessera table); returns the revision afterwards."""
    from alembic import command

    engine, owned = _engine(target)
    cfg = alembic_config()
    try:
        with _migration_lock(engine) as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, revision)
            conn.commit()
        return current_revision(engine)
    finally:
        cfg.attributes.pop("connection", None)
        if owned:
            engine.dispose()


def read_store_id(target: str | URL | Engine) -> str | None:
    """The store id recorded in ``tessera_store_meta`` (written by migration
    0003 or on the store's first use), or None when the table or its row is
    not there yet.  Writes nothing; StoreUnavailableError when unreachable."""
    from .sql_schema import GET_META, META_TABLE_NAME, STORE_ID_NAME

    engine, owned = _engine(target)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table(META_TABLE_NAME):
                return None
            return conn.execute(GET_META, {"n": STORE_ID_NAME}).scalar()
    except sa_exc.OperationalError as exc:
        raise StoreUnavailableError(f"cannot read the store id of {engine.url!r}: {exc.orig}") from exc
    finally:
        if owned:
            engine.dispose()


_LOCK_NAME = "tessera_migrations"
_PG_LOCK_KEY = 0x7E55E4A0  # an arbitrary constant shared by every Tessera process


@contextlib.contextmanager
def _migration_lock(engine: Engine, timeout: float = 120.0) -> Iterator[sa.engine.Connection]:
    """A connection holding the database's migration lock (a session-level
    lock, so it also works on an autocommit engine)."""
    backend = engine.url.get_backend_name()
    lock_file = None
    if backend == "sqlite" and engine.url.database and fcntl is not None:
        try:
            lock_file = open(os.path.abspath(engine.url.database) + ".migrate-lock", "a+b")  # noqa: SIM115
        except OSError as exc:
            raise StoreUnavailableError(f"cannot open the SQLite database {engine.url.database!r}: {exc}") from exc
        fcntl.flock(lock_file, fcntl.LOCK_EX)
    try:
        with engine.connect() as conn:
            if backend == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
            elif backend in ("mysql", "mariadb"):
                got = conn.execute(sa.text("SELECT GET_LOCK(:n, :t)"), {"n": _LOCK_NAME, "t": int(timeout)}).scalar()
                if got != 1:
                    raise StoreUnavailableError(f"another process holds the migration lock on {engine.url!r}")
            try:
                yield conn
            finally:
                if backend in ("postgresql", "mysql", "mariadb"):
                    try:
                        conn.rollback()  # a failed migration leaves an aborted transaction behind
                        if backend == "postgresql":
                            conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
                        else:
                            conn.execute(sa.text("SELECT RELEASE_LOCK(:n)"), {"n": _LOCK_NAME})
                        conn.commit()
                    except sa_exc.DBAPIError as exc:  # the lock dies with the session anyway
                        log.warning("releasing the migration lock on %r failed: %s", engine.url, exc.orig)
                        conn.invalidate()
    finally:
        if lock_file is not None:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
            lock_file.close()


def _is_connect_error(exc: sa_exc.DBAPIError) -> bool:
    text = str(exc.orig).lower()
    return any(
        s in text
        for s in (
            "connection refused",
            "could not connect",
            "can't connect",
            "connection failed",
            "unable to open database",
        )
    )
