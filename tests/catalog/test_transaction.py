"""Multi-table transactions: all or nothing, and readers see both or neither."""

from __future__ import annotations

import threading
import uuid

import pyarrow as pa
import pytest

from tessera.catalog import errors as E
from tessera.catalog.catalog import connect


def _rows(tag: int, n: int = 2) -> pa.Table:
    return pa.table({"tag": pa.array([tag] * n, pa.int64())})


@pytest.fixture(params=["sqlite", "postgres"])
def cat(request, tmp_path):
    if request.param == "sqlite":
        c = connect(warehouse=str(tmp_path / "wh"))
    else:  # a shared database: a namespace of our own
        c = connect(request.getfixturevalue("postgres_url"), warehouse=str(tmp_path / "wh"))
    ns = f"ns_{uuid.uuid4().hex[:10]}"
    c.create_namespace(ns)
    c.create_table(f"{ns}.a", _rows(0), commit_store="catalog")
    c.create_table(f"{ns}.b", _rows(0), commit_store="catalog")
    c.ns = ns
    yield c
    c.close()


def test_commit_all(cat):
    with cat.transaction() as tx:
        a, b = tx.load_table(f"{cat.ns}.a"), tx.load_table(f"{cat.ns}.b")
        a.append(_rows(1))
        a.delete("tag = 0")
        b.append(_rows(1))
        # nothing visible yet
        assert cat.load_table(f"{cat.ns}.a").count_rows() == 2 and cat.load_table(f"{cat.ns}.b").count_rows() == 2
    assert sorted(cat.load_table(f"{cat.ns}.a").to_arrow().column("tag").to_pylist()) == [1, 1]
    assert cat.load_table(f"{cat.ns}.a").version == 3 and cat.load_table(f"{cat.ns}.b").version == 2
    assert cat.load_table(f"{cat.ns}.b").count_rows() == 4


def test_exception_commits_nothing(cat):
    with pytest.raises(RuntimeError):
        with cat.transaction() as tx:
            tx.load_table(f"{cat.ns}.a").append(_rows(1))
            tx.load_table(f"{cat.ns}.b").append(_rows(1))
            raise RuntimeError("boom")
    assert cat.load_table(f"{cat.ns}.a").version == 1 and cat.load_table(f"{cat.ns}.b").version == 1


def test_conflict_commits_nothing(cat):
    with pytest.raises(E.CommitConflictError):
        with cat.transaction() as tx:
            tx.load_table(f"{cat.ns}.a").append(_rows(1))
            tx.load_table(f"{cat.ns}.b").append(_rows(1))
            cat.load_table(f"{cat.ns}.b").append(_rows(9))  # a concurrent writer wins b's next version
    assert cat.load_table(f"{cat.ns}.a").version == 1  # a's staged version was not committed either
    assert cat.load_table(f"{cat.ns}.a").count_rows() == 2
    assert sorted(cat.load_table(f"{cat.ns}.b").to_arrow().column("tag").to_pylist()) == [0, 0, 9, 9]


def test_refuses_tables_not_on_the_catalog_store(cat):
    cat.create_table(f"{cat.ns}.native", _rows(0), commit_store="native")
    with pytest.raises(E.TransactionError, match="commit_store='catalog'"):
        with cat.transaction() as tx:
            tx.load_table(f"{cat.ns}.a").append(_rows(1))
            tx.load_table(f"{cat.ns}.native")
    assert cat.load_table(f"{cat.ns}.a").version == 1


def test_concurrent_writers_readers_see_both_or_neither(cat):
    """4 writers commit to both tables in transactions; readers that load both
    tables in one transaction snapshot always see equal row counts."""
    stop = threading.Event()
    errors: list[str] = []

    def writer(w: int) -> None:
        for k in range(5):
            for _ in range(50):
                try:
                    with cat.transaction() as tx:
                        tx.load_table(f"{cat.ns}.a").append(_rows(w * 100 + k, 1))
                        tx.load_table(f"{cat.ns}.b").append(_rows(w * 100 + k, 1))
                    break
                except E.CommitConflictError:
                    continue
            else:
                errors.append(f"writer {w} never committed")

    def reader() -> None:
        while not stop.is_set():
            with cat.transaction() as tx:
                na = tx.load_table(f"{cat.ns}.a").count_rows()
                nb = tx.load_table(f"{cat.ns}.b").count_rows()
            if na != nb:
                errors.append(f"half a transaction seen: a={na} b={nb}")

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join(120)
    stop.set()
    for t in readers:
        t.join(30)
    assert errors == []
    a, b = cat.load_table(f"{cat.ns}.a"), cat.load_table(f"{cat.ns}.b")
    assert a.count_rows() == b.count_rows() == 2 + 20
    assert sorted(a.to_arrow().column("tag").to_pylist()) == sorted(b.to_arrow().column("tag").to_pylist())
