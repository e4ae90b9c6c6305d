"""One sync round per commit on local disk (``stores.local.sync_round``): a
write's new files are fsynced together with its manifest, in parallel, and
every one of them is durable before anything names it.  fsyncs are
observed through ``os.fsync`` (each file's path read from /proc), with a
short pause in each so that fsyncs issued together are seen in flight
together; every call goes through to the real file system."""

from __future__ import annotations

import os
import threading
import time

import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.stores import local

ROWS = pa.table({"i": pa.array(range(200), pa.int64())})


@pytest.fixture
def disk(monkeypatch):
    """Every fsync (the file's path, when it started and ended) and every
    hard link (the manifest named), in order; ``fail`` makes the fsync of a
    path containing it raise."""
    state = {"syncs": [], "links": [], "in_flight": 0, "most": 0, "fail": None}
    lock = threading.Lock()
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = "?"
        with lock:
            state["in_flight"] += 1
            state["most"] = max(state["most"], state["in_flight"])
        try:
            time.sleep(0.02)  # a slow disk: fsyncs issued together overlap
            if state["fail"] and state["fail"] in path:
                raise OSError(5, "injected fsync failure")
            real_fsync(fd)
        finally:
            with lock:
                state["in_flight"] -= 1
                state["syncs"].append((path, time.monotonic()))

    def link(src, dst, *a, **kw):
        state["links"].append((str(dst), time.monotonic()))
        return real_link(src, dst, *a, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    return state


def _synced(state, part: str) -> list[tuple[str, float]]:
    return [(p, t) for p, t in state["syncs"] if part in p]


def test_an_append_of_many_files_syncs_them_with_its_manifest(tmp_path, disk):
    uri = str(tmp_path / "t")
    Table.create(uri, ROWS)
    t = Table.open(uri)
    t.max_rows_per_file = 20
    disk["syncs"].clear(), disk["links"].clear()
    disk["most"] = 0
    t.append(ROWS)
    data = _synced(disk, "/data/")
    assert len(data) == 10  # ten data files, each fsynced once
    (manifest_link,) = [(p, at) for p, at in disk["links"] if p.endswith(".manifest")]
    assert all(at <= manifest_link[1] for _, at in data)  # durable before the manifest is named
    assert len(disk["syncs"]) == 10 + 2  # and the manifest, then _versions/ after the link
    assert disk["most"] >= 11  # the files and the manifest at once: one round, not eleven
    assert disk["syncs"][-1][0].endswith("/_versions")
    assert Table.open(uri).count_rows() == 2 * ROWS.num_rows


def test_an_external_store_commit_syncs_the_round_before_its_reservation(tmp_path, disk, monkeypatch):
    from tessera.commit.handlers.external import ExternalCommitHandler

    uri, store = str(tmp_path / "t"), f"sqlite:///{tmp_path}/commits.db"
    Table.create(uri, ROWS, commit_store=store)
    t = Table.open(uri, commit_store=store)
    t.max_rows_per_file = 50
    seen = []
    real_reserve = ExternalCommitHandler.reserve

    def reserve(self, *a, **kw):
        seen.append(len(_synced(disk, "/data/")))
        return real_reserve(self, *a, **kw)

    monkeypatch.setattr(ExternalCommitHandler, "reserve", reserve)
    disk["syncs"].clear()
    disk["most"] = 0
    t.append(ROWS)
    assert seen == [4]  # the commit point came after every data file was durable
    assert disk["most"] >= 5  # with the staged manifest, at once
    assert Table.open(uri, commit_store=store).count_rows() == 2 * ROWS.num_rows


def test_a_failed_fsync_fails_the_write_and_names_nothing(tmp_path, disk):
    uri = str(tmp_path / "t")
    Table.create(uri, ROWS)
    t = Table.open(uri)
    t.max_rows_per_file = 50
    disk["fail"] = "/data/"
    disk["links"].clear()
    with pytest.raises(OSError, match="injected fsync failure"):
        t.append(ROWS)
    assert not [p for p, _ in disk["links"] if p.endswith(".manifest")]  # no version was made
    disk["fail"] = None
    assert Table.open(uri).version == 1 and Table.open(uri).count_rows() == ROWS.num_rows
    t.append(ROWS)  # the orphans harm nothing; the next write commits
    assert Table.open(uri).count_rows() == 2 * ROWS.num_rows


def test_files_of_a_round_that_commits_nothing_are_durable_when_it_ends(tmp_path, disk):
    store = local.LocalObjectStore(str(tmp_path / "s"))
    with local.sync_round():
        for k in range(3):
            with store.open_output(f"data/f{k}.lance") as f:
                f.write(b"x" * 10)
        assert _synced(disk, "/data/") == []  # waiting for a manifest
    assert len(_synced(disk, "/data/")) == 3
    assert disk["most"] >= 3
    # outside a round a new file is fsynced when closed, as before
    with store.open_output("data/g.lance") as f:
        f.write(b"y")
    assert len(_synced(disk, "/data/")) == 4


def test_a_round_that_fails_leaves_its_files_unsynced_orphans(tmp_path, disk):
    store = local.LocalObjectStore(str(tmp_path / "s"))
    with pytest.raises(RuntimeError):
        with local.sync_round():
            with store.open_output("data/f.lance") as f:
                f.write(b"x")
            raise RuntimeError("the write failed before its commit")
    assert _synced(disk, "/data/") == []


def test_durability_none_in_a_round_syncs_nothing(tmp_path, disk):
    uri = str(tmp_path / "t")
    Table.create(uri, ROWS, durability="none")
    t = Table.open(uri, durability="none")
    t.max_rows_per_file = 20
    disk["syncs"].clear()
    t.append(ROWS)
    assert disk["syncs"] == []


def _append_in_child(uri: str) -> None:
    t = Table.open(uri)
    t.max_rows_per_file = 50
    t.append(ROWS)


def test_a_forked_child_syncs_with_threads_of_its_own(tmp_path):
    """The parent's fsync threads do not exist in a forked child: its first
    round starts a pool of its own instead of waiting on theirs forever."""
    import multiprocessing

    uri = str(tmp_path / "t")
    Table.create(uri, ROWS)
    t = Table.open(uri)
    t.max_rows_per_file = 50
    t.append(ROWS)  # the parent's pool is running
    assert local._sync_pool is not None
    child = multiprocessing.get_context("fork").Process(target=_append_in_child, args=(uri,))
    child.start()
    child.join(60)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive and child.exitcode == 0
    assert Table.open(uri).count_rows() == 3 * ROWS.num_rows
