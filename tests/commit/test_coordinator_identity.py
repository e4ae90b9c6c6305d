"""A table records its manifest store's own id, not its URL: the same store
reached through another address is accepted, a different (or emptied) store
answering at the recorded address is refused with a typed error naming both,
and tables recorded by URL (before store ids) migrate on their next write."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid

import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog import errors as E
from tessera.commit.errors import StoreIdentityMismatchError
from tessera.commit.handlers import CONFIG_STORE, CONFIG_STORE_ID
from tessera.stores.registry import open_manifest_store
from tessera.stores.uri import normalize_table_uri


def _rows(start: int) -> pa.Table:
    return pa.table({"i": pa.array([start, start + 1], pa.int64())})


def _alias(url: str) -> str:
    """The same server through another address: localhost instead of 127.0.0.1."""
    assert "127.0.0.1" in url
    return url.replace("127.0.0.1", "localhost")


@pytest.fixture(params=["redis", "postgres", "mysql"])
def server_url(request):
    return request.getfixturevalue(
        {"redis": "redis_url", "postgres": "postgres_url", "mysql": "mysql_url"}[request.param]
    )


def _drop(uri: str, url: str) -> None:
    ms = open_manifest_store(url)
    ms.delete_table(normalize_table_uri(uri))
    ms.close()


def test_same_store_through_another_address_is_accepted(tmp_path, server_url):
    uri = str(tmp_path / "t")
    t = Table.create(uri, _rows(0), commit_store=server_url)
    try:
        assert t.manifest.config[CONFIG_STORE_ID] == open_manifest_store(server_url).store_id()
        other = Table.open(uri, commit_store=_alias(server_url))
        other.append(_rows(10))
        assert other.version == 2
        t.append(_rows(20))
        assert sorted(Table.open(uri, commit_store=server_url).to_arrow().column("i").to_pylist()) == [
            0,
            1,
            10,
            11,
            20,
            21,
        ]
    finally:
        _drop(uri, server_url)


def _redis_server(port: int, workdir) -> subprocess.Popen:
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("redis-server is not on PATH (CI=true: services must be up)")
        pytest.skip("redis-server is not on PATH")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail(f"redis-server on port {port} did not start")


def test_an_empty_store_at_the_recorded_address_is_refused(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    uri = str(tmp_path / "t")
    first = _redis_server(port, tmp_path)
    try:
        t = Table.create(uri, _rows(0), commit_store=url)
        t.append(_rows(10))
        recorded = t.manifest.config[CONFIG_STORE_ID]
    finally:
        first.terminate()
        first.wait(10)
    second = _redis_server(port, tmp_path)  # same address, no data: a Redis that lost everything
    try:
        with pytest.raises(StoreIdentityMismatchError) as info:
            Table.open(uri, commit_store=url)
        assert recorded in str(info.value) and info.value.found_id != recorded
        assert isinstance(info.value, E.CoordinatorMismatchError)
        with pytest.raises(StoreIdentityMismatchError):
            Table.create(uri, _rows(0), commit_store=url, mode="overwrite")
        # nothing was written to the table
        assert Table.open(uri).version == 2
    finally:
        second.terminate()
        second.wait(10)


def test_a_recreated_sqlite_store_is_refused(tmp_path):
    db = tmp_path / "commits.db"
    url = f"sqlite:///{db}"
    uri = str(tmp_path / "t")
    Table.create(uri, _rows(0), commit_store=url).append(_rows(10))
    h = Table.open(uri, commit_store=url)
    os.unlink(db)
    for extra in ("-wal", "-shm"):
        if os.path.exists(f"{db}{extra}"):
            os.unlink(f"{db}{extra}")
    with pytest.raises(StoreIdentityMismatchError):
        Table.open(uri, commit_store=url)
    # the held handle's store object cached the old id; the new store's rows refuse it all the same
    with pytest.raises((E.CoordinatorMismatchError, E.IncarnationMismatchError)):
        h.append(_rows(20))
    assert Table.open(uri).version == 2


def test_tables_recorded_by_url_migrate_on_next_write(tmp_path, lance):
    """A table from before store ids records only the store's URL: opened
    through that URL it works, and its next write records the store id."""
    url = f"sqlite:///{tmp_path}/commits.db"
    uri = str(tmp_path / "t")
    Table.create(uri, _rows(0), commit_store=url)
    # make the latest version look like an old Tessera's: pylance drops the key
    # (by URI, around the store: the next open adopts that version)
    lance.dataset(uri).delete_config_keys([CONFIG_STORE_ID])
    old = Table.open(uri, commit_store=url)
    assert old.version == 2 and CONFIG_STORE_ID not in old.manifest.config
    assert old.manifest.config[CONFIG_STORE] == open_manifest_store(url).identity()
    old.append(_rows(10))
    assert Table.open(uri, commit_store=url).manifest.config[CONFIG_STORE_ID] == open_manifest_store(url).store_id()
    # an old table recorded by another URL is still refused (no id to prove it is the same store)
    other = f"sqlite:///{tmp_path}/other-{uuid.uuid4().hex[:6]}.db"
    lance.dataset(uri).delete_config_keys([CONFIG_STORE_ID])
    Table.open(uri, commit_store=url)  # adopts pylance's version
    with pytest.raises(E.CoordinatorMismatchError):
        Table.open(uri, commit_store=other).append(_rows(20))
