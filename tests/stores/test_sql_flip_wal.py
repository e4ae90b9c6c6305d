"""PostgreSQL's flip commits without waiting for its WAL flush, for its own
transaction only: the pooled session keeps ``synchronous_commit`` on, so the
reservation (which decides the version) stays durable before it is answered."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from tessera.stores.manifest_store import VersionRecord
from tessera.stores.registry import open_manifest_store
from tessera.stores.sql_schema import FLIP_ASYNC_WAL, table_hash


def test_the_flip_sets_synchronous_commit_off_for_its_own_transaction_only(postgres_url):
    key = f"file:///tessera-flip-wal/{uuid.uuid4().hex}/t"
    store = open_manifest_store(postgres_url)
    engine = sa.create_engine(postgres_url)
    try:
        staged = f"_versions/{'9' * 20}.manifest-{uuid.uuid4()}"
        store.reserve(VersionRecord(key, 1, staged, 10, uuid.uuid4().hex, uuid.uuid4().hex))
        params = {"h": table_hash(key), "v": 1, "staged": staged, "final": staged.split("-", 1)[0]}
        with engine.connect() as c:
            with c.begin() as txn:
                assert c.execute(FLIP_ASYNC_WAL, params).rowcount == 1
                assert c.execute(sa.text("SHOW synchronous_commit")).scalar() == "off"
                txn.rollback()  # leave the row staged for the store's own flip
            assert c.execute(sa.text("SHOW synchronous_commit")).scalar() == "on"
        assert store.flip(key, 1, staged, params["final"]) is True
        assert store.get(key, 1).is_final
        with engine.connect() as c:  # no session of the pool was left asynchronous
            assert c.execute(sa.text("SHOW synchronous_commit")).scalar() == "on"
    finally:
        store.delete_table(key)
        store.close()
        engine.dispose()


def test_sqlite_flips_unsynced_and_pools_only_synced_connections(tmp_path, monkeypatch):
    """SQLite's flip commits with ``synchronous=NORMAL`` (no WAL fsync); every
    connection back in the pool is ``FULL`` again, so a reservation is synced
    (outside a ``durability("none")`` block)."""
    from tessera.stores import sql_store

    store = open_manifest_store(f"sqlite:///{tmp_path}/m.db")
    key = f"file://{tmp_path}/t"
    levels: list[int] = []
    real = sql_store._run

    def spy(conn, stmt, params):
        levels.append(conn.exec_driver_sql("PRAGMA synchronous").scalar())
        return real(conn, stmt, params)

    monkeypatch.setattr(sql_store, "_run", spy)
    try:
        for v in (1, 2, 3):
            staged = f"_versions/{20 - v:020d}.manifest-{uuid.uuid4()}"
            store.reserve(VersionRecord(key, v, staged, 10, uuid.uuid4().hex, "inc"))
            assert store.flip(key, v, staged, staged.split("-", 1)[0]) is True
        assert levels == [2, 1] * 3  # FULL during each reservation, NORMAL during each flip
        assert [r.is_final for r in store.versions_after(key, 0)] == [True, True, True]
        # pooled connections are FULL (2) again
        assert store._read(lambda c: c.exec_driver_sql("PRAGMA synchronous").scalar()) == 2
    finally:
        store.delete_table(key)
        store.close()
