"""The warning "version N was committed by a writer outside the manifest store"
is for real foreign commits only (pylance writing by URI), once per version.

A Tessera writer reserves its row before it publishes its final manifest, so a
reader that read the latest row just before that reservation and finds the
published manifest next is looking at a Tessera commit, not a foreign one
(issue 25: 880 such lines from three writers on one Redis store)."""

from __future__ import annotations

import logging
import threading

import pyarrow as pa
import pytest

from tessera.catalog import Table

lance = pytest.importorskip("lance")

MESSAGE = "committed by a writer outside the manifest store"


def _row(i: int) -> pa.Table:
    return pa.table({"i": pa.array([i], pa.int64())})


def _foreign(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if MESSAGE in r.getMessage()]


def test_tessera_writers_sharing_a_store_are_not_foreign_but_pylance_is(tmp_path, redis_url, caplog):
    uri = str(tmp_path / "t")
    Table.create(uri, _row(-1), commit_store=redis_url)
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(fn):
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        return run

    def write(base: int) -> None:
        t = Table.open(uri, commit_store=redis_url)  # a handle of its own
        for i in range(20):
            t.append(_row(base + i))

    def read() -> None:
        t = Table.open(uri, commit_store=redis_url)
        while not stop.is_set():
            t.refresh()  # the latest row, then the version after it

    caplog.set_level(logging.WARNING, logger="tessera")
    writers = [threading.Thread(target=guarded(lambda b=b: write(b))) for b in (0, 100, 200)]
    readers = [threading.Thread(target=guarded(read)) for _ in range(2)]
    for th in writers + readers:
        th.start()
    for th in writers:
        th.join(120)
    stop.set()
    for th in readers:
        th.join(60)
    assert not errors, errors
    assert Table.open(uri, commit_store=redis_url).count_rows() == 61
    assert _foreign(caplog) == []

    lance.write_dataset(_row(999), uri, mode="append")  # by URI: past the store
    latest = Table.open(uri, commit_store=redis_url)  # the reader that records it
    Table.open(uri, commit_store=redis_url).refresh()  # and one that finds it recorded
    got = _foreign(caplog)
    assert len(got) == 1 and f"version {latest.version} was" in got[0], got
    latest._handler.ms.delete_table(latest._handler.table_key)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_reservation_says_whether_it_inserted_the_row(kind, tmp_path, request):
    """``reserve`` is True when it inserted the row, False when the row already
    held the same transaction (what tells a reader that another one recorded
    a foreign version first, so that only one of them warns)."""
    import uuid

    from tessera.stores.errors import VersionExistsError
    from tessera.stores.manifest_store import VersionRecord
    from tessera.stores.registry import open_manifest_store

    url = f"sqlite:///{tmp_path}/s.db" if kind == "sqlite" else request.getfixturevalue("redis_url")
    ms = open_manifest_store(url)
    key = f"file://{tmp_path}/t"
    try:
        rec = VersionRecord(key, 1, "_versions/x.manifest-1", 10, uuid.uuid4().hex, "inc")
        assert ms.reserve(rec) is True
        assert ms.reserve(rec) is False
        with pytest.raises(VersionExistsError):
            ms.reserve(VersionRecord(key, 1, "_versions/x.manifest-2", 10, uuid.uuid4().hex, "inc"))
    finally:
        ms.delete_table(key)
        ms.close()


def test_one_warning_per_table_and_process_then_debug(tmp_path, redis_url, caplog):
    """A pylance writer beside Tessera's makes a foreign version per append:
    the first is a WARNING (with a word that the rest go to DEBUG), the others
    DEBUG lines, one per version."""
    uri = str(tmp_path / "t")
    Table.create(uri, _row(-1), commit_store=redis_url)
    caplog.set_level(logging.DEBUG, logger="tessera")
    for i in range(3):
        lance.write_dataset(_row(i), uri, mode="append")
        Table.open(uri, commit_store=redis_url)  # records the version
    records = [r for r in caplog.records if MESSAGE in r.getMessage()]
    levels = [r.levelno for r in records]
    assert levels == [logging.WARNING, logging.DEBUG, logging.DEBUG], [r.getMessage() for r in records]
    assert "later ones of this table are logged at DEBUG" in records[0].getMessage()
    t = Table.open(uri, commit_store=redis_url)
    assert t.count_rows() == 4
    t._handler.ms.delete_table(t._handler.table_key)
