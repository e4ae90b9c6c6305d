"""SQLite store connections are pooled, and a parent whose pool holds a used
connection forks writers and keeps committing itself while they do: every
acknowledged append must be in the table exactly once, versions contiguous.

The parent's idle pooled connections are closed before every fork
(``_close_sqlite_before_fork``), following SQLite's rule that no connection be
open across fork() (its per-process lock bookkeeping is copied into the
child).  This test checks the outcome; it also passes with that hook disabled
(the child drops inherited connections unclosed), so the hook is defence in
depth, not something this test proves necessary."""

from __future__ import annotations

import multiprocessing as mp

import pyarrow as pa

from tessera.catalog import Table

WRITERS, APPENDS = 4, 15


def _rows(w: int, k: int) -> pa.Table:
    return pa.table({"w": pa.array([w], pa.int64()), "k": pa.array([k], pa.int64())})


def _writer(uri: str, store: str, w: int, q) -> None:
    try:
        t = Table.open(uri, commit_store=store)
        for k in range(APPENDS):
            t.append(_rows(w, k))
        q.put((w, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        q.put((w, f"{type(exc).__name__}: {exc}"))


def test_a_parent_with_a_pooled_connection_forks_writers(tmp_path):
    from tessera.stores.sql_store import _LIVE

    uri, store = str(tmp_path / "t"), f"sqlite:///{tmp_path}/commits.db"
    parent = Table.create(uri, _rows(-1, 0), commit_store=store)
    parent.append(_rows(-1, 1))
    sqlite_stores = [s for s in _LIVE if s._backend == "sqlite"]
    assert sqlite_stores and any(s._engine.pool.checkedin() for s in sqlite_stores)  # an idle pooled connection
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(uri, store, w, q)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for k in range(2, 2 + APPENDS):  # the parent commits while its children do
        parent.append(_rows(-1, k))
    results = [q.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    assert sorted(results) == [(w, None) for w in range(WRITERS)], results
    t = Table.open(uri, commit_store=store)
    got = sorted(zip(t.to_arrow().column("w").to_pylist(), t.to_arrow().column("k").to_pylist()))
    want = sorted([(-1, k) for k in range(2 + APPENDS)] + [(w, k) for w in range(WRITERS) for k in range(APPENDS)])
    assert got == want  # every append once
    assert t.version == len(want)  # contiguous: one version per append
    assert [h["version"] for h in t.versions()] == list(range(1, t.version + 1))
