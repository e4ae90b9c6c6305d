"""Version clean-up deletes old versions and only the files no kept version needs."""

from __future__ import annotations

import datetime as dt
import os
import time

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog.errors import InvalidArgumentError, VersionNotFoundError
from tessera.commit import store as tstore
from tessera.commit.cleanup import referenced_paths


def _data(a: int, b: int) -> pa.Table:
    i = np.arange(a, b, dtype=np.int64)
    return pa.table({"i": i, "s": pa.array([f"s{x}" for x in i])})


def _files(path: str) -> set[str]:
    out = set()
    for d, _, files in os.walk(path):
        for f in files:
            out.add(os.path.relpath(os.path.join(d, f), path))
    return out


def _history(path: str, **kw) -> tuple[Table, dict[int, pa.Table], dt.datetime]:
    """Seven versions; returns the table, every version's rows, and a cut-off
    time between version 4 and version 5."""
    t = Table.create(path, _data(0, 300), max_rows_per_file=100, **kw)
    t.append(_data(300, 400))
    t.delete("i % 10 = 1")
    t.update({"s": "'u'"}, where="i < 50")
    time.sleep(0.05)
    cut = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    t.delete("i >= 350")
    t.compact(1000)  # versions 6 (reserve) and 7 (rewrite)
    rows = {v: Table.open(path, version=v).to_arrow().sort_by("i") for v in range(1, t.version + 1)}
    return t, rows, cut


def _check_kept(path: str, rows: dict[int, pa.Table], kept: set[int], lance=None) -> None:
    for v in sorted(rows):
        if v in kept:
            got = Table.open(path, version=v)
            assert got.to_arrow().sort_by("i").equals(rows[v])
            assert got.count_rows() == rows[v].num_rows
            if lance is not None:
                assert lance.dataset(path, version=v).to_table().sort_by("i").num_rows == rows[v].num_rows
        else:
            with pytest.raises(VersionNotFoundError):
                Table.open(path, version=v)


def test_cleanup_keeps_latest_recent_and_tagged(lance, tmp_path):
    path = str(tmp_path / "t")
    t, rows, cut = _history(path, stable_row_ids=True)
    t.tags.create("keep-me", 2)
    everything = [tstore.load_manifest(t.store, v) for v in rows]
    before = _files(path)
    report = t.cleanup(older_than=cut, orphan_age=None)
    assert report.removed_versions == [1, 3, 4] and report.kept_versions == [2, 5, 6, 7]
    assert report.orphaned_tags == [] and t.tags.get("keep-me")["version"] == 2
    kept = {2, 5, 6, 7}
    _check_kept(path, rows, kept, lance)
    # exactly the files only removed versions referenced are gone
    need = referenced_paths(t.store, [m for m in everything if m.version in kept])
    had = referenced_paths(t.store, everything)
    gone = before - _files(path)
    assert sorted(tstore.list_versions(t.store)[0]) == sorted(kept)
    assert {g for g in gone if not g.startswith("_versions/")} == (had - need)
    assert set(report.removed_files) == had - need and need <= _files(path)
    assert len([g for g in gone if g.startswith("_versions/")]) == 3
    # the table still works: reads, writes, pylance
    t = Table.open(path)
    t.append(_data(1000, 1010))
    assert lance.dataset(path).count_rows() == t.count_rows() == rows[7].num_rows + 10
    assert [h["version"] for h in t.versions()] == [2, 5, 6, 7, 8]
    lance.dataset(path).validate()


def test_latest_is_kept_even_when_old(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 10))
    t.append(_data(10, 20))
    report = t.cleanup(older_than=dt.timedelta(0), orphan_age=None)
    assert report.removed_versions == [1] and report.kept_versions == [2]
    assert Table.open(path).count_rows() == 20
    with pytest.raises(InvalidArgumentError):
        t.cleanup(older_than=-dt.timedelta(seconds=1))
    with pytest.raises(InvalidArgumentError):
        t.cleanup(older_than=3)


def test_untagged_cleanup_drops_tags_of_removed_versions(tmp_path):
    path = str(tmp_path / "t")
    t, rows, cut = _history(path)
    t.tags.create("old", 2)
    t.tags.create("new", 6)
    before = _files(path)
    dry = t.cleanup(older_than=cut, keep_tagged=False, dry_run=True)
    assert dry.removed_versions == [1, 2, 3, 4] and dry.orphaned_tags == ["old"] and dry.removed_files
    assert _files(path) == before and Table.open(path, version=1).count_rows() == 300
    report = t.cleanup(older_than=cut, keep_tagged=False)
    assert report.removed_versions == [1, 2, 3, 4] and report.orphaned_tags == ["old"]
    assert list(t.tags.list()) == ["new"]
    _check_kept(path, rows, {5, 6, 7})


def test_orphans_of_failed_commits_go_too(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 100))
    t.append(_data(100, 200))
    orphan = os.path.join(path, "data", "0123456789abcdef.lance")
    with open(orphan, "wb") as f:
        f.write(b"x" * 100)
    young = t.cleanup(older_than=dt.timedelta(days=1), orphan_age=dt.timedelta(hours=1))
    assert os.path.exists(orphan) and young.orphans.kept_young == 1 and young.removed_versions == []
    old = time.time() - 7200
    os.utime(orphan, (old, old))
    report = t.cleanup(older_than=dt.timedelta(days=1), orphan_age=dt.timedelta(hours=1))
    assert not os.path.exists(orphan) and report.orphans.removed == ["data/0123456789abcdef.lance"]
    assert Table.open(path, version=1).count_rows() == 100 and Table.open(path).count_rows() == 200


def test_external_row_id_files_follow_their_versions(tmp_path):
    path = str(tmp_path / "t")
    data = _data(0, 3000).append_column("k", pa.array(np.arange(3000) * 7 % 3000))
    t = Table.create(path, data, stable_row_ids=True, max_rows_per_file=1000)
    t.compact(3000, sort_by=[("i", "descending")], external_sequences_over=64)
    first = t.fragments[0].external_row_ids.path
    t.compact(3000, sort_by="k", external_sequences_over=64)
    second = t.fragments[0].external_row_ids.path
    assert first and second and first != second and os.path.exists(os.path.join(path, first))
    report = t.cleanup(older_than=dt.timedelta(0), orphan_age=None)
    assert report.kept_versions == [t.version]  # the second compaction and its zone maps (one version)
    assert first in report.removed_files and not os.path.exists(os.path.join(path, first))
    assert os.path.exists(os.path.join(path, second))
    t = Table.open(path)
    assert t.take_rows([0, 2999], columns=["i"]).column("i").to_pylist() == [0, 2999]


def test_external_store_keeps_its_latest(tmp_path):
    path = str(tmp_path / "t")
    ms = f"sqlite:///{tmp_path}/commits.db"  # a real (embedded) manifest store
    t = Table.create(path, _data(0, 10), commit_store=ms)
    t.append(_data(10, 20))
    t.append(_data(20, 30))
    assert t.manifest.config["tessera.commit.coordinator"] == "sql"
    # a commit the store has reserved but nobody finished yet: the latest, staged only
    t2 = Table.open(path, commit_store=ms)
    from tessera.commit import faults

    class Crash(Exception):
        pass

    def crash():
        raise Crash()

    faults.set_action(faults.RESERVED, crash)
    try:
        with pytest.raises(Crash):
            t2.append(_data(30, 40))
    finally:
        faults.clear()
    row = t2._handler.ms.latest(t2._handler.table_key)
    assert row.version == 4 and not row.is_final
    report = t.cleanup(older_than=dt.timedelta(0), orphan_age=dt.timedelta(0))
    assert report.removed_versions[:2] == [1, 2] and 4 in report.kept_versions
    t = Table.open(path, commit_store=ms)
    assert t.version == 4 and t.count_rows() == 40
    t.append(_data(40, 50))
    assert Table.open(path, commit_store=ms).count_rows() == 50


def test_external_store_history_after_cleanup(tmp_path):
    ms = f"sqlite:///{tmp_path}/commits.db"  # a real (embedded) manifest store
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 10), commit_store=ms)
    t.append(_data(10, 20))
    t.cleanup(older_than=dt.timedelta(0))
    assert [h["version"] for h in Table.open(path, commit_store=ms).versions()] == [2]
    with pytest.raises(VersionNotFoundError):
        Table.open(path, version=1, commit_store=ms)


def test_cleanup_tells_its_progress(tmp_path):
    path = str(tmp_path / "t")
    t, rows, cut = _history(path)
    calls: list[tuple[str, int, int]] = []
    report = t.cleanup(older_than=cut, orphan_age=None, progress=lambda *a: calls.append(a))
    phases = [p for p, _, _ in calls]
    assert phases[0] == "reading versions" and "deleting manifests" in phases and "deleting files" in phases
    for phase in set(phases):
        mine = [(d, n) for p, d, n in calls if p == phase]
        assert [d for d, _ in mine] == list(range(len(mine)))  # 0, 1, 2, ... in order
        assert mine[-1][0] == mine[-1][1]  # ends at its total
    assert ("reading versions", 7, 7) in calls
    assert ("deleting manifests", len(report.removed_versions), len(report.removed_versions)) in calls
    assert ("deleting files", len(report.removed_files), len(report.removed_files)) in calls


@pytest.mark.parametrize("store", ["native", "sqlite"])
def test_a_cleanup_beside_another_never_fails(tmp_path, store):
    """A second clean-up runs in the middle of the first one's reading of
    versions (the interleaving that ended in VersionNotFoundError): both
    finish, together they remove what either would, and the kept versions read."""
    path = str(tmp_path / "t")
    kw = {} if store == "native" else {"commit_store": f"sqlite:///{tmp_path}/commits.db"}
    t, rows, cut = _history(path, **kw)
    others: list = []

    def midway(phase: str, done: int, total: int) -> None:
        if phase == "reading versions" and done == 1 and not others:
            others.append(Table.open(path, **kw).cleanup(older_than=cut, orphan_age=dt.timedelta(0)))

    report = Table.open(path, **kw).cleanup(older_than=cut, orphan_age=dt.timedelta(0), progress=midway)
    assert others and others[0].removed_versions == [1, 2, 3, 4]
    assert set(report.removed_versions) <= {1}  # the one it read before the other removed the rest
    _check_kept(path, rows, {5, 6, 7})
    orphans = Table.open(path, **kw)
    orphans.cleanup_orphans(older_than=dt.timedelta(0))
    _check_kept(path, rows, {5, 6, 7})
