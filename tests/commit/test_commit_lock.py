"""The local commit lock: Tessera's writers on one machine take turns at the
version instead of racing for it, and nothing depends on the lock for
correctness (a stalled holder only delays, a writer outside it still loses
races the put decides)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from tessera_test_services import run_in_threads

from tessera.catalog import Table
from tessera.commit.handlers import base as handlers
from tessera.stores.errors import AlreadyExistsError
from tessera.stores.local import LocalObjectStore, advisory_lock


def _rows(k: int) -> pa.Table:
    return pa.table({"k": pa.array([k] * 5, pa.int64())})


def test_the_lock_excludes_and_gives_up_after_its_wait(tmp_path):
    path = str(tmp_path / "lock")
    with advisory_lock(path, 1.0) as first:
        assert first
        t0 = time.monotonic()
        with advisory_lock(path, 0.05) as second:
            assert not second  # busy: given up after the wait
        assert time.monotonic() - t0 >= 0.05
    with advisory_lock(path, 0.0) as again:
        assert again  # released when the block ended


def test_a_dead_holder_releases_the_lock(tmp_path):
    path = str(tmp_path / "lock")
    code = (
        "import sys, time\n"
        "from tessera.stores.local import advisory_lock\n"
        "with advisory_lock(sys.argv[1], 1.0) as held:\n"
        "    print(held, flush=True)\n"
        "    time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "True"
        with advisory_lock(path, 0.0) as held:
            assert not held
        proc.kill()
        proc.wait(30)
        with advisory_lock(path, 1.0) as held:
            assert held
    finally:
        proc.kill()


def test_writers_that_take_the_lock_never_lose_a_version(tmp_path, monkeypatch):
    """4 threads x 10 appends on one table: every put of a manifest wins (the
    lock hands the version over, the holder checks the next version first),
    and every append is in the table once."""
    uri = str(tmp_path / "t")
    Table.create(uri, _rows(-1))
    lost: list[str] = []
    real = LocalObjectStore.put_if_not_exists

    def counted(self, path, data):
        try:
            return real(self, path, data)
        except AlreadyExistsError:
            lost.append(path)
            raise

    monkeypatch.setattr(LocalObjectStore, "put_if_not_exists", counted)

    def writer(w: int) -> None:
        t = Table.open(uri)
        for i in range(10):
            t.append(_rows(100 * w + i))

    errors = run_in_threads(writer, 4)
    assert not errors
    assert lost == []
    t = Table.open(uri)
    assert t.version == 41
    ks = sorted(t.to_arrow().column("k").to_pylist())
    assert ks == sorted([-1] * 5 + [100 * w + i for w in range(4) for i in range(10) for _ in range(5)])


def test_a_stalled_holder_delays_but_does_not_stop_a_commit(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    t = Table.create(uri, _rows(0))
    monkeypatch.setattr(handlers, "COMMIT_LOCK_WAIT", 0.2)
    with advisory_lock(os.path.join(uri, "_versions", ".tessera-commit.lock"), 0.0) as held:
        assert held  # a holder that never lets go
        t0 = time.monotonic()
        t.append(_rows(1))
        assert time.monotonic() - t0 >= 0.2
    assert Table.open(uri).count_rows() == 10


def test_pylance_ignores_the_lock_file(tmp_path):
    lance = pytest.importorskip("lance")
    uri = str(tmp_path / "t")
    t = Table.create(uri, _rows(0))
    t.append(_rows(1))
    assert os.path.exists(os.path.join(uri, "_versions", ".tessera-commit.lock"))
    ds = lance.dataset(uri)
    assert ds.version == 2 and ds.count_rows() == 10
    lance.write_dataset(_rows(2), uri, mode="append")
    ds.cleanup_old_versions(older_than=__import__("datetime").timedelta(0))
    assert Table.open(uri).count_rows() == 15
