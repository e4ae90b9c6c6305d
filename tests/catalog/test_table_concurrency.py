"""Concurrent writers on one local table: every commit lands exactly once."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pyarrow as pa

from tessera.catalog import Table


def _appender(path: str, writer: int, n: int) -> None:
    t = Table.open(path)
    for k in range(n):
        t.append(pa.table({"writer": pa.array([writer] * 3, pa.int32()), "k": pa.array([k] * 3, pa.int32())}))


def test_two_processes_append_fifty_times(tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, pa.schema([("writer", pa.int32()), ("k", pa.int32())]))
    ctx = mp.get_context("fork")  # the worker lives in this test module
    procs = [ctx.Process(target=_appender, args=(path, w, 50)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    t = Table.open(path)
    assert t.version == 1 + 100
    rows = t.to_arrow()
    assert rows.num_rows == 300
    pairs = set(zip(rows.column("writer").to_pylist(), rows.column("k").to_pylist()))
    assert pairs == {(w, k) for w in (1, 2) for k in range(50)}
    # every version is one append of 3 rows
    hist = t.versions()
    assert [h["rows_added"] for h in hist[1:]] == [3] * 100
    frag_ids = [f.id for f in t.fragments]
    assert len(set(frag_ids)) == len(frag_ids) == 100


def test_concurrent_delete_and_append_rebase(tmp_path):
    path = str(tmp_path / "t")
    a = Table.create(path, pa.table({"i": np.arange(10)}))
    b = Table.open(path)
    a.append(pa.table({"i": np.arange(10, 20)}))
    b.delete("i < 5")  # built on version 1, rebased over the append
    t = Table.open(path)
    assert t.version == 3
    assert sorted(t.to_arrow().column("i").to_pylist()) == list(range(5, 20))


def test_conflicting_deletes_are_rerun(tmp_path):
    path = str(tmp_path / "t")
    a = Table.create(path, pa.table({"i": np.arange(10)}))
    b = Table.open(path)
    a.delete("i < 3")
    b.delete("i > 7")  # conflicts with a's delete of the same fragment: re-run on the latest
    t = Table.open(path)
    assert sorted(t.to_arrow().column("i").to_pylist()) == list(range(3, 8))
