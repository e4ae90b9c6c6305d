"""PostgreSQL's flip commits without waiting for its WAL flush, for its own
transaction only: the pooled session keeps ``synchronous_commit`` on, so the
reservation (which decides the version) stays durable before it is answered."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from tessera.stores.manifest_store import VersionRecord, open_manifest_store
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
