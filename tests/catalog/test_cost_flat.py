"""Costs that must stay flat as a table grows, pinned as counts (never as
times): the columns and rows an update or delete reads, the file tails a
scan parses, the manifests ``versions()`` and an open of an old version read."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.format.table import whole_reads
from tessera.format.table.fragments import FragmentReader

ROWS, PER_FILE = 4_000, 1_000


def _data(lo: int = 0, n: int = ROWS) -> pa.Table:
    i = np.arange(lo, lo + n, dtype=np.int64)
    return pa.table({"k": i, "tag": pa.array(i % 50, pa.int32()), "v": pa.array(np.char.add("v", i.astype(str)))})


@pytest.fixture
def reads(monkeypatch):
    """Every read and take at the fragment readers: (field names, rows)."""
    got: list[tuple[tuple[str, ...], int]] = []
    real_read, real_take = FragmentReader.read, FragmentReader.take

    def read(self, start, stop):
        got.append((tuple(f.name for f in self.fields), stop - start))
        return real_read(self, start, stop)

    def take(self, offsets):
        got.append((tuple(f.name for f in self.fields), len(offsets)))
        return real_take(self, offsets)

    real_whole = whole_reads.read_whole

    def read_whole(readers, **kw):  # many small fragments read at once: each counts as a read of it
        got.extend((tuple(f.name for f in r.fields), r.physical_rows) for r in readers)
        return real_whole(readers, **kw)

    monkeypatch.setattr(FragmentReader, "read", read)
    monkeypatch.setattr(whole_reads, "read_whole", read_whole)
    monkeypatch.setattr(FragmentReader, "take", take)
    return got


def _rows_read(reads, name: str) -> int:
    return sum(n for names, n in reads if name in names)


def test_an_update_reads_the_other_columns_only_for_the_rows_it_changes(tmp_path, reads):
    t = Table.create(str(tmp_path / "t"), _data(), max_rows_per_file=PER_FILE)
    reads.clear()
    t.update({"v": "'changed'"}, where="k = 1500")
    # the predicate's column is read whole (no zone map), the others for the one row only
    assert _rows_read(reads, "k") == ROWS
    assert _rows_read(reads, "tag") == 1
    got = t.to_arrow(filter="k = 1500")
    assert got.column("v").to_pylist() == ["changed"] and got.column("tag").to_pylist() == [1500 % 50]
    assert t.count_rows() == ROWS


def test_an_update_and_a_delete_skip_what_a_zone_map_rules_out(tmp_path, reads):
    t = Table.create(str(tmp_path / "t"), _data(), max_rows_per_file=PER_FILE)
    t.create_index("k", "ZONEMAP", rows_per_zone=250)
    reads.clear()
    t.update({"tag": "tag + 100"}, where="k >= 2100 AND k < 2200")
    # one zone of one fragment can hold the rows: 250 rows of k read, 100 rows of the others;
    # then the zone map is extended over the new fragment (its 100 rows of k)
    assert reads == [(("k",), 250), (("tag", "v"), 100), (("k",), 100)]
    reads.clear()
    t.delete("k = 10")
    assert reads == [(("k",), 250)]
    assert t.count_rows() == ROWS - 1
    assert t.count_rows("tag >= 100") == 100


def test_a_delete_reads_only_its_predicate_columns(tmp_path, reads):
    t = Table.create(str(tmp_path / "t"), _data(), max_rows_per_file=PER_FILE)
    reads.clear()
    t.delete("tag = 3 AND k > 10")
    assert {names for names, _ in reads} <= {("k", "tag"), ("tag", "k")}
    assert t.count_rows() == ROWS - ROWS // 50 + 1


def _full_history(t: Table) -> list[tuple[int, int, int, int]]:
    """(version, rows, rows added, rows removed) of every version, counted
    from every fragment of every manifest (what versions() must agree with)."""
    out, before = [], {}
    for v in range(1, t.version + 1):
        frags = t.checkout(v).manifest.fragments
        after = {f.id: f.physical_rows - f.deletion_file.num_deleted_rows for f in frags}
        added = sum(n for fid, n in after.items() if fid not in before)
        removed = sum(max(0, before[fid] - n) for fid, n in after.items() if fid in before)
        removed += sum(n for fid, n in before.items() if fid not in after)
        out.append((v, sum(after.values()), added, removed))
        before = after
    return out


def test_versions_agree_with_a_count_of_every_fragment(tmp_path):
    t = Table.create(str(tmp_path / "t"), _data(0, 1_000), max_rows_per_file=300)
    t.append(_data(1_000, 500))
    t.delete("k % 10 = 1")
    t.update({"tag": "tag + 1"}, where="k < 400")
    t.delete("k < 300")  # whole fragments go
    t.create_index("k", "ZONEMAP")
    t.add_columns({"w": "k * 2"})
    t.compact(target_rows_per_fragment=10_000)
    t.update({"v": "'x'"}, where="k % 3 = 0")
    t.overwrite(_data(5_000, 700))
    t.restore(4)
    t.append(_data(9_000, 10))
    got = [(h["version"], h["rows"], h["rows_added"], h["rows_removed"]) for h in t.versions()]
    assert got == _full_history(t)
    assert [h["rows"] for h in t.versions()] == [t.checkout(v).count_rows() for v in range(1, t.version + 1)]


def test_versions_reads_each_manifest_once_and_counts_only_what_changed(tmp_path, monkeypatch):
    from tessera.catalog.table import maintenance

    t = Table.create(str(tmp_path / "t"), _data(0, 10))
    for k in range(1, 60):
        t.append(_data(k * 10, 10))
    t.delete("k % 100 = 5")  # six fragments get a deletion file
    loads, counted = [], []
    real_load = type(t._handler).load
    real_live = maintenance.fragment_live_rows

    def load(self, store, version):
        loads.append(version)
        return real_load(self, store, version)

    def live(f):
        counted.append(f.id)
        return real_live(f)

    monkeypatch.setattr(type(t._handler), "load", load)
    monkeypatch.setattr(maintenance, "fragment_live_rows", live)
    history = Table.open(t.uri).versions()
    assert [h["version"] for h in history] == list(range(1, 62))
    assert history[-1]["rows"] == 600 - 6 and history[-1]["rows_removed"] == 6
    assert sorted(loads[-61:]) == list(range(1, 62)) and len(loads) <= 62  # the open's own load, then one each
    # version 1's fragment, one new fragment per append, the six the delete named: not 61 x 30 fragments
    assert len(counted) == 1 + 59 + 6


def test_a_table_with_a_column_named_rowaddr_is_updated_fragment_by_fragment(tmp_path):
    data = pa.table({"_rowaddr": pa.array([5, 6, 7, 8], pa.int64()), "v": ["a", "b", "c", "d"]})
    t = Table.create(str(tmp_path / "t"), data, max_rows_per_file=2)
    t.update({"v": "'z'"}, where="_rowaddr >= 7")
    t.delete("_rowaddr = 5")
    got = t.to_arrow().sort_by("_rowaddr")
    assert got.column("_rowaddr").to_pylist() == [6, 7, 8] and got.column("v").to_pylist() == ["b", "z", "z"]


def test_an_old_version_opens_with_one_read_and_no_listing(tmp_path, monkeypatch):
    from tessera.stores.local import LocalObjectStore

    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 10))
    for k in range(1, 40):
        t.append(_data(k * 10, 10))
    listed, read = [], []
    real_list, real_read = LocalObjectStore.list, LocalObjectStore.read
    monkeypatch.setattr(LocalObjectStore, "list", lambda self, p: listed.append(p) or real_list(self, p))
    monkeypatch.setattr(LocalObjectStore, "read", lambda self, p: read.append(p) or real_read(self, p))
    old = Table.open(path, version=20)
    assert old.count_rows() == 200
    from tessera.format.table import manifest as mf

    assert listed == []
    assert [p for p in read if p.startswith("_versions/")] == ["_versions/" + mf.manifest_name(20, mf.NamingScheme.V2)]


def test_a_version_named_both_ways_is_refused_not_guessed(tmp_path):
    import shutil

    from tessera.catalog.errors import TesseraError
    from tessera.format.table import manifest as mf

    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 10))
    t.append(_data(10, 10))
    v2 = f"{path}/_versions/{mf.manifest_name(1, mf.NamingScheme.V2)}"
    shutil.copy(v2, f"{path}/_versions/{mf.manifest_name(1, mf.NamingScheme.V1)}")
    with pytest.raises(TesseraError, match="both"):
        Table.open(path, version=1)
