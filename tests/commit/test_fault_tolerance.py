"""Crashes between commit steps, lost store responses, failed copies and mixed
coordinators: the table stays consistent and nothing acknowledged is lost."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog import errors as E
from tessera.commit import faults
from tessera.stores.errors import AmbiguousStoreError
from tessera.stores.registry import open_manifest_store


@pytest.fixture(params=["sqlite", "redis", "postgres", "mysql", "dynamodb"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/commits.db"
    if request.param == "dynamodb":
        from tessera_test_services import new_dynamodb_store_url

        return new_dynamodb_store_url(request.getfixturevalue("moto_server"))
    url = request.getfixturevalue(
        {"redis": "redis_url", "postgres": "postgres_url", "mysql": "mysql_url"}[request.param]
    )

    def forget_rows():  # the shared databases keep nothing of ours
        from tessera.stores.uri import normalize_table_uri

        ms = open_manifest_store(url)
        for name in ("t", "ext", "nat"):
            ms.delete_table(normalize_table_uri(str(tmp_path / name)))
        ms.close()

    request.addfinalizer(forget_rows)
    return url


def _rows(n, start=0):
    return pa.table({"i": np.arange(start, start + n, dtype=np.int64)})


def _crashing_append(path, url, point):
    faults.set_action(point, lambda: os._exit(17))
    Table.open(path, commit_store=url).append(_rows(1, 1000))


@pytest.mark.parametrize(
    "point,committed",
    [
        (faults.STAGED, False),
        (faults.RESERVED, True),
        (faults.COPIED, True),
        (faults.FLIPPED, True),
    ],
)
def test_crash_between_steps(tmp_path, store_url, point, committed):
    path = str(tmp_path / "t")
    Table.create(path, _rows(5), commit_store=store_url)
    proc = mp.get_context("fork").Process(target=_crashing_append, args=(path, store_url, point))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 17  # really crashed at that point
    t = Table.open(path, commit_store=store_url)
    ids = sorted(t.to_arrow().column("i").to_pylist())
    assert ids == (list(range(5)) + [1000] if committed else list(range(5)))
    assert t.version == (2 if committed else 1)
    staged = [n for n in os.listdir(os.path.join(path, "_versions")) if ".manifest-" in n]
    if point == faults.FLIPPED or not committed:
        # the row is final (or was never reserved): the staged object is an orphan,
        # removed by clean-up once old, never while young
        assert len(staged) == 1
        assert t.cleanup_orphans().removed == []
        old = time.time() - 3 * 86400
        os.utime(os.path.join(path, "_versions", staged[0]), (old, old))
        assert len(t.cleanup_orphans().removed) >= 1
    else:  # the open finished the commit: the final manifest exists, nothing staged
        assert staged == []
    t.append(_rows(1, 2000))  # the next writer commits
    t2 = Table.open(path, commit_store=store_url)
    assert t2.version == t.version
    assert sorted(t2.to_arrow().column("i").to_pylist()) == ids + [2000]


class _LossyStore:
    """Applies the call, then reports an error: a lost response."""

    def __init__(self, real, method: str, times: int) -> None:
        self._real, self._method, self._left = real, method, times
        self.kind = real.kind

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name != self._method:
            return attr

        def lossy(*a, **kw):
            result = attr(*a, **kw)
            if self._left > 0:
                self._left -= 1
                raise AmbiguousStoreError(f"injected lost response on {name}")
            return result

        return lossy


@pytest.mark.parametrize("method", ["reserve", "flip"])
@pytest.mark.parametrize("times", [1, 3])
def test_lost_responses(tmp_path, store_url, method, times):
    path = str(tmp_path / "t")
    Table.create(path, _rows(5), commit_store=store_url)
    lossy = _LossyStore(open_manifest_store(store_url), method, times)
    t = Table.open(path, commit_store=lossy)
    t.append(_rows(1, 1000))  # reported as success
    assert t.version == 2
    t2 = Table.open(path, commit_store=store_url)
    assert t2.version == 2
    assert sorted(t2.to_arrow().column("i").to_pylist()) == list(range(5)) + [1000]


def test_failed_publish_after_reserve_is_unknown_then_finished_by_next_open(tmp_path, store_url, monkeypatch):
    """The version is decided at the reservation, but a writer acknowledges only
    once its manifest is at the final name: a publish that keeps failing ends
    in CommitOutcomeUnknownError (after the read-back window), the staged
    manifest is kept, and the next open finishes the commit."""
    from tessera.commit.retry import RetryPolicy
    from tessera.stores.local import LocalObjectStore

    path = str(tmp_path / "t")
    Table.create(path, _rows(5), commit_store=store_url)
    t = Table.open(path, commit_store=store_url, retry=RetryPolicy(read_back_seconds=0.3))
    real_put, real_link = LocalObjectStore.put_if_not_exists, LocalObjectStore.link_if_not_exists

    def final(p):
        return p.startswith("_versions/") and p.endswith(".manifest")

    def failing_put(self, p, data):
        if final(p):
            raise OSError("injected: the final manifest cannot be written")
        return real_put(self, p, data)

    def failing_link(self, src, dst):  # the staged file linked to the final name: the usual route
        if final(dst):
            raise OSError("injected: the final manifest cannot be linked")
        return real_link(self, src, dst)

    monkeypatch.setattr(LocalObjectStore, "put_if_not_exists", failing_put)
    monkeypatch.setattr(LocalObjectStore, "link_if_not_exists", failing_link)
    with pytest.raises(E.CommitOutcomeUnknownError, match="kept"):
        t.append(_rows(1, 1000))
    staged = [n for n in os.listdir(os.path.join(path, "_versions")) if ".manifest-" in n]
    assert len(staged) == 1  # kept for the repair
    monkeypatch.setattr(LocalObjectStore, "put_if_not_exists", real_put)
    monkeypatch.setattr(LocalObjectStore, "link_if_not_exists", real_link)
    t2 = Table.open(path, commit_store=store_url)
    assert t2.version == 2 and sorted(t2.to_arrow().column("i").to_pylist()) == list(range(5)) + [1000]
    assert not [n for n in os.listdir(os.path.join(path, "_versions")) if ".manifest-" in n]


def test_mixed_coordinators_refused(tmp_path, store_url, monkeypatch):
    ext, nat = str(tmp_path / "ext"), str(tmp_path / "nat")
    Table.create(ext, _rows(5), commit_store=store_url)
    Table.create(nat, _rows(5))
    # a by-path open that may not follow the recorded store (tests/catalog/test_open_by_path_store.py: it may)
    monkeypatch.setenv("TESSERA_RECORDED_STORES", "false")
    monkeypatch.setenv("TESSERA_CONFIG", str(tmp_path / "none.yaml"))
    (tmp_path / "none.yaml").write_text("{}")
    monkeypatch.delenv("TESSERA_COMMIT_STORES", raising=False)
    plain = Table.open(ext)  # reading without the store is allowed...
    with pytest.raises(E.CoordinatorMismatchError):
        plain.append(_rows(1, 100))  # ...writing is not
    with pytest.raises(E.CoordinatorMismatchError):
        Table.open(nat, commit_store=store_url)
    assert Table.open(ext, commit_store=store_url).count_rows() == 5
    assert Table.open(nat).count_rows() == 5


def test_unrecoverable_row_is_reported_and_repairable(tmp_path, store_url):
    path = str(tmp_path / "t")
    Table.create(path, _rows(5), commit_store=store_url)
    faults.set_action(faults.RESERVED, lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        with pytest.raises(KeyboardInterrupt):
            Table.open(path, commit_store=store_url).append(_rows(1, 1000))
    finally:
        faults.clear()
    for n in os.listdir(os.path.join(path, "_versions")):
        if ".manifest-" in n:
            os.unlink(os.path.join(path, "_versions", n))  # the staged manifest is lost
    with pytest.raises(E.UnrecoverableCommitError, match="version 2"):
        Table.open(path, commit_store=store_url)
