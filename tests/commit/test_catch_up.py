"""A writer far behind catches up in a constant number of round trips (issue 28).

A writer holding version 1 appends after 1,000 other versions were
committed: its rebase reads what every one of them did (their transactions,
carried in their manifests) and must pay the coordinator a constant number
of requests, not some per version it missed, or it never catches up while
others keep committing.  Counted by wrapping the manifest store's and the
object store's methods; every wrapped call goes through to the real store
(Redis, SQLite, local disk).
"""

from __future__ import annotations

import collections

import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.stores.local import LocalObjectStore
from tessera.stores.redis_store import RedisManifestStore
from tessera.stores.sql_store import SqlManifestStore

BEHIND = 1_000
_STORE_METHODS = ("reserve", "flip", "adopt", "get", "latest", "versions_after", "delete_table")


def _row(i: int) -> pa.Table:
    return pa.table({"i": pa.array([i], pa.int64())})


@pytest.fixture(params=["native", "redis", "sqlite"])
def commit_store(request, tmp_path):
    if request.param == "native":
        return None
    if request.param == "redis":
        return request.getfixturevalue("redis_url")
    return f"sqlite:///{tmp_path / 'versions.db'}"


@pytest.fixture
def counted(monkeypatch):
    """Counter of (kind, name): manifest-store requests and object-store calls, while ``on`` is set."""
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    state = {"on": False}

    def wrap(cls: type, name: str, kind: str, label=lambda args: "") -> None:
        real = getattr(cls, name)

        def wrapped(self, *args, **kwargs):
            if state["on"]:
                seen[(kind, name + label(args))] += 1
            return real(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapped)

    for cls in (RedisManifestStore, SqlManifestStore):
        for name in _STORE_METHODS:
            wrap(cls, name, "coordinator")

    def path_kind(args) -> str:
        path = args[0] if args and isinstance(args[0], str) else ""
        if path.endswith(".manifest"):
            return ":manifest"
        return ":" + path.split("/", 1)[0] if "/" in path else ":" + path

    for name in ("read", "read_tail", "exists", "list", "size"):
        wrap(LocalObjectStore, name, "object", path_kind)
    return seen, state


def test_a_writer_1000_versions_behind_catches_up_in_constant_round_trips(tmp_path, commit_store, counted):
    seen, state = counted
    uri = str(tmp_path / "t")
    kw = {"commit_store": commit_store, "durability": "none"}
    Table.create(uri, _row(0), **kw)
    behind = Table.open(uri, **kw)
    ahead = Table.open(uri, **kw)
    for i in range(BEHIND):  # compatible with an append: property changes, no data files
        ahead.set_properties({"step": str(i)})
    assert ahead.version == BEHIND + 1

    state["on"] = True
    behind.append(_row(1))
    state["on"] = False

    assert behind.version == BEHIND + 2
    assert sorted(behind.to_arrow().column("i").to_pylist()) == [0, 1]
    assert behind.properties["step"] == str(BEHIND - 1)  # rebuilt on the newest version
    # every version missed is read once (its manifest holds its transaction), in one go
    assert seen[("object", "read:manifest")] == BEHIND, seen
    coordinator = {k: v for k, v in seen.items() if k[0] == "coordinator"}
    if commit_store is None:
        assert coordinator == {}
        assert seen[("object", "list:_versions")] <= 2, seen
    else:
        # one query for every version missed; a handful of requests for the commit itself
        assert coordinator[("coordinator", "versions_after")] == 1, coordinator
        assert sum(coordinator.values()) <= 6, coordinator
        assert seen[("object", "list:_versions")] == 0, seen


def test_the_catch_up_reads_of_a_remote_store_run_together(tmp_path, monkeypatch):
    """On an object store (``remote``), the manifests a rebase needs are read
    concurrently: the wait is about one request's latency per 16 versions
    (here 48 reads of 0.1 s each take 3 x 0.1 s, not 4.8 s)."""
    import threading
    import time

    from tessera.commit import store as tstore

    class Slow(LocalObjectStore):
        remote = True

        def read(self, path: str) -> bytes:
            with lock:
                active[0] += 1
                most[0] = max(most[0], active[0])
            time.sleep(0.1)
            try:
                return super().read(path)
            finally:
                with lock:
                    active[0] -= 1

    lock = threading.Lock()
    active, most = [0], [0]
    store = Slow(str(tmp_path))
    names = [f"f{i}" for i in range(48)]
    for n in names:
        store.put(n, n.encode())
    started = time.monotonic()
    assert tstore.read_all(store, names) == [n.encode() for n in names]
    assert most[0] == tstore.CONCURRENT_READS
    assert time.monotonic() - started < 48 * 0.1 / 2  # one after another: 4.8 s
