"""One timeout, honoured everywhere: ``io_timeout``.

A loopback proxy (tests/fault_proxy.py) between a store and its real server
holds back one reply while the TCP connection stays alive.  Every store must
give up after ``io_timeout`` (here 1 s, given in the store URL's query, so the
tests also prove the URL's value is the one applied: the defaults are 5-30 s)
with its typed error - AmbiguousStoreError for a write, StoreUnavailableError
for a read - and the row must be readable directly afterwards.  Plus the URL
query settings themselves: parsed, applied, removed before the driver, never in
the identity, and bad values refused naming the setting.
"""

from __future__ import annotations

import socket
import time
import uuid
from urllib.parse import urlencode

import pytest
import sqlalchemy as sa
from tessera_test_fault_proxy import FaultProxy, _target, _via_proxy
from tessera_test_store_fixtures import dynamodb_table, dynamodb_url  # noqa: F401

from tessera.stores.errors import (
    AmbiguousStoreError,
    InvalidStorageOptionError,
    InvalidURIError,
    StoreUnavailableError,
)
from tessera.stores.manifest_store import VersionRecord
from tessera.stores.registry import open_manifest_store
from tessera.stores.sql_schema import ManifestVersionRow, table_hash
from tessera.stores.uri import normalize_table_uri

IO = 1.0  # io_timeout of every proxied store
SLACK = 3.0  # a stalled call must end before IO + SLACK seconds (the defaults are 5 s and more)
RELEASE = IO + SLACK + 1  # the proxy gives a stalled connection up then: a missing timeout fails, never hangs
KINDS = ["postgresql", "mysql", "redis", "dynamodb"]


def _base_url(kind: str, request) -> str:
    if kind == "postgresql":
        return request.getfixturevalue("postgres_url")
    if kind == "mysql":
        return request.getfixturevalue("mysql_url")
    if kind == "redis":
        return request.getfixturevalue("redis_url")
    return dynamodb_url(request.getfixturevalue("moto_server"), request.getfixturevalue("dynamodb_table"))


def _with(url: str, **query) -> str:
    return url + ("&" if "?" in url else "?") + urlencode(query)


def _open(url: str, *, create: bool = False, **options):
    if url.startswith(("redis", "dynamodb")):
        return open_manifest_store(url, **options)
    return open_manifest_store(url, create=create, **options)


def _record(key: str, version: int) -> VersionRecord:
    return VersionRecord(
        key, version, f"_versions/{version:020d}.manifest-{uuid.uuid4()}", 10, f"txn-{uuid.uuid4()}", "inc"
    )


def _new_key(tag: str) -> tuple[str, str]:
    """(table key, a marker unique to it that every request about it carries)."""
    marker = f"{tag}-{uuid.uuid4().hex[:12]}"
    return normalize_table_uri(f"s3://{marker}/t"), marker


def _read_marker(kind: str, key: str, marker: str) -> str:
    # SQL stores look rows up by the key's hash; Redis and DynamoDB send the key itself
    return table_hash(key) if kind in ("postgresql", "mysql") else marker


class _Pair:
    """A direct store, a proxy to the same server and a store through it."""

    def __init__(self, kind: str, request, **query) -> None:
        base = _base_url(kind, request)
        self.direct = _open(base, create=True)
        self.proxy = FaultProxy(*_target(base))
        self.proxied = _open(_with(_via_proxy(base, self.proxy.port), io_timeout=IO, **query))
        self.keys: list[str] = []

    def close(self) -> None:
        try:
            for key in self.keys:
                self.direct.delete_table(key)
        finally:
            self.direct.close()
            self.proxied.close()
            self.proxy.close()


@pytest.fixture
def pair_factory(request):
    made: list[_Pair] = []

    def make(kind: str, **query) -> _Pair:
        made.append(_Pair(kind, request, **query))
        return made[-1]

    yield make
    for p in made:
        p.close()


# ------------------------------------------------------------- stalled replies
@pytest.mark.parametrize("kind", KINDS)
def test_stalled_reply_to_a_write_is_ambiguous_within_io_timeout(kind, pair_factory):
    # PostgreSQL without the pool's ping: a cut connection handed out again would fail the next write
    pair = pair_factory(kind, **({"pool_pre_ping": "false"} if kind == "postgresql" else {}))
    key, _ = _new_key("stallw")
    pair.keys.append(key)
    pair.proxied.reserve(_record(key, 1))  # the path through the proxy works
    record = _record(key, 2)
    pair.proxy.arm(record.transaction_uuid, mode="stall", release_after=RELEASE)
    t0 = time.monotonic()
    with pytest.raises(AmbiguousStoreError):
        pair.proxied.reserve(record)
    elapsed = time.monotonic() - t0
    assert pair.proxy.fired.is_set()
    assert 0.9 * IO <= elapsed < IO + SLACK, elapsed  # the io_timeout from the URL ended it
    assert pair.direct.get(key, 2) == record  # the server applied it
    third = _record(key, 3)
    pair.proxied.reserve(third)  # the stalled connection was discarded, not reused
    assert pair.direct.get(key, 3) == third


@pytest.mark.parametrize("kind", KINDS)
def test_stalled_reply_to_a_read_is_unavailable_within_io_timeout(kind, pair_factory):
    pair = pair_factory(kind)
    key, marker = _new_key("stallr")
    pair.keys.append(key)
    record = _record(key, 1)
    pair.direct.reserve(record)
    assert pair.proxied.get(key, 1) == record
    pair.proxy.arm(_read_marker(kind, key, marker), mode="stall", release_after=RELEASE)
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        pair.proxied.get(key, 1)
    elapsed = time.monotonic() - t0
    assert pair.proxy.fired.is_set()
    assert 0.9 * IO <= elapsed < IO + SLACK, elapsed  # and not retried into a multiple of it
    assert pair.direct.get(key, 1) == record
    assert pair.proxied.get(key, 1) == record  # the store recovers at once


def test_keyword_io_timeout_wins_over_the_url(redis_url):
    proxy = FaultProxy(*_target(redis_url))
    store = open_manifest_store(_with(_via_proxy(redis_url, proxy.port), io_timeout=30), io_timeout=IO)
    direct = open_manifest_store(redis_url)
    key, _ = _new_key("kwwins")
    try:
        record = _record(key, 1)
        proxy.arm(record.transaction_uuid, mode="stall", release_after=RELEASE)
        t0 = time.monotonic()
        with pytest.raises(AmbiguousStoreError):
            store.reserve(record)
        assert time.monotonic() - t0 < IO + SLACK
        assert direct.get(key, 1) == record
    finally:
        direct.delete_table(key)
        direct.close()
        store.close()
        proxy.close()


# ----------------------------------------------------- PostgreSQL specifically
def test_postgres_server_that_stops_answering_is_bounded(postgres_url):
    """The pool's liveness ping and a reconnect are bounded too: a store call
    against a black-holed server ends after io_timeout + connect_timeout
    (psycopg waits at least 2 s to connect), as StoreUnavailableError: nothing
    was sent."""
    direct = _open(postgres_url, create=True)
    proxy = FaultProxy(*_target(postgres_url))
    store = _open(_with(_via_proxy(postgres_url, proxy.port), io_timeout=IO, connect_timeout=1))
    key, _ = _new_key("blackhole")
    try:
        store.reserve(_record(key, 1))  # leaves a pooled connection behind
        proxy.start_outage(30, refuse=False)  # open connections stall, new ones are never answered
        for call in (lambda: store.get(key, 1), lambda: store.reserve(_record(key, 2))):
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailableError):
                call()
            assert time.monotonic() - t0 < IO + 2 + SLACK
        assert direct.get(key, 2) is None
    finally:
        direct.delete_table(key)
        direct.close()
        store.close()
        proxy.close()


def test_postgres_statement_timeout_is_a_definite_refusal(postgres_url):
    """The server cancels a statement stuck behind a lock after 90 % of
    io_timeout (SQLSTATE 57014): a definite "not applied", so the write is
    StoreUnavailableError, not AmbiguousStoreError, and the row is absent."""
    store = _open(_with(postgres_url, io_timeout=IO), create=True)
    key, _ = _new_key("stmtto")
    record = _record(key, 1)
    blocker = sa.create_engine(postgres_url)
    try:
        with store._engine.connect() as c:
            assert c.exec_driver_sql("SHOW statement_timeout").scalar() == "900ms"
        with blocker.connect() as conn:
            txn = conn.begin()
            conn.execute(
                ManifestVersionRow.__table__.insert().values(
                    table_hash=table_hash(key),
                    version=1,
                    table_key=key,
                    path=record.path,
                    size=1,
                    transaction_uuid="blocker",
                    incarnation="inc",
                )
            )  # uncommitted: holds the key
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="statement timeout"):
                store.reserve(record)
            assert time.monotonic() - t0 < IO + SLACK
            txn.rollback()
        assert store.get(key, 1) is None
    finally:
        blocker.dispose()
        store.delete_table(key)
        store.close()


# ------------------------------------------------------------------------- S3
@pytest.fixture
def s3_pair(moto_server):
    from tessera.stores.s3 import S3ObjectStore

    bucket = moto_server.new_bucket()
    proxy = FaultProxy(*_target(moto_server.endpoint))
    uri = f"s3://{bucket}/timeouts"
    direct = S3ObjectStore(uri, moto_server.storage_options())

    def via_proxy(**options) -> S3ObjectStore:
        opts = {
            **moto_server.storage_options(),
            "endpoint_url": _via_proxy(moto_server.endpoint, proxy.port),
            "io_timeout": IO,
            **options,
        }
        return S3ObjectStore(uri, opts)

    yield direct, proxy, via_proxy
    proxy.close()
    s3 = moto_server.client("s3")
    for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        s3.delete_object(Bucket=bucket, Key=obj["Key"])
    s3.delete_bucket(Bucket=bucket)


def test_s3_stalled_conditional_create_is_ambiguous_within_io_timeout(s3_pair):
    direct, proxy, via_proxy = s3_pair
    store = via_proxy()
    name = f"m-{uuid.uuid4().hex}.manifest"
    proxy.arm(name, mode="stall", release_after=RELEASE)
    t0 = time.monotonic()
    with pytest.raises(AmbiguousStoreError):  # the retry finds the object there: ours or not, unknown
        store.put_if_not_exists(name, b"ours")
    elapsed = time.monotonic() - t0
    assert proxy.fired.is_set()
    assert 0.9 * IO <= elapsed < IO + SLACK, elapsed
    assert direct.read(name) == b"ours"


def test_s3_stalled_read_is_unavailable_within_io_timeout(s3_pair):
    direct, proxy, via_proxy = s3_pair
    name = f"o-{uuid.uuid4().hex}"
    direct.put(name, b"payload")
    store = via_proxy(max_retries=0)  # one attempt: the bound is io_timeout
    proxy.arm(name, mode="stall", release_after=RELEASE)
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        store.read(name)
    elapsed = time.monotonic() - t0
    assert 0.9 * IO <= elapsed < IO + SLACK, elapsed
    assert direct.read(name) == b"payload"
    assert store.read(name) == b"payload"


def test_s3_botocore_retries_a_stalled_read_once_per_attempt(s3_pair):
    """With botocore's retries (the default) a stalled GET costs one
    io_timeout per attempt: the second attempt gets the answer."""
    direct, proxy, via_proxy = s3_pair
    name = f"o-{uuid.uuid4().hex}"
    direct.put(name, b"payload")
    store = via_proxy()
    proxy.arm(name, mode="stall", release_after=RELEASE)
    t0 = time.monotonic()
    assert store.read(name) == b"payload"
    elapsed = time.monotonic() - t0
    assert proxy.fired.is_set()
    assert 0.9 * IO <= elapsed < IO + SLACK, elapsed


def test_s3_io_timeout_is_read_timeout():
    from tessera.stores.s3_options import S3Options

    assert S3Options.from_mapping({"io_timeout": "1500ms"}).read_timeout == 1.5
    assert S3Options.from_mapping({"io_timeout": 2, "read_timeout": 2}).read_timeout == 2
    with pytest.raises(InvalidStorageOptionError, match="read_timeout"):
        S3Options.from_mapping({"io_timeout": 2, "read_timeout": 3})
    with pytest.raises(InvalidStorageOptionError, match="io_timeout"):
        S3Options.from_mapping({"io_timeout": -1})


# ------------------------------------------------------- the proxy's outage mode
def test_fault_proxy_outage_drops_the_reply_then_refuses_then_recovers(redis_url):
    proxy = FaultProxy(*_target(redis_url))
    store = open_manifest_store(_with(_via_proxy(redis_url, proxy.port), io_timeout=IO))
    direct = open_manifest_store(redis_url)
    key, _ = _new_key("outage")
    try:
        record = _record(key, 1)
        proxy.arm(record.transaction_uuid, mode="outage", outage=0.5)
        t0 = time.monotonic()
        with pytest.raises(AmbiguousStoreError):
            store.reserve(record)  # the reply was dropped: fails at once, not after io_timeout
        assert time.monotonic() - t0 < IO
        assert proxy.in_outage()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=1).close()
        with pytest.raises(StoreUnavailableError):
            store.get(key, 1)  # the read-back cannot connect yet
        assert proxy.outage_over.wait(2)
        assert store.get(key, 1) == record  # forwarding again: the read-back finds the row
        store.reserve(record)  # and a retry of the reservation is a success
    finally:
        direct.delete_table(key)
        direct.close()
        store.close()
        proxy.close()


# ------------------------------------------------------------ URL query settings
def test_sql_url_settings_are_applied_and_never_reach_the_driver(postgres_url):
    base = _open(postgres_url, create=True)
    url = _with(
        postgres_url,
        io_timeout=7,
        connect_timeout=3,
        pool_size=2,
        max_overflow=1,
        application_name="tessera-timeouts-test",
    )
    store = _open(url)  # psycopg would refuse io_timeout, pool_size ... as connection options
    try:
        assert store.identity() == base.identity()
        assert store._io_timeout == 7.0
        assert store._engine.pool.size() == 2
        assert "io_timeout" not in store._engine.url.query and "pool_size" not in store._engine.url.query
        with store._engine.connect() as c:
            assert c.exec_driver_sql("SHOW statement_timeout").scalar() == "6300ms"
            assert c.exec_driver_sql("SHOW application_name").scalar() == "tessera-timeouts-test"  # passed on
        store.close()
        store = _open(_with(postgres_url, io_timeout=30), io_timeout=2)  # a keyword argument wins
        assert store._io_timeout == 2.0
        with store._engine.connect() as c:
            assert c.exec_driver_sql("SHOW statement_timeout").scalar() == "1800ms"
        store.close()
        # the user's own server options come after ours, so theirs win
        store = _open(_with(postgres_url, io_timeout=2, options="-c statement_timeout=5s -c lock_timeout=1s"))
        with store._engine.connect() as c:
            assert c.exec_driver_sql("SHOW statement_timeout").scalar() == "5s"
            assert c.exec_driver_sql("SHOW lock_timeout").scalar() == "1s"
    finally:
        store.close()
        base.close()


def test_mysql_url_io_timeout_sets_the_driver_timeouts(mysql_url):
    base = _open(mysql_url, create=True)
    store = _open(_with(mysql_url, io_timeout=4, pool_size=1))
    try:
        assert store.identity() == base.identity()
        with store._engine.connect() as c:
            raw = c.connection.dbapi_connection
            assert (raw._read_timeout, raw._write_timeout) == (4.0, 4.0)
        with pytest.raises(InvalidURIError, match="io_timeout"):
            _open(_with(mysql_url, read_timeout=5))  # one knob: a second one would silently lose
    finally:
        store.close()
        base.close()


def test_sqlite_url_settings(tmp_path):
    path = tmp_path / "m.db"
    store = _open(f"sqlite:///{path}?io_timeout=5&busy_timeout_ms=1234", create=True)
    plain = _open(f"sqlite:///{path}")
    try:
        assert store.identity() == plain.identity()
        with store._engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1234
    finally:
        store.close()
        plain.close()


def test_redis_url_settings(redis_url):
    url = _with(
        redis_url, io_timeout=2, connect_timeout="500ms", max_connections=3, prefix="tt", client_name="tessera-t"
    )
    store = open_manifest_store(url)
    plain = open_manifest_store(_with(redis_url, prefix="tt"))
    try:
        kw = store._pool.connection_kwargs
        assert (kw["socket_timeout"], kw["socket_connect_timeout"], kw["client_name"]) == (2.0, 0.5, "tessera-t")
        assert store._pool.max_connections == 3
        assert store.identity() == plain.identity() and store.identity().endswith("#tt")
        assert "io_timeout" not in kw and "prefix" not in kw
        for alias in (
            open_manifest_store(_with(redis_url, socket_timeout=3), check=False),
            open_manifest_store(redis_url, socket_timeout=3, check=False),
        ):
            assert alias._pool.connection_kwargs["socket_timeout"] == 3.0
            alias.close()
        waited = open_manifest_store(_with(redis_url, io_timeout=1, wait_replicas=1, wait_timeout_ms=2500), check=False)
        assert waited._pool.connection_kwargs["socket_timeout"] == 3.5  # outlives the WAIT it carries
        waited.close()
        with pytest.raises(InvalidURIError, match="io_timeout"):
            open_manifest_store(_with(redis_url, io_timeout=1, socket_timeout=2), check=False)
        with pytest.raises(InvalidStorageOptionError, match="socket_timeout"):
            open_manifest_store(redis_url, io_timeout=1, socket_timeout=2, check=False)
    finally:
        store.close()
        plain.close()


def test_dynamodb_url_settings(moto_server, dynamodb_table):
    base_url = dynamodb_url(moto_server, dynamodb_table)
    base = open_manifest_store(base_url)
    store = open_manifest_store(_with(base_url, io_timeout=3, connect_timeout=1, max_attempts=2))
    try:
        config = store._client.meta.config
        assert (config.read_timeout, config.connect_timeout, store._max_attempts) == (3.0, 1.0, 2)
        assert config.retries["total_max_attempts"] == 1  # botocore never repeats a request
        assert store.identity() == base.identity()
        alias = open_manifest_store(_with(base_url, read_timeout=4), check=False)
        assert alias._client.meta.config.read_timeout == 4.0
        alias.close()
        kw = open_manifest_store(_with(base_url, io_timeout=3), io_timeout=5, check=False)
        assert kw._client.meta.config.read_timeout == 5.0  # a keyword argument wins
        kw.close()
    finally:
        store.close()
        base.close()


BAD_QUERIES = [
    ("io_timeout=soon", "io_timeout"),
    ("io_timeout=-1", "io_timeout"),
    ("io_timeout=0", "io_timeout"),
    ("io_timeout=nan", "io_timeout"),
    ("io_timeout=1e9", "io_timeout"),
    ("io_timeout=1&io_timeout=2", "io_timeout"),
    ("io_timout=5", "io_timeout"),  # a misspelling is not passed to the driver
    ("connect_timeout=never", "connect_timeout"),
]
BAD_PER_KIND = {
    "sqlite:///{tmp}/bad.db": [("busy_timeout_ms=-5", "busy_timeout_ms"), ("pool_size=many", "pool_size")],
    "postgresql+psycopg://postgres@127.0.0.1:1/test": [
        ("statement_timeout=5", "statement_timeout"),
        ("pool_pre_ping=maybe", "pool_pre_ping"),
    ],
    "mysql+pymysql://root@127.0.0.1:1/test": [("write_timeout=3", "io_timeout"), ("max_overflow=-2", "max_overflow")],
    "redis://127.0.0.1:1/0": [
        ("wait_replicas=-1", "wait_replicas"),
        ("max_connections=0", "max_connections"),
        ("socket_timeout=1&io_timeout=2", "io_timeout"),
    ],
    "dynamodb:///tessera-t?region=us-east-1&endpoint_url=http://127.0.0.1:1": [
        ("max_attempts=0", "max_attempts"),
        ("read_timeout=x", "read_timeout"),
    ],
}
BAD_CASES = [(base, q, name) for base in BAD_PER_KIND for q, name in BAD_QUERIES + BAD_PER_KIND[base]]


@pytest.mark.parametrize("base, query, name", BAD_CASES)
def test_bad_url_settings_are_refused_naming_them(base, query, name, tmp_path):
    url = base.replace("{tmp}", str(tmp_path)) + ("&" if "?" in base else "?") + query
    t0 = time.monotonic()
    with pytest.raises(InvalidURIError, match=name):  # before any connection is tried
        open_manifest_store(url, check=False)
    assert time.monotonic() - t0 < 1


@pytest.mark.parametrize("base", list(BAD_PER_KIND))
@pytest.mark.parametrize(
    "options, name",
    [
        ({"io_timeout": -1}, "io_timeout"),
        ({"io_timeout": "soon"}, "io_timeout"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"io_timout": 1}, "io_timout"),  # not an option of any store
    ],
)
def test_bad_keyword_settings_are_refused_naming_them(base, options, name, tmp_path):
    with pytest.raises(InvalidStorageOptionError, match=name):
        open_manifest_store(base.replace("{tmp}", str(tmp_path)), check=False, **options)


def test_driver_parameters_that_look_like_timeouts_are_passed_on(postgres_url):
    """libpq's own tcp_user_timeout is the driver's, not a misspelling of
    ours: it is passed on, and wins over the one io_timeout would set."""
    store = _open(_with(postgres_url, tcp_user_timeout=4000, io_timeout=2), create=True)
    try:
        with store._engine.connect() as c:
            params = c.connection.dbapi_connection.info.get_parameters()
            assert params.get("tcp_user_timeout") == "4000"
            assert params.get("keepalives_idle") == "10"  # ours, where the URL says nothing
    finally:
        store.close()
