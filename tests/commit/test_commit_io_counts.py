"""The durable steps of one small append on local disk, pinned: which object-store
operations it makes and how many fsyncs, so that a change cannot silently add
one (issue 17).  Counted by wrapping the store's methods and ``os.fsync``;
every wrapped call goes through to the real file system.

Writers on one machine take an advisory lock (``flock``, no fsync) around the
commit and check whether the next version was taken while they waited.

What one append must make durable before it is acknowledged, and nothing more:
  data file         created in place under its unique name, fsynced   (1)  } one round,
  manifest          staged and fsynced, hard-linked to its final name (1)  } in parallel
                    (it carries the transaction inline: the authoritative copy)
  _versions/        fsynced after the link (the name is durable)      (1)
The transaction file (``_transactions/``, for Lance 13 cores; pylance 14 writes
it too) is created before the manifest without an fsync: the manifest's inline
copy rebuilds it (``Table.repair()``) if a power loss empties it.  The hint file
is rewritten without an fsync (advisory: pylance and Tessera decide the latest
version by listing ``_versions/``).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.stores.local import LocalObjectStore

_METHODS = (
    "read",
    "open_reader",
    "read_tail",
    "size",
    "exists",
    "list",
    "walk",
    "put",
    "put_if_not_exists",
    "put_advisory",
    "put_unsynced",
    "link_if_not_exists",
    "open_output",
    "copy",
    "copy_if_not_exists",
    "delete",
    "advisory_lock",
)


@pytest.fixture
def counted(monkeypatch):
    """(calls, fsyncs): the store operations (name, kind of path) and fsyncs made."""
    calls: list[tuple[str, str]] = []
    fsyncs: list[int] = []

    def kind(path: str) -> str:
        if path.startswith("data/"):
            return "data"
        if path.startswith("_transactions/"):
            return "txn"
        if path.endswith("latest_version_hint.json"):
            return "hint"
        if ".manifest-" in path:
            return "staged"
        if path.endswith(".manifest"):
            return "manifest"
        return path

    for name in _METHODS:
        real = getattr(LocalObjectStore, name)

        def wrapped(self, *args, _real=real, _name=name, **kwargs):
            calls.append((_name, "->".join(kind(a) for a in args if isinstance(a, str))))
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(LocalObjectStore, name, wrapped)
    real_fsync = os.fsync

    def fsync(fd):
        fsyncs.append(fd)
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls, fsyncs


ROWS = pa.table({"i": pa.array(range(100), pa.int64()), "s": [f"row-{i}" for i in range(100)]})

# the commit itself, the same for a held handle and a fresh one
NATIVE_COMMIT = [
    ("open_output", "data"),
    ("advisory_lock", "_versions/.tessera-commit.lock"),  # orders this machine's writers (no fsync)
    ("exists", "manifest"),  # the next version, taken while we waited? (rebase before building)
    ("put_unsynced", "txn"),  # the transaction file, before the manifest can be seen (no fsync)
    ("read_tail", "manifest"),  # the base manifest's end, re-read: a table dropped and recreated is refused
    ("put_if_not_exists", "manifest"),  # staged + fsync, link, directory fsync
    ("put_advisory", "hint"),
]
EXTERNAL_COMMIT = [
    ("open_output", "data"),
    ("advisory_lock", "_versions/.tessera-commit.lock"),
    ("exists", "manifest"),
    ("put_unsynced", "txn"),
    ("put", "staged"),  # the staged manifest the store's row points at
    ("link_if_not_exists", "staged->manifest"),  # the final name, create-only, without a second write
    ("delete", "staged"),
    ("put_advisory", "hint"),
]


def test_a_native_append_makes_three_fsyncs(tmp_path, counted):
    calls, fsyncs = counted
    uri = str(tmp_path / "t")
    Table.create(uri, ROWS)
    for _ in range(3):
        Table.open(uri).append(ROWS)
    held = Table.open(uri)
    calls.clear(), fsyncs.clear()
    held.append(ROWS)
    assert calls == NATIVE_COMMIT
    assert len(fsyncs) == 3
    calls.clear(), fsyncs.clear()
    Table.open(uri).append(ROWS)  # by path: one listing and one manifest read more
    assert calls == [("list", "_versions"), ("read", "manifest"), *NATIVE_COMMIT]
    assert len(fsyncs) == 3
    assert Table.open(uri).count_rows() == 6 * ROWS.num_rows


def test_an_external_store_append_makes_three_fsyncs(tmp_path, counted):
    calls, fsyncs = counted
    uri, store = str(tmp_path / "t"), f"sqlite:///{tmp_path}/commits.db"
    Table.create(uri, ROWS, commit_store=store)
    Table.open(uri, commit_store=store).append(ROWS)
    held = Table.open(uri, commit_store=store)
    calls.clear(), fsyncs.clear()
    held.append(ROWS)
    assert calls == EXTERNAL_COMMIT
    assert len(fsyncs) == 3  # data, staged manifest, _versions/ after the link
    calls.clear(), fsyncs.clear()
    Table.open(uri, commit_store=store).append(ROWS)
    # by path: the store's latest row names the manifest; the version after it is
    # looked for first (a writer outside the store, e.g. pylance, is adopted)
    assert calls == [("read", "manifest"), ("read", "manifest"), *EXTERNAL_COMMIT]
    assert len(fsyncs) == 3
    t = Table.open(uri, commit_store=store)
    assert t.count_rows() == 4 * ROWS.num_rows
    assert not [n for n in os.listdir(tmp_path / "t" / "_versions") if ".manifest-" in n]  # no staged file left


def test_the_final_manifest_is_the_staged_file_linked(tmp_path):
    """The link gives the final name the staged bytes: the same file, complete."""
    uri, store = str(tmp_path / "t"), f"sqlite:///{tmp_path}/commits.db"
    t = Table.create(uri, ROWS, commit_store=store)
    t.append(ROWS)
    versions = tmp_path / "t" / "_versions"
    finals = sorted(n for n in os.listdir(versions) if n.endswith(".manifest"))
    assert len(finals) == 2
    assert os.stat(versions / finals[0]).st_nlink == 1  # the staged name is gone
    assert Table.open(uri, commit_store=store, version=2).count_rows() == 2 * ROWS.num_rows


def test_the_hint_is_rewritten_in_place_and_says_the_latest(tmp_path):
    store = LocalObjectStore(str(tmp_path))
    store.put_advisory("_versions/latest_version_hint.json", b'{"version":100}')
    store.put_advisory("_versions/latest_version_hint.json", b'{"version":9}')  # shorter: no stale tail
    assert store.read("_versions/latest_version_hint.json") == b'{"version":9}'
    uri = str(tmp_path / "t")
    t = Table.create(uri, ROWS)
    for _ in range(10):
        t.append(ROWS)
    with open(os.path.join(uri, "_versions", "latest_version_hint.json"), "rb") as f:
        assert f.read() == b'{"version":11}'


def test_a_rebase_lists_versions_once_and_reads_each_new_one_once(tmp_path, counted):
    """A writer whose base is k versions behind checks the k transactions: one
    listing of ``_versions/`` (the versions after its base), then each new
    manifest read by its name, not one listing per version."""
    calls, _ = counted
    uri = str(tmp_path / "t")
    Table.create(uri, ROWS)
    behind = Table.open(uri)
    other = Table.open(uri)
    for _ in range(5):
        other.append(ROWS)
    calls.clear()
    behind.append(ROWS)
    reads = [c for c in calls if c[0] in ("list", "read")]
    # the next version exists: the rebase comes first, no manifest is built to lose
    assert reads == [("list", "_versions")] + [("read", "manifest")] * 5
    assert [c[0] for c in calls].count("put_if_not_exists") == 1
    assert Table.open(uri).count_rows() == 7 * ROWS.num_rows


def test_a_lost_create_reads_the_winners_manifest_once(tmp_path, counted, monkeypatch):
    """Racing a writer outside the commit lock (here: no lock), a writer one
    version behind loses the create, reads back whose manifest won, and its
    rebase uses those bytes: the winner's manifest is read once."""
    import contextlib

    from tessera.commit.handlers import native as handlers

    monkeypatch.setattr(handlers, "local_commit_lock", lambda store, deadline: contextlib.nullcontext(False))
    calls, _ = counted
    uri = str(tmp_path / "t")
    Table.create(uri, ROWS)
    behind, other = Table.open(uri), Table.open(uri)
    other.append(ROWS)
    calls.clear()
    behind.append(ROWS)
    # without the commit lock, a lost try looks for a commit intent (commit/intent.py) before the next
    assert [c for c in calls if c[0] in ("list", "read")] == [
        ("read", "manifest"),
        ("list", "_versions"),
        ("read", "_versions/.tessera-commit-intent"),
    ]
    assert [c[0] for c in calls].count("put_if_not_exists") == 2  # lost, then won
    assert Table.open(uri).count_rows() == 3 * ROWS.num_rows


def test_durability_none_makes_no_fsync_and_the_same_store_calls(tmp_path, counted):
    """``durability="none"`` (pylance's behaviour): the same commit, no fsync;
    per table, per block of calls, and back to three when set to "sync"."""
    import tessera

    calls, fsyncs = counted
    uri = str(tmp_path / "t")
    Table.create(uri, ROWS, durability="none")
    Table.open(uri).append(ROWS)
    held = Table.open(uri, durability="none")
    assert held.durability == "none"
    calls.clear(), fsyncs.clear()
    held.append(ROWS)
    assert calls == NATIVE_COMMIT and fsyncs == []
    held.durability = "sync"
    with tessera.durability("none"):
        held.append(ROWS)
    assert fsyncs == []
    held.append(ROWS)
    assert len(fsyncs) == 3
    with pytest.raises(tessera.errors.TesseraError, match="durability must be one of"):
        held.durability = "fast"
    assert Table.open(uri).count_rows() == 5 * ROWS.num_rows


def test_durability_none_on_an_external_store(tmp_path, counted):
    calls, fsyncs = counted
    uri, store = str(tmp_path / "t"), f"sqlite:///{tmp_path}/commits.db"
    Table.create(uri, ROWS, commit_store=store)
    held = Table.open(uri, commit_store=store, durability="none")
    calls.clear(), fsyncs.clear()
    held.append(ROWS)
    assert calls == EXTERNAL_COMMIT
    assert fsyncs == []  # (SQLite's own syncs are its business: it runs in-process, os.fsync is not used)
