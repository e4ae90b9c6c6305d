"""Bad inputs to the manifest stores: malformed URLs, foreign or missing
schemas (SQL, DynamoDB), unreachable servers, and Redis durability options."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
import sqlalchemy as sa
from tessera_test_store_fixtures import (  # noqa: F401
    dynamodb_table,
    dynamodb_url,
    scratch_sql_url,
    serialize_moto_dynamodb,
)

from tessera.stores import sql_migrate
from tessera.stores.errors import (
    AmbiguousStoreError,
    InvalidURIError,
    StoreSchemaError,
    StoreUnavailableError,
    VersionExistsError,
)
from tessera.stores.manifest_store import VersionRecord
from tessera.stores.registry import open_manifest_store
from tessera.stores.uri import normalize_table_uri


def rec(key: str, version: int = 1, inc: str = "inc") -> VersionRecord:
    return VersionRecord(key, version, f"_versions/{version:020d}.manifest-{uuid.uuid4()}", 1, uuid.uuid4().hex, inc)


def new_key() -> str:
    return normalize_table_uri(f"s3://bad-{uuid.uuid4().hex[:12]}/t")


# ----------------------------------------------------------------------------- URLs
MALFORMED = [
    "",
    "no-scheme-at-all",
    "ftp://host/path",
    "oracle://scott@host/db",
    "redis://127.0.0.1:notaport/0",
    "redis://:6379/0",
    "redis://127.0.0.1:6379/notadb",
    "redis://127.0.0.1:6379/0?wait_replicas=many",
    "redis://127.0.0.1:6379/0?prefix={bad}",
    "redis://[::1/0",
    "dynamodb://",
    "dynamodb:///",
    "dynamodb:///ab",
    "dynamodb:///bad name!",
    "dynamodb:///a/b/c",
    "dynamodb://host/table",
    "dynamodb:///table?bogus=1",
    "dynamodb:///table?aws_secret_access_key=x",
    "dynamodb:///table?region=us-east-1&region=eu-west-1",
    "dynamodb:///table?region=us-east-1&endpoint_url=ftp://x",
    "dynamodb:///table?region=us-east-1&endpoint_url=http://h:99999999",
    "sqlite://",
    "sqlite:///:memory:",
    "postgresql://postgres@127.0.0.1:notaport/test",
    "postgresql://postgres@127.0.0.1:5432",
    "mysql+nosuchdriver://root@127.0.0.1/test",
    "mysql://root@127.0.0.1:3306/",
]


@pytest.mark.parametrize("url", MALFORMED)
def test_malformed_store_urls_raise_invalid_uri(url):
    t0 = time.monotonic()
    with pytest.raises(InvalidURIError):
        open_manifest_store(url, check=False) if url.startswith(("redis", "dynamodb")) else open_manifest_store(url)
    assert time.monotonic() - t0 < 5


def test_non_string_url():
    with pytest.raises(InvalidURIError):
        open_manifest_store(None)  # type: ignore[arg-type]


# ------------------------------------------------------------------------ DynamoDB
def _make_table(client, name: str, keys: list[tuple[str, str, str]]) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": n, "KeyType": k} for n, _, k in keys],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t, _ in keys],
        BillingMode="PAY_PER_REQUEST",
    )


@pytest.mark.parametrize(
    "keys, mentions",
    [
        ([("base_uri", "S", "HASH"), ("version", "N", "RANGE")], ["base_uri", "Lance"]),  # Lance's own table
        ([("table_key", "S", "HASH")], ["HASH key 'table_key'"]),
        ([("table_key", "S", "HASH"), ("version", "S", "RANGE")], ["'version' (S)"]),
        ([("version", "N", "HASH"), ("table_key", "S", "RANGE")], ["HASH key 'version'"]),
    ],
)
def test_dynamodb_table_with_wrong_keys_is_refused_at_open(moto_server, keys, mentions):
    serialize_moto_dynamodb()
    client = moto_server.client("dynamodb")
    name = f"wrong-keys-{uuid.uuid4().hex[:8]}"
    _make_table(client, name, keys)
    try:
        for create in (False, True):
            with pytest.raises(StoreSchemaError) as err:
                open_manifest_store(dynamodb_url(moto_server, name), create=create)
            for m in mentions:
                assert m in str(err.value)
        assert client.scan(TableName=name, Select="COUNT")["Count"] == 0  # nothing written
        desc = client.describe_table(TableName=name)["Table"]
        assert [k["AttributeName"] for k in desc["KeySchema"]] == [n for n, _, _ in keys]  # left alone
    finally:
        client.delete_table(TableName=name)


def test_dynamodb_missing_table(moto_server):
    serialize_moto_dynamodb()
    name = f"missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(StoreSchemaError, match="provision_dynamodb"):
        open_manifest_store(dynamodb_url(moto_server, name))
    s = open_manifest_store(dynamodb_url(moto_server, name), check=False)
    with pytest.raises(StoreSchemaError):
        s.reserve(rec(new_key()))
    s.close()
    created = open_manifest_store(dynamodb_url(moto_server, name), create=True)  # creates it
    try:
        key = new_key()
        created.reserve(rec(key))
        assert created.latest(key).version == 1
    finally:
        created.close()
        moto_server.client("dynamodb").delete_table(TableName=name)


def test_dynamodb_unreachable_endpoint_is_unavailable():
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        open_manifest_store("dynamodb:///tessera-manifests?region=us-east-1&endpoint_url=http://127.0.0.1:1")
    s = open_manifest_store(
        "dynamodb:///tessera-manifests?region=us-east-1&endpoint_url=http://127.0.0.1:1", check=False
    )
    with pytest.raises(StoreUnavailableError):  # never sent: not ambiguous
        s.reserve(rec(new_key()))
    s.close()
    assert time.monotonic() - t0 < 10


def test_dynamodb_credentials_are_not_taken_from_the_url(moto_server, dynamodb_table):
    with pytest.raises(InvalidURIError, match="credentials"):
        open_manifest_store(dynamodb_url(moto_server, dynamodb_table) + "&aws_access_key_id=AKIA")


# --------------------------------------------------------------------------- Redis
def test_unreachable_redis_is_unavailable_quickly():
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        open_manifest_store("redis://127.0.0.1:1/0")
    s = open_manifest_store("redis://127.0.0.1:1/0", check=False)
    with pytest.raises(StoreUnavailableError):  # the connection never opened: not ambiguous
        s.reserve(rec(new_key()))
    with pytest.raises(StoreUnavailableError):
        s.latest(new_key())
    s.close()
    assert time.monotonic() - t0 < 3


def test_redis_refused_credentials_are_unavailable(redis_url):
    with pytest.raises(StoreUnavailableError):
        open_manifest_store(redis_url.replace("redis://", "redis://nobody:wrong@"))


def test_redis_wait_replicas_without_replicas_is_ambiguous(redis_url):
    store = open_manifest_store(redis_url, wait_replicas=1, wait_timeout_ms=50)
    plain = open_manifest_store(redis_url)
    key = new_key()
    try:
        assert any("wait_replicas=1 but only 0" in p for p in store.durability_problems())
        r = rec(key)
        with pytest.raises(AmbiguousStoreError, match="0 of 1 replicas"):
            store.reserve(r)
        assert plain.get(key, 1) == r  # applied on the primary, not replicated
        with pytest.raises(VersionExistsError):  # a loser wrote nothing and does not wait
            store.reserve(rec(key))
        final = r.path[: r.path.rindex(".manifest-") + len(".manifest")]
        with pytest.raises(AmbiguousStoreError):
            store.flip(key, 1, r.path, final)
        assert plain.get(key, 1).path == final
    finally:
        plain.delete_table(key)
        plain.close()
        store.close()


def test_redis_check_warns_when_commits_are_not_durable(redis_url, caplog):
    import redis as redis_py

    from tessera.stores import redis_store

    config = redis_py.Redis.from_url(redis_url).config_get("appendonly")
    caplog.set_level(logging.DEBUG, logger="tessera.stores.redis_store")
    redis_store._warned.clear()  # earlier tests opened this store already
    for _ in range(3):  # a writer per commit: warned once per process, then at debug level
        open_manifest_store(redis_url).close()
    said = [r for r in caplog.records if "appendonly" in r.getMessage()]
    if config.get("appendonly") != "yes":
        assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    else:
        assert said == []


# ----------------------------------------------------------------------------- SQL
def _tables(url: str) -> set[str]:
    eng = sa.create_engine(url)
    try:
        return set(sa.inspect(eng).get_table_names())
    finally:
        eng.dispose()


def test_sql_foreign_table_with_wrong_columns_is_refused(scratch_sql_url):
    eng = sa.create_engine(scratch_sql_url)
    with eng.begin() as c:
        c.execute(sa.text("CREATE TABLE tessera_manifest_versions (base_uri VARCHAR(200) PRIMARY KEY, version BIGINT)"))
    eng.dispose()
    for create in (True, False):
        with pytest.raises(StoreSchemaError) as err:
            open_manifest_store(scratch_sql_url, create=create)
        assert "base_uri" in str(err.value) and "table_hash" in str(err.value)
    assert _tables(scratch_sql_url) == {"tessera_manifest_versions"}  # nothing written, no version table


def test_sql_missing_schema_names_the_fix(scratch_sql_url):
    with pytest.raises(StoreSchemaError, match="tessera store provision"):
        open_manifest_store(scratch_sql_url, create=False)
    assert _tables(scratch_sql_url) == set()
    s = open_manifest_store(scratch_sql_url, create=True)
    try:
        key = new_key()
        s.reserve(rec(key))
        assert s.latest(key).version == 1
    finally:
        s.close()
    open_manifest_store(scratch_sql_url, create=False).close()  # now at head


def test_sql_table_not_created_by_the_migrations(scratch_sql_url):
    from tessera.stores.sql_schema import Base

    eng = sa.create_engine(scratch_sql_url)
    Base.metadata.create_all(eng)  # the right columns, but no recorded revision
    eng.dispose()
    with pytest.raises(StoreSchemaError, match="records no Tessera migration"):
        open_manifest_store(scratch_sql_url, create=False)


def test_sql_schema_newer_than_this_code(scratch_sql_url):
    sql_migrate.upgrade(scratch_sql_url)
    eng = sa.create_engine(scratch_sql_url)
    with eng.begin() as c:
        c.execute(sa.text(f"UPDATE {sql_migrate.VERSION_TABLE} SET version_num = '9999_from_the_future'"))
    eng.dispose()
    with pytest.raises(StoreSchemaError, match="newer than this Tessera"):
        open_manifest_store(scratch_sql_url, create=False)


@pytest.mark.parametrize(
    "url",
    ["postgresql+psycopg://postgres@127.0.0.1:1/test", "mysql+pymysql://root@127.0.0.1:1/test"],
)
def test_unreachable_sql_is_unavailable_quickly(url):
    t0 = time.monotonic()
    for create in (False, True):
        with pytest.raises(StoreUnavailableError):
            open_manifest_store(url, create=create)
    s = open_manifest_store(url, check=False)
    with pytest.raises(StoreUnavailableError):  # never connected: not ambiguous
        s.reserve(rec(new_key()))
    s.close()
    assert time.monotonic() - t0 < 10


def test_sqlite_in_a_missing_directory_is_unavailable(tmp_path):
    with pytest.raises(StoreUnavailableError):
        open_manifest_store(f"sqlite:///{tmp_path}/no/such/dir/m.db")
