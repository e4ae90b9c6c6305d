"""Alembic environment for Tessera's SQL tables.

Run programmatically through ``stores.sql_migrate`` (which passes an open
connection in ``config.attributes["connection"]``), or by Alembic's command line with ``migrations/alembic.ini``.
Alembic's bookkeeping lives in ``tessera_alembic_version``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

config = context.config
VERSION_TABLE = config.get_main_option("version_table") or "tessera_alembic_version"


def _target_metadata() -> list[sa.MetaData] | None:
    """The models, for ``alembic revision --autogenerate`` only: upgrades never
    import them (and so never import the catalog package)."""
    if not getattr(config.cmd_opts, "autogenerate", False):
        return None
    found: list[sa.MetaData] = []
    for module, base in (("tessera.stores.sql_schema", "Base"), ("tessera.catalog.models", "CatalogBase")):
        try:
            found.append(getattr(__import__(module, fromlist=[base]), base).metadata)
        except (ImportError, AttributeError):  # pragma: no cover - not importable here
            pass
    return found


def _configure(connection: sa.engine.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=_target_metadata(),
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    """The database: ``sqlalchemy.url``, ``-x url=...`` or ``TESSERA_DATABASE_URL``."""
    import os

    url = (
        config.get_main_option("sqlalchemy.url")
        or context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("TESSERA_DATABASE_URL")
    )
    if not url:
        raise SystemExit("no database: pass -x url=<SQLAlchemy URL> or set TESSERA_DATABASE_URL")
    return url


def run_migrations_offline() -> None:
    """Emit the SQL instead of running it (``alembic upgrade --sql``)."""
    context.configure(
        url=_url(),
        target_metadata=_target_metadata(),
        version_table=VERSION_TABLE,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run against the connection handed over by stores.sql_migrate, or a
    fresh engine built from ``sqlalchemy.url``."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    engine = sa.create_engine(_url(), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            _configure(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
