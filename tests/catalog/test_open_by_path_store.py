"""A table opened by path, without ``commit_store``, finds the manifest store
that coordinates it (catalog/table/coordinator.py): a URL the configuration
lists with that store's identity, else the credential-free address the table
records; when neither can be used it is readable and its writes are refused,
saying why.  Against the real stores (SQLite, Redis, PostgreSQL, MariaDB,
moto's DynamoDB)."""

from __future__ import annotations

import logging
import uuid

import pyarrow as pa
import pytest
from tessera_test_store_fixtures import dynamodb_table, kind_of, store_url  # noqa: F401 - fixtures

from tessera.catalog import errors as E
from tessera.catalog.table import Table, coordinator
from tessera.commit import ExternalCommitHandler, NativeCommitHandler
from tessera.commit.handlers import CONFIG_STORE
from tessera.stores.registry import open_manifest_store
from tessera.stores.store_url import url_of_identity
from tessera.stores.uri import normalize_table_uri


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"i": pa.array(range(start, start + n), pa.int64())})


@pytest.fixture(autouse=True)
def no_user_config(tmp_path, monkeypatch):
    """No config file of the machine's user, no commit-store variables."""
    monkeypatch.setenv("TESSERA_CONFIG", str(tmp_path / "tessera.yaml"))
    (tmp_path / "tessera.yaml").write_text("{}\n")
    monkeypatch.delenv("TESSERA_COMMIT_STORES", raising=False)
    monkeypatch.delenv("TESSERA_RECORDED_STORES", raising=False)
    coordinator._WARNED.clear()


@pytest.fixture
def forget(tmp_path):
    """Rows this test put in a shared store, deleted afterwards."""
    made: list[str] = []
    yield made.append
    for url in made:
        ms = open_manifest_store(url)
        try:
            ms.delete_table(normalize_table_uri(str(tmp_path / "t")))
        finally:
            ms.close()


def test_the_recorded_store_is_found(store_url, tmp_path, monkeypatch, forget):
    """Every store's recorded identity opens that store again (the inverse is
    pinned: a changed identity format fails here), and a by-path open commits
    through it.  PostgreSQL takes its user from libpq's PGUSER; MariaDB has
    no such place, so its URL is listed in the configuration."""
    url, kind = store_url, kind_of(store_url)
    forget(url)
    path = str(tmp_path / "t")
    Table.create(path, _rows(3), commit_store=url)
    recorded = Table.open(path, commit_store=url).manifest.config[CONFIG_STORE]
    reopened = url_of_identity(recorded)
    assert reopened is not None and "@" not in reopened
    if kind == "postgresql":
        monkeypatch.setenv("PGUSER", "postgres")
    if kind == "mysql":
        (tmp_path / "tessera.yaml").write_text(f"commit_stores:\n  - {url}\n")
    else:
        ms = open_manifest_store(reopened, check=False, create=False)
        assert ms.identity() == recorded
        ms.close()

    t = Table.open(path)
    assert isinstance(t._handler, ExternalCommitHandler) and t._handler.ms.identity() == recorded
    t.append(_rows(2, 100))
    again = Table.open(path, commit_store=url)
    assert again.version == 2 and again.count_rows() == 5
    ms = open_manifest_store(url)
    try:
        row = ms.get(normalize_table_uri(path), 2)
        assert row is not None and row.is_final  # the append went through the store
    finally:
        ms.close()


def test_a_listed_url_with_credentials_wins_over_the_recorded_address(tmp_path, request, forget):
    """The configuration's URL (with a password) is used; what the table
    records and what errors say never carry it."""
    base = request.getfixturevalue("redis_url")
    url = f"{base}?prefix=t{uuid.uuid4().hex[:10]}"
    forget(url)
    path = str(tmp_path / "t")
    Table.create(path, _rows(3), commit_store=url)
    with_user = url.replace("redis://", "redis://default:@")  # the default user, empty password: accepted
    (tmp_path / "tessera.yaml").write_text(f"commit_stores:\n  - {with_user}\nrecorded_stores: false\n")
    t = Table.open(path)
    assert isinstance(t._handler, ExternalCommitHandler)
    t.append(_rows(1, 9))
    assert Table.open(path, commit_store=url).count_rows() == 4
    assert "default" not in Table.open(path).manifest.config[CONFIG_STORE]


def test_unreachable_store_reads_and_refuses_writes_saying_why(tmp_path, request, caplog, forget):
    """recorded_stores: false and no listed URL: the table reads from storage,
    one warning per table, and a write is refused naming the store and the
    fix; nothing is committed."""
    url = f"{request.getfixturevalue('redis_url')}?prefix=t{uuid.uuid4().hex[:10]}"
    forget(url)
    path = str(tmp_path / "t")
    Table.create(path, _rows(3), commit_store=url)
    (tmp_path / "tessera.yaml").write_text("recorded_stores: false\n")
    with caplog.at_level(logging.WARNING, logger="tessera.catalog.table.coordinator"):
        t = Table.open(path)
        Table.open(path)
    warnings = [r for r in caplog.records if "open for reading only" in r.getMessage()]
    assert len(warnings) == 1
    assert isinstance(t._handler, NativeCommitHandler) and t.count_rows() == 3
    with pytest.raises(E.CoordinatorMismatchError) as info:
        t.append(_rows(1, 50))
    message = str(info.value)
    assert "recorded_stores: false" in message and "commit_stores" in message and "redis" in message
    assert Table.open(path, commit_store=url).version == 1


def test_an_empty_store_at_the_recorded_address_is_not_used_nor_written(tmp_path, request):
    """The store at the recorded address lost the table (its keys deleted, as
    after a flush): the open reads from storage, the write is refused, and
    nothing is created in that store (not even its store id)."""
    import redis

    prefix = f"t{uuid.uuid4().hex[:10]}"
    base = request.getfixturevalue("redis_url")
    url = f"{base}?prefix={prefix}"
    path = str(tmp_path / "t")
    Table.create(path, _rows(3), commit_store=url)
    client = redis.Redis.from_url(base)
    try:
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)
        t = Table.open(path)
        assert t.count_rows() == 3
        with pytest.raises(E.CoordinatorMismatchError) as info:
            t.append(_rows(1))
        assert "TableNotFoundError" in str(info.value)
        assert list(client.scan_iter(f"{prefix}:*")) == []
    finally:
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)
        client.close()


def test_a_missing_sqlite_file_is_not_created(tmp_path):
    db = tmp_path / "commits.db"
    path = str(tmp_path / "t")
    Table.create(path, _rows(3), commit_store=f"sqlite:///{db}")
    moved = tmp_path / "moved.db"
    db.rename(moved)
    t = Table.open(path)
    assert not db.exists() and t.count_rows() == 3
    with pytest.raises(E.CoordinatorMismatchError, match="cannot be opened as it is"):
        t.append(_rows(1))
    (tmp_path / "tessera.yaml").write_text(f"commit_stores: ['sqlite:///{moved}']\n")
    # another file: its identity is not the recorded one, so it is not used either
    with pytest.raises(E.CoordinatorMismatchError):
        Table.open(path).append(_rows(1))
    assert not db.exists()


def test_explicit_store_and_native_tables_are_unchanged(tmp_path):
    url = f"sqlite:///{tmp_path}/commits.db"
    ext, nat = str(tmp_path / "ext"), str(tmp_path / "nat")
    Table.create(ext, _rows(1), commit_store=url)
    Table.create(nat, _rows(1))
    (tmp_path / "tessera.yaml").write_text(f"commit_stores: ['{url}']\n")
    assert isinstance(Table.open(nat)._handler, NativeCommitHandler)
    with pytest.raises(E.CoordinatorMismatchError):
        Table.open(nat, commit_store=url)


@pytest.mark.parametrize(
    "identity",
    [
        "redis://user:secret@127.0.0.1:6379/0#tessera",  # credentials: never followed
        "postgresql://app:pw@db:5432/x#tessera_manifest_versions",
        "postgresql://db:5432/x#not_our_table",
        "ftp://h/x",
        "no address",
    ],
)
def test_addresses_that_are_never_followed(identity):
    assert url_of_identity(identity) is None


@pytest.mark.parametrize(
    "content, message",
    [
        ("commit_stores: redis://h:1/0\n", "commit_stores must be a list"),
        ("recorded_stores: maybe\n", "recorded_stores must be true or false"),
    ],
)
def test_bad_settings_are_named(tmp_path, content, message):
    path = str(tmp_path / "t")
    Table.create(path, _rows(1), commit_store=f"sqlite:///{tmp_path}/c.db")
    (tmp_path / "tessera.yaml").write_text(content)
    with pytest.raises(E.CatalogConfigError, match=message):
        Table.open(path)


def test_environment_variables(tmp_path, monkeypatch):
    db = tmp_path / "c.db"
    path = str(tmp_path / "t")
    Table.create(path, _rows(1), commit_store=f"sqlite:///{db}")
    monkeypatch.setenv("TESSERA_RECORDED_STORES", "false")
    assert isinstance(Table.open(path)._handler, NativeCommitHandler)
    monkeypatch.setenv("TESSERA_COMMIT_STORES", f"redis://127.0.0.1:1/0 sqlite:///{db}")
    assert isinstance(Table.open(path)._handler, ExternalCommitHandler)
    monkeypatch.setenv("TESSERA_RECORDED_STORES", "perhaps")
    with pytest.raises(E.CatalogConfigError):
        Table.open(path)
