"""Alembic migrations of the SQL manifest store, on SQLite, PostgreSQL and
MariaDB (a fresh database each)."""

from __future__ import annotations

import multiprocessing as mp
import os
import uuid

import pytest
import sqlalchemy as sa
from tessera_test_store_fixtures import REPO, scratch_sql_url  # noqa: F401

from tessera.stores import sql_migrate
from tessera.stores.manifest_store import VersionRecord
from tessera.stores.registry import open_manifest_store
from tessera.stores.sql_schema import META_TABLE_NAME, TABLE_NAME, Base
from tessera.stores.uri import normalize_table_uri


def _tables(url: str) -> set[str]:
    eng = sa.create_engine(url)
    try:
        return set(sa.inspect(eng).get_table_names())
    finally:
        eng.dispose()


def test_migrations_folder_is_found_without_an_ini_file():
    assert sql_migrate.migrations_dir() == REPO / "migrations"
    cfg = sql_migrate.alembic_config()
    assert cfg.config_file_name is None
    assert cfg.get_main_option("version_table") == "tessera_alembic_version"
    assert "0001_manifest_versions" in sql_migrate.known_revisions()
    assert sql_migrate.head_revision() in sql_migrate.known_revisions()


def test_migrations_folder_override(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_MIGRATIONS_DIR", str(REPO / "migrations"))
    assert sql_migrate.migrations_dir() == REPO / "migrations"
    monkeypatch.setenv("TESSERA_MIGRATIONS_DIR", str(tmp_path))  # not a migrations folder: falls back
    assert sql_migrate.migrations_dir() == REPO / "migrations"


def test_upgrade_twice_is_a_noop(scratch_sql_url):
    assert sql_migrate.current_revision(scratch_sql_url) is None
    assert sql_migrate.upgrade(scratch_sql_url) == sql_migrate.head_revision()
    assert sql_migrate.current_revision(scratch_sql_url) == sql_migrate.head_revision()
    assert {"tessera_alembic_version", TABLE_NAME} <= _tables(scratch_sql_url)
    assert "alembic_version" not in _tables(scratch_sql_url)  # other applications' table is untouched
    store = open_manifest_store(scratch_sql_url, create=False)
    key = normalize_table_uri(f"s3://mig-{uuid.uuid4().hex[:8]}/t")
    record = VersionRecord(key, 1, "_versions/a.manifest-x", 1, "txn", "inc")
    store.reserve(record)
    assert sql_migrate.upgrade(scratch_sql_url) == sql_migrate.head_revision()
    assert store.get(key, 1) == record  # data survives a second upgrade
    store.close()


def test_downgrade_to_base_then_upgrade(scratch_sql_url):
    sql_migrate.upgrade(scratch_sql_url)
    assert sql_migrate.downgrade(scratch_sql_url, "base") is None
    assert TABLE_NAME not in _tables(scratch_sql_url)
    assert sql_migrate.upgrade(scratch_sql_url) == sql_migrate.head_revision()
    open_manifest_store(scratch_sql_url, create=False).close()


def test_the_upgrade_creates_the_store_id_and_a_downgrade_forgets_it(scratch_sql_url):
    sql_migrate.upgrade(scratch_sql_url)
    first = sql_migrate.read_store_id(scratch_sql_url)
    assert first and len(first) == 32
    assert sql_migrate.upgrade(scratch_sql_url) == sql_migrate.head_revision()
    assert sql_migrate.read_store_id(scratch_sql_url) == first
    store = open_manifest_store(scratch_sql_url, create=False)
    key = normalize_table_uri(f"s3://mig-{uuid.uuid4().hex[:8]}/t")
    record = VersionRecord(key, 1, "_versions/a.manifest-x", 1, "txn", "inc")
    store.reserve(record)
    assert store.store_id() == first
    store.close()
    assert sql_migrate.downgrade(scratch_sql_url, "0002_catalog") == "0002_catalog"
    assert META_TABLE_NAME not in _tables(scratch_sql_url)
    assert sql_migrate.read_store_id(scratch_sql_url) is None
    sql_migrate.upgrade(scratch_sql_url)
    second = sql_migrate.read_store_id(scratch_sql_url)
    assert second and second != first  # documented: a downgrade below 0003 forgets the id
    store = open_manifest_store(scratch_sql_url, create=False)
    assert store.get(key, 1) == record
    store.close()


def test_offline_scripts_carry_no_store_id():
    """One --sql script applied to several databases must not give them one id."""
    import io

    from alembic import command

    cfg = sql_migrate.alembic_config("sqlite:///offline.db")
    cfg.output_buffer = io.StringIO()
    command.upgrade(cfg, "head", sql=True)
    script = cfg.output_buffer.getvalue()
    assert f"CREATE TABLE {META_TABLE_NAME}" in script
    assert f"INSERT INTO {META_TABLE_NAME}" not in script


def test_model_matches_the_migration(scratch_sql_url):
    """The typed mappings in stores/sql_schema.py and migrations 0001 and
    0003 agree (Alembic autogenerate finds nothing to do)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    sql_migrate.upgrade(scratch_sql_url)
    eng = sa.create_engine(scratch_sql_url)
    try:
        with eng.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"compare_type": True, "version_table": sql_migrate.VERSION_TABLE}
            )
            diffs = compare_metadata(ctx, Base.metadata)
    finally:
        eng.dispose()
    ours = [d for d in diffs if TABLE_NAME in repr(d) or META_TABLE_NAME in repr(d)]
    assert ours == []


def _upgrade_in_child(url, queue):
    try:
        queue.put(sql_migrate.upgrade(url))
    except Exception as exc:  # noqa: BLE001
        queue.put(repr(exc))


def test_concurrent_upgrades_of_a_fresh_database(scratch_sql_url):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_upgrade_in_child, args=(scratch_sql_url, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert results == [sql_migrate.head_revision()] * 4


def test_current_revision_of_an_unreachable_database():
    from tessera.stores.errors import StoreUnavailableError

    with pytest.raises(StoreUnavailableError):
        sql_migrate.current_revision("postgresql+psycopg://postgres@127.0.0.1:1/test")
    with pytest.raises(StoreUnavailableError):
        sql_migrate.upgrade("postgresql+psycopg://postgres@127.0.0.1:1/test")


def test_alembic_command_line_upgrades_from_the_repository(tmp_path):
    """`alembic -c migrations/alembic.ini -x url=... upgrade head` works as documented."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    url = f"sqlite:///{tmp_path}/al.db"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "alembic",
            "-c",
            os.path.join(root, "migrations", "alembic.ini"),
            "-x",
            f"url={url}",
            "upgrade",
            "head",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    from tessera.stores.registry import open_manifest_store

    store = open_manifest_store(url, create=False)  # check()s the schema: at head, with a store id
    assert store.store_id()
    store.close()
    missing = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", os.path.join(root, "migrations", "alembic.ini"), "upgrade", "head"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "TESSERA_DATABASE_URL"},
    )
    assert missing.returncode != 0 and "no database" in missing.stderr
