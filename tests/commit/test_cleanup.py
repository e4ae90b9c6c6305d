"""Orphan clean-up removes what failed commits left, and nothing a version needs."""

from __future__ import annotations

import datetime as dt
import os
import time

import numpy as np
import pyarrow as pa

from tessera.catalog import Table


def _age(path: str, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_orphans_removed_only_when_old(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, pa.table({"i": np.arange(10)}))
    t.append(pa.table({"i": np.arange(10, 20)}))
    t.delete("i < 3")
    # leftovers of failed commits
    orphans = {
        "data/deadbeef.lance": b"x" * 10,
        "_transactions/3-00000000-0000-0000-0000-000000000000.txn": b"t",
        "_versions/18446744073709551611.manifest-0b5d4c8e-1111-2222-3333-444444444444": b"m",
        "_deletions/0-9-123.arrow": b"d",
    }
    for rel, data in orphans.items():
        os.makedirs(os.path.dirname(os.path.join(path, rel)), exist_ok=True)
        with open(os.path.join(path, rel), "wb") as f:
            f.write(data)
    report = t.cleanup_orphans(older_than=dt.timedelta(hours=1))
    assert report.removed == [] and report.kept_young == len(orphans)  # young: kept
    for rel in orphans:
        _age(os.path.join(path, rel), 7200)
    report = t.cleanup_orphans(older_than=dt.timedelta(hours=1))
    assert sorted(report.removed) == sorted(orphans)
    # every version still opens and reads
    for v in range(1, Table.open(path).version + 1):
        assert Table.open(path, version=v).to_arrow().num_rows == [10, 20, 17][v - 1]


def test_referenced_files_never_removed_even_when_old(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, pa.table({"i": np.arange(10)}))
    t.delete("i = 1")
    for d, _, files in os.walk(path):
        for f in files:
            _age(os.path.join(d, f), 10 * 86400)
    report = t.cleanup_orphans(older_than=dt.timedelta(seconds=1))
    assert report.removed == []
    assert Table.open(path).count_rows() == 9
