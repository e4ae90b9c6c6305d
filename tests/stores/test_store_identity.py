"""Store identity (``store_id``) and typed schema checks, on every store.

Each test gets a store of its own: a SQLite file, a fresh PostgreSQL or
MariaDB database (dropped afterwards), a private ``redis-server`` started by
the test (no persistence: killing it loses everything, like a Redis that lost
its data), or a fresh DynamoDB table on moto.  Every store is reached through
two addresses (a symlinked folder for SQLite, ``localhost`` and ``127.0.0.1``
for the servers), which must give the same id; an empty store at the same
address must give a new one.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import time
import traceback
import uuid

import pytest
import sqlalchemy as sa
from tessera_test_store_fixtures import load_deploy_module, scratch_sql_url, serialize_moto_dynamodb  # noqa: F401

from tessera.stores import sql_migrate, sql_store
from tessera.stores.dynamodb_table import ensure_table, make_client
from tessera.stores.errors import StoreSchemaError
from tessera.stores.manifest_store import VersionRecord
from tessera.stores.registry import open_manifest_store
from tessera.stores.sql_schema import META_TABLE_NAME, TABLE_NAME
from tessera.stores.uri import normalize_table_uri

KINDS = ["sqlite", "postgresql", "mysql", "redis", "dynamodb"]
PROCESSES = 4


# ------------------------------------------------------------------ fresh stores
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRedis:
    """A ``redis-server`` of this test's own, without persistence."""

    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            pytest.fail("redis-server is not on PATH")
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        pytest.fail(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None


class Fresh:
    """A store nobody else uses, its two addresses, and a way to replace it by
    an empty one answering at the same addresses."""

    def __init__(self, kind: str, request, tmp_path) -> None:
        self.kind = kind
        self._cleanups: list = []
        if kind == "sqlite":
            real = tmp_path / "real"
            real.mkdir()
            (tmp_path / "link").symlink_to(real, target_is_directory=True)
            self.path = real / "m.db"
            self.url = f"sqlite:///{self.path}"
            self.alt_url = f"sqlite:///{tmp_path / 'link' / 'm.db'}"
        elif kind in ("postgresql", "mysql"):
            base = sa.engine.make_url(request.getfixturevalue("postgres_url" if kind == "postgresql" else "mysql_url"))
            self.db = f"tessera_id_{uuid.uuid4().hex[:10]}"
            self.admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
            self.url = base.set(host="127.0.0.1", database=self.db).render_as_string(hide_password=False)
            self.alt_url = base.set(host="localhost", database=self.db).render_as_string(hide_password=False)
            self._create_database()
            self._cleanups.append(self._drop_database)
            self._cleanups.append(self.admin.dispose)
        elif kind == "redis":
            self.redis = PrivateRedis()
            self._cleanups.append(self.redis.stop)
            self.url = f"redis://127.0.0.1:{self.redis.port}/0"
            self.alt_url = f"redis://localhost:{self.redis.port}/0"
        else:
            serialize_moto_dynamodb()
            self.moto = request.getfixturevalue("moto_server")
            self.table = f"tessera-id-{uuid.uuid4().hex[:10]}"
            self.url = f"dynamodb:///{self.table}?region=us-east-1&endpoint_url=http://127.0.0.1:{self.moto.port}"
            self.alt_url = f"dynamodb:///{self.table}?region=us-east-1&endpoint_url=http://localhost:{self.moto.port}"
            self._create_dynamodb_table()
            self._cleanups.append(lambda: self.moto.client("dynamodb").delete_table(TableName=self.table))
        if kind in ("postgresql", "mysql"):
            sql_migrate.upgrade(self.url)

    # -- opening
    def open(self, alt: bool = False, *, create: bool | None = None):
        """Open the store (SQLite runs the migrations unless ``create=False``;
        the server databases were migrated by the fixture)."""
        options = {"create": False} if self.kind in ("postgresql", "mysql") else {}
        if create is not None and self.kind == "sqlite":
            options["create"] = create
        return open_manifest_store(self.alt_url if alt else self.url, **options)

    def prepare_without_id(self) -> None:
        """The schema, but no store id yet (a store older than the id, or one
        whose schema came from an offline script)."""
        if self.kind == "sqlite":
            sql_migrate.upgrade(self.url)
        if self.kind in ("sqlite", "postgresql", "mysql"):
            eng = sa.create_engine(self.url)
            with eng.begin() as c:
                c.execute(sa.text(f"DELETE FROM {META_TABLE_NAME}"))
            eng.dispose()

    def recreate(self) -> None:
        """Replace the store by an empty one at the same addresses."""
        if self.kind == "sqlite":
            for suffix in ("", "-wal", "-shm", ".migrate-lock"):
                if os.path.exists(f"{self.path}{suffix}"):
                    os.unlink(f"{self.path}{suffix}")
        elif self.kind in ("postgresql", "mysql"):
            self._drop_database()
            self._create_database()
            sql_migrate.upgrade(self.url)
        elif self.kind == "redis":
            self.redis.stop()
            self.redis.start()
        else:
            self.moto.client("dynamodb").delete_table(TableName=self.table)
            self._create_dynamodb_table()

    def cleanup(self) -> None:
        for fn in reversed(self._cleanups):
            fn()

    # -- internals
    def _create_database(self) -> None:
        with self.admin.connect() as c:
            c.execute(sa.text(f"CREATE DATABASE {self.db}"))

    def _drop_database(self) -> None:
        with self.admin.connect() as c:
            force = " WITH (FORCE)" if self.kind == "postgresql" else ""
            c.execute(sa.text(f"DROP DATABASE IF EXISTS {self.db}{force}"))

    def _create_dynamodb_table(self) -> None:
        client = make_client("us-east-1", self.moto.endpoint)
        try:
            ensure_table(client, self.table)  # the table only: no store item yet
        finally:
            client.close()


@pytest.fixture(params=KINDS)
def fresh(request, tmp_path):
    f = Fresh(request.param, request, tmp_path)
    yield f
    f.cleanup()


def _is_id(value: object) -> bool:
    return isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)


# ------------------------------------------------------------------ store_id
def test_store_id_is_stable_and_the_same_through_a_second_address(fresh):
    store = fresh.open()
    try:
        first = store.store_id()
        assert _is_id(first)
        assert store.store_id() == first
        # the per-table methods never see or remove the identity record
        key = normalize_table_uri(f"s3://id-{uuid.uuid4().hex[:8]}/t")
        record = VersionRecord(key, 1, "_versions/1.manifest-x", 10, "txn", "inc")
        store.reserve(record)
        assert store.versions_after(key, -1) == [record]
        assert store.latest(key) == record
        assert store.delete_table(key) == 1
        assert store.latest(key) is None
    finally:
        store.close()
    again = fresh.open()
    other = fresh.open(alt=True)
    try:
        assert other.identity() != again.identity()  # really a second address
        assert again.store_id() == first
        assert other.store_id() == first
    finally:
        again.close()
        other.close()


def test_an_empty_store_at_the_same_address_has_a_new_id(fresh):
    store = fresh.open()
    first = store.store_id()
    store.close()
    fresh.recreate()
    store = fresh.open()
    try:
        second = store.store_id()
    finally:
        store.close()
    assert _is_id(second) and second != first
    store = fresh.open(alt=True)
    try:
        assert store.store_id() == second
    finally:
        store.close()


def _first_use(fresh: Fresh, alt: bool, barrier, queue) -> None:
    try:
        store = fresh.open(alt=alt, create=False)  # the schema is there: only the id is raced for
        try:
            barrier.wait()
            queue.put(store.store_id())
        finally:
            store.close()
    except Exception:  # noqa: BLE001 - reported by the test
        barrier.abort()
        queue.put("error: " + traceback.format_exc())


def test_concurrent_first_use_converges_on_one_id(fresh):
    fresh.prepare_without_id()
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(PROCESSES, timeout=60)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_first_use, args=(fresh, i % 2 == 1, barrier, queue)) for i in range(PROCESSES)]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=90) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
    errors = [r for r in results if r.startswith("error")]
    assert not errors, errors[0]
    assert len(set(results)) == 1, results
    store = fresh.open()
    try:
        assert store.store_id() == results[0]
    finally:
        store.close()


def test_sql_store_without_the_id_row_creates_it_once(tmp_path):
    url = f"sqlite:///{tmp_path}/m.db"
    sql_migrate.upgrade(url)
    made_by_migration = sql_migrate.read_store_id(url)
    assert _is_id(made_by_migration)
    assert sql_migrate.upgrade(url) == sql_migrate.head_revision()
    assert sql_migrate.read_store_id(url) == made_by_migration  # a second upgrade keeps it
    assert sql_store.ensure_store_id(url) == made_by_migration


# ------------------------------------------------------------------ typed schema checks (SQL)
_COLUMNS = [
    ("table_hash", "{s}(64) NOT NULL"),
    ("version", "{version}"),
    ("table_key", "{s}(2048) NOT NULL"),
    ("path", "{s}(2048) {path_null}"),
    ("size", "BIGINT NOT NULL"),
    ("transaction_uuid", "{s}(64) NOT NULL"),
    ("incarnation", "{s}(64) NOT NULL"),
    ("created_at", "{ts} NOT NULL DEFAULT CURRENT_TIMESTAMP"),
]


def _create_by_hand(url: str, *, version: str = "BIGINT NOT NULL", path_null: str = "NOT NULL") -> None:
    """tessera_manifest_versions with Tessera's column names and primary key,
    written by hand (not by the migrations)."""
    eng = sa.create_engine(url)
    mysql = eng.dialect.name in ("mysql", "mariadb")
    fmt = {
        "s": "VARBINARY" if mysql else "VARCHAR",
        "ts": "DATETIME" if mysql else "TIMESTAMP",
        "version": version,
        "path_null": path_null,
    }
    cols = ", ".join(f"{name} {decl.format(**fmt)}" for name, decl in _COLUMNS)
    with eng.begin() as c:
        c.execute(sa.text(f"CREATE TABLE {TABLE_NAME} ({cols}, PRIMARY KEY (table_hash, version))"))
    eng.dispose()


def _tables(url: str) -> set[str]:
    eng = sa.create_engine(url)
    try:
        return set(sa.inspect(eng).get_table_names())
    finally:
        eng.dispose()


def test_hand_made_table_with_right_types_fails_only_on_the_revision(scratch_sql_url):
    """The control for the two tests below: the same DDL with Tessera's types
    passes the column check (and is refused for having no migration record)."""
    _create_by_hand(scratch_sql_url)
    with pytest.raises(StoreSchemaError, match="records no Tessera migration"):
        open_manifest_store(scratch_sql_url, create=False)


def test_text_version_column_is_refused(scratch_sql_url):
    text = "VARCHAR(20) NOT NULL" if "mysql" in scratch_sql_url else "TEXT NOT NULL"
    _create_by_hand(scratch_sql_url, version=text)
    with pytest.raises(StoreSchemaError) as err:
        open_manifest_store(scratch_sql_url, create=False)
    msg = str(err.value)
    assert "'version' is " + text.split(" ")[0] in msg and "BIGINT" in msg
    assert "rename or drop" in msg
    # the upgrade path refuses it too, before writing anything
    with pytest.raises(StoreSchemaError, match="'version'"):
        open_manifest_store(scratch_sql_url, create=True)
    assert sql_migrate.VERSION_TABLE not in _tables(scratch_sql_url)


def test_nullable_column_is_refused(scratch_sql_url):
    _create_by_hand(scratch_sql_url, path_null="NULL")
    with pytest.raises(StoreSchemaError, match="'path' allows NULL, expected NOT NULL"):
        open_manifest_store(scratch_sql_url, create=False)


def test_missing_meta_table_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path}/m.db"
    open_manifest_store(url).close()
    eng = sa.create_engine(url)
    with eng.begin() as c:
        c.execute(sa.text(f"DROP TABLE {META_TABLE_NAME}"))
    eng.dispose()
    with pytest.raises(StoreSchemaError, match=f"{META_TABLE_NAME}.*missing"):
        open_manifest_store(url, create=False)


def test_short_string_column_is_refused_where_lengths_matter(postgres_url):
    from tessera_test_services import fresh_database

    url, drop = fresh_database(postgres_url)
    try:
        sql_migrate.upgrade(url)
        eng = sa.create_engine(url)
        with eng.begin() as c:
            c.execute(sa.text(f"ALTER TABLE {TABLE_NAME} ALTER COLUMN incarnation TYPE VARCHAR(16)"))
        eng.dispose()
        with pytest.raises(StoreSchemaError, match=r"'incarnation' is VARCHAR\(16\), expected VARCHAR\(64\)"):
            open_manifest_store(url, create=False)
    finally:
        drop()


# ------------------------------------------------------------------ typed schema checks (DynamoDB, Redis)
def test_dynamodb_string_version_key_is_refused(moto_server):
    serialize_moto_dynamodb()
    name = f"tessera-badkey-{uuid.uuid4().hex[:8]}"
    client = moto_server.client("dynamodb")
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "table_key", "KeyType": "HASH"}, {"AttributeName": "version", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "table_key", "AttributeType": "S"},
            {"AttributeName": "version", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    url = f"dynamodb:///{name}?region=us-east-1&endpoint_url={moto_server.endpoint}"
    try:
        with pytest.raises(StoreSchemaError, match=r"'version' is S \(string\), expected N \(number\)"):
            open_manifest_store(url)
        with pytest.raises(StoreSchemaError, match="'version' is S"):
            open_manifest_store(url, create=True)
    finally:
        client.delete_table(TableName=name)


def test_dynamodb_foreign_store_item_is_refused(moto_server):
    serialize_moto_dynamodb()
    name = f"tessera-layout-{uuid.uuid4().hex[:8]}"
    url = f"dynamodb:///{name}?region=us-east-1&endpoint_url={moto_server.endpoint}"
    client = moto_server.client("dynamodb")
    store = open_manifest_store(url, create=True)
    try:
        client.put_item(
            TableName=name,
            Item={
                "table_key": {"S": "tessera#store"},
                "version": {"N": "0"},
                "store_id": {"S": "x" * 32},
                "layout": {"N": "7"},
            },
        )
        with pytest.raises(StoreSchemaError, match="layout '7'.*upgrade Tessera"):
            store.check()
        with pytest.raises(StoreSchemaError, match="layout '7'"):
            store.store_id()
    finally:
        store.close()
        client.delete_table(TableName=name)


@pytest.fixture
def redis_prefix(redis_url):
    import redis as redis_py

    prefix = f"tessera-id-{uuid.uuid4().hex[:10]}"
    yield prefix
    client = redis_py.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


def test_redis_foreign_layout_is_refused(redis_url, redis_prefix):
    import redis as redis_py

    client = redis_py.Redis.from_url(redis_url)
    url = f"{redis_url}?prefix={redis_prefix}"
    store = open_manifest_store(url)  # nothing recorded yet: fine
    try:
        assert _is_id(store.store_id())
        client.hset(f"{redis_prefix}:store", "layout", "0")
        with pytest.raises(StoreSchemaError, match="layout '0'.*own prefix"):
            open_manifest_store(url)
        client.hset(f"{redis_prefix}:store", "layout", "2")
        with pytest.raises(StoreSchemaError, match="layout '2'.*upgrade Tessera"):
            store.check()
        client.delete(f"{redis_prefix}:store")
        client.set(f"{redis_prefix}:store", "someone else's")
        with pytest.raises(StoreSchemaError, match="is a string"):
            open_manifest_store(url)
    finally:
        store.close()
        client.close()


# ------------------------------------------------------------------ provisioning and the CLI
def test_provision_dynamodb_creates_the_store_id_once(moto_server):
    serialize_moto_dynamodb()
    mod = load_deploy_module("provision_dynamodb")
    name = f"tessera-prov-id-{uuid.uuid4().hex[:8]}"
    try:
        first = mod.create_table(name, "us-east-1", moto_server.endpoint)
        assert _is_id(first["store_id"])
        assert mod.create_table(name, "us-east-1", moto_server.endpoint)["store_id"] == first["store_id"]
        store = open_manifest_store(first["store_url"])
        assert store.store_id() == first["store_id"]
        store.close()
    finally:
        moto_server.client("dynamodb").delete_table(TableName=name)


def test_cli_store_check_reports_the_id_and_creates_nothing(tmp_path):
    from click.testing import CliRunner

    from tessera.catalog.cli import main

    db = tmp_path / "m.db"
    res = CliRunner().invoke(main, ["store", "check", f"sqlite:///{db}"])
    assert res.exit_code == 2 and "nothing is there" in res.output
    assert list(tmp_path.iterdir()) == []
    store = open_manifest_store(f"sqlite:///{db}")
    sid = store.store_id()
    store.close()
    res = CliRunner().invoke(main, ["store", "check", f"sqlite:///{db}"])
    assert res.exit_code == 0, res.output
    assert f"store id: {sid}" in res.output and "schema: ok" in res.output
    eng = sa.create_engine(f"sqlite:///{db}")
    with eng.begin() as c:
        c.execute(sa.text(f"DROP TABLE {META_TABLE_NAME}"))
    eng.dispose()
    res = CliRunner().invoke(main, ["store", "check", f"sqlite:///{db}"])
    assert res.exit_code == 2 and META_TABLE_NAME in res.output
    assert META_TABLE_NAME not in _tables(f"sqlite:///{db}")  # the check did not recreate it
