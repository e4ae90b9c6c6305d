"""Compaction: ReserveFragments + Rewrite, row ids kept, deletions
materialised, optional sort, conflicts with concurrent writers, interop."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog.errors import InvalidArgumentError
from tessera.catalog.table.compaction import plan
from tessera.commit import conflicts
from tessera.commit.operation import new_transaction
from tessera.format.table import rowids as R


def _data(a: int, b: int) -> pa.Table:
    i = np.arange(a, b, dtype=np.int64)
    return pa.table({"i": i, "s": pa.array([f"s{x}" for x in i]), "k": (i * 7919) % 1000})


def _rows(t: Table) -> dict[int, tuple]:
    """_rowid -> (i, s) as Tessera reads them."""
    got = t.to_arrow(columns=["i", "s", "_rowid"])
    return {r: (i, s) for r, i, s in zip(*(got.column(c).to_pylist() for c in ("_rowid", "i", "s")))}


def _pylance_rows(ds) -> dict[int, tuple]:
    got = ds.to_table(columns=["i", "s"], with_row_id=True)
    return {r: (i, s) for r, i, s in zip(*(got.column(c).to_pylist() for c in ("_rowid", "i", "s")))}


def test_compaction_merges_materialises_and_keeps_ids(lance, tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 1000), stable_row_ids=True, max_rows_per_file=100)
    t.append(_data(1000, 1050))
    t.delete("i % 100 = 3 OR (i >= 400 AND i < 450)")  # 60 rows
    before, v0 = _rows(t), t.version
    m = t.compact(target_rows_per_fragment=400)
    assert (m.fragments_removed, m.fragments_added, m.files_added) == (11, 3, 3)
    assert t.version == v0 + 2  # ReserveFragments, then the Rewrite
    hist = t.versions()
    assert [h["operation"] for h in hist[-2:]] == ["reserve_fragments", "rewrite"]
    rw = t.snapshot.mfile.transaction
    assert rw.read_version == v0 and len(rw.rewrite.groups) == 1  # built on what it read
    assert [f.id for f in t.fragments] == [11, 12, 13] == m.groups[0][1]
    assert [f.physical_rows for f in t.fragments] == [400, 400, 190]
    assert not any(f.HasField("deletion_file") for f in t.fragments)
    assert _rows(t) == before and t.count_rows() == 990
    kinds = [R.read_row_id_sequence(t.store, f).kinds() for f in t.fragments]
    assert "range_with_holes" in sum(kinds, [])
    assert t.manifest.next_row_id == 1050 and t.manifest.max_fragment_id == 13
    ds = lance.dataset(path)
    assert _pylance_rows(ds) == before
    want = [999, 0, 1049, 3, 401, 703, 700]
    assert (
        ds._take_rows(want, columns=["i"]).column("i").to_pylist()
        == t.take_rows(want, columns=["i"]).column("i").to_pylist()
        == [999, 0, 1049, 700]
    )
    rid = ", ".join(str(x) for x in want)
    assert sorted(ds.to_table(columns=["i"], filter=f"_rowid IN ({rid})").column("i").to_pylist()) == [
        0,
        700,
        999,
        1049,
    ]
    ds.validate()
    assert t.compact(400).fragments_added == 0 and t.version == v0 + 2  # nothing left to do


def test_plan_follows_lance():
    class Fake:  # just what plan() reads
        uri = "mem"
        stable_row_ids = False

        def __init__(self, frags):
            from tessera.format.protos import table_pb2

            self.manifest = table_pb2.Manifest()
            for fid, rows, deleted in frags:
                f = self.manifest.fragments.add(id=fid, physical_rows=rows)
                if deleted:
                    f.deletion_file.num_deleted_rows = deleted
            self.index_section = None

    ids = lambda groups: [[f.id for f in g] for g in groups]  # noqa: E731
    t = Fake([(0, 50, 0), (1, 50, 0), (2, 500, 0), (3, 50, 0), (4, 500, 100), (5, 50, 0), (6, 50, 0)])
    assert ids(plan(t, 100)) == [[0, 1], [3, 4, 5, 6]]  # 4 has deletions to materialise
    assert ids(plan(t, 100, materialize_deletions=False)) == [[0, 1], [5, 6]]  # 3 alone: nothing to merge
    assert ids(plan(t, 100, sort_by=[("i", "ascending")])) == [[0, 1, 2, 3, 4, 5, 6]]
    assert ids(plan(Fake([(0, 50, 10)]), 100)) == [[0]]


def test_sort_by_moves_rows_with_their_ids(lance, tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 2000), stable_row_ids=True, max_rows_per_file=500)
    t.delete("i % 5 = 0")
    before = _rows(t)
    t.compact(1000, sort_by=["k", ("i", "descending")])
    got = t.to_arrow(columns=["k", "i"])
    assert got.equals(got.sort_by([("k", "ascending"), ("i", "descending")]))
    assert _rows(t) == before
    assert "array" in sum((R.read_row_id_sequence(t.store, f).kinds() for f in t.fragments), [])
    assert _pylance_rows(lance.dataset(path)) == before
    with pytest.raises(InvalidArgumentError):
        t.compact(100, sort_by="nope")
    with pytest.raises(InvalidArgumentError):
        t.compact(0)


def test_version_sequences_carried_over(lance, tmp_path):
    path = str(tmp_path / "p")
    lance.write_dataset(_data(0, 1000), path, enable_stable_row_ids=True, max_rows_per_file=250)
    ds = lance.dataset(path)
    ds.update({"s": "'u'"}, where="i >= 100 AND i < 110")  # version 2
    lance.write_dataset(_data(1000, 1100), path, mode="append")  # version 3
    lance.dataset(path).delete("i % 50 = 7")
    cols = ["i", "_rowid", "_row_created_at_version", "_row_last_updated_at_version"]
    before = lance.dataset(path).to_table(columns=cols).sort_by("i")
    t = Table.open(path)
    t.compact(600, sort_by="k")
    after = lance.dataset(path).to_table(columns=cols).sort_by("i")
    assert after.to_pydict() == before.to_pydict()
    assert set(after.column("_row_last_updated_at_version").to_pylist()) == {1, 2, 3}
    f = t.fragments[0]
    assert f.HasField("inline_created_at_versions") and f.HasField("inline_last_updated_at_versions")
    assert R.read_versions(t.store, f, R.CREATED_AT_FIELDS).size == f.physical_rows


def test_pylance_compacts_what_tessera_wrote_and_back(lance, tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 1500), stable_row_ids=True, max_rows_per_file=300)
    t.delete("i % 4 = 1")
    t.update({"s": "'v'"}, where="i < 20")
    t.compact(700)
    ds = lance.dataset(path)
    ds.delete("i % 4 = 2")
    lance.write_dataset(_data(1500, 1600), path, mode="append")
    ds = lance.dataset(path)
    ds.optimize.compact_files(target_rows_per_fragment=5000)
    ds = lance.dataset(path)
    t = Table.open(path)
    assert _rows(t) == _pylance_rows(ds)
    t.delete("i % 4 = 3")
    t.compact(5000)
    assert _rows(t) == _pylance_rows(lance.dataset(path))
    lance.dataset(path).validate()


# -- concurrency ------------------------------------------------------------------------------


def test_compaction_losing_to_a_delete_is_rerun(tmp_path):
    """A stale compaction must never resurrect rows a concurrent delete removed."""
    path = str(tmp_path / "t")
    Table.create(path, _data(0, 600), stable_row_ids=True, max_rows_per_file=100)
    stale, other = Table.open(path), Table.open(path)
    other.delete("i >= 100 AND i < 120")  # fragment 1, which the compaction rewrites
    stale.compact(1000)  # built on version 1: retryable conflict, re-run on the latest
    t = Table.open(path)
    assert t.count_rows() == 580 and t.to_arrow(filter="i >= 100 AND i < 120").num_rows == 0
    assert sorted(_rows(t)) == [i for i in range(600) if not 100 <= i < 120]
    ops = [h["operation"] for h in t.versions()]
    assert ops[:3] == ["overwrite", "delete", "reserve_fragments"] and ops[-1] == "rewrite"
    assert len(t.fragments) == 1


def test_delete_and_update_losing_to_a_compaction_are_rerun(tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, _data(0, 600), stable_row_ids=True, max_rows_per_file=100)
    d, u = Table.open(path), Table.open(path)
    Table.open(path).compact(1000)
    d.delete("i < 10")  # on fragments the rewrite replaced: re-run on the latest
    u.update({"s": "'x'"}, where="i >= 590")
    t = Table.open(path)
    assert t.count_rows() == 590 and t.to_arrow(filter="s = 'x'").num_rows == 10
    rows = _rows(t)
    assert all(r == i for r, (i, _) in rows.items()) and len(rows) == 590  # updated rows keep their ids


def test_compaction_and_append_both_land(tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, _data(0, 300), stable_row_ids=True, max_rows_per_file=100)
    stale, other = Table.open(path), Table.open(path)
    other.append(_data(300, 350))
    stale.compact(1000)  # compatible with an append: rebased, not re-run
    t = Table.open(path)
    assert sorted(_rows(t)) == list(range(350))
    assert [f.physical_rows for f in t.fragments] == [300, 50]
    assert t.manifest.next_row_id == 350


def test_rewrite_conflict_rules():
    def rewrite(*old):
        txn = new_transaction(1)
        g = txn.rewrite.groups.add()
        for fid in old:
            g.old_fragments.add(id=fid)
        return txn

    def delete(fid):
        txn = new_transaction(1)
        txn.delete.updated_fragments.add(id=fid)
        return txn

    conflicts.check(rewrite(1, 2), delete(3), {}, conflicts.Rebase())
    with pytest.raises(conflicts.RetryableConflict):
        conflicts.check(rewrite(1, 2), delete(2), {}, conflicts.Rebase())
    with pytest.raises(conflicts.RetryableConflict):
        conflicts.check(delete(1), rewrite(1, 2), {}, conflicts.Rebase())
    reserve = new_transaction(1)
    reserve.reserve_fragments.num_fragments = 2
    conflicts.check(rewrite(1, 2), reserve, {}, conflicts.Rebase())


def test_plain_table_and_indexed_fragments(lance, tmp_path):
    path = str(tmp_path / "p")
    lance.write_dataset(_data(0, 400), path, max_rows_per_file=100)
    lance.write_dataset(_data(400, 500), path, mode="append")
    lance.write_dataset(_data(500, 550), path, mode="append")
    lance.dataset(path).create_scalar_index("s", "BITMAP")  # covers fragments 0-5
    lance.write_dataset(_data(550, 600), path, mode="append")
    lance.write_dataset(_data(600, 650), path, mode="append")
    t = Table.open(path)
    m = t.compact(1000)  # a BITMAP of row addresses Tessera cannot remap: only the unindexed fragments move
    assert m.groups == [([6, 7], [8])]
    ds = lance.dataset(path)
    assert ds.to_table(filter="i = 620").column("s").to_pylist() == ["s620"]
    assert ds.to_table(filter="s = 's20'").column("i").to_pylist() == [20]
    assert sorted(t.to_arrow().column("i").to_pylist()) == list(range(650))
    assert ds.stats.index_stats("s_idx")["num_unindexed_rows"] == 100


def test_compaction_tells_its_progress(tmp_path):
    t = Table.create(str(tmp_path / "t"), _data(0, 50), max_rows_per_file=10)
    for a in range(50, 80, 10):
        t.append(_data(a, a + 10))
    calls: list[tuple[str, int, int]] = []
    m = t.compact(1000, progress=lambda *a: calls.append(a))
    assert m.fragments_removed == 8
    assert [c[0] for c in calls] == ["rewriting fragments"] * len(calls)
    assert calls[0] == ("rewriting fragments", 0, 8) and calls[-1] == ("rewriting fragments", 8, 8)
    done = [d for _, d, _ in calls]
    assert done == sorted(done)


@pytest.mark.parametrize("per_file", [40, 30_000])  # small fragments read together, and one at a time
def test_compaction_keeps_no_parsed_tail_of_its_sources(tmp_path, per_file):
    """A compaction reads each source file once, and the files are replaced:
    their parsed tails are not kept in the process's cache (at 5,000 small
    fragments, keeping them doubled a compaction's time, most of it the
    garbage collector walking what they hold).  A scan keeps them."""
    from tessera.format.file import datafile

    n = 60_000 if per_file > 1000 else 400
    t = Table.create(
        str(tmp_path / "t"), pa.table({"k": np.arange(n), "v": np.arange(n) * 0.5}), max_rows_per_file=per_file
    )
    sources = {f.files[0].path for f in t.fragments}
    assert len(sources) > 1

    def cached() -> set[str]:
        return {name for name in sources for key in datafile._PARSED if str(key[1]).endswith(name)}

    datafile.clear_parsed_cache()
    t.compact()
    assert len(t.fragments) == 1
    assert cached() == set()
    assert t.to_arrow().column("k").to_pylist() == list(range(n))
    datafile.clear_parsed_cache()
    Table.open(t.uri).checkout(1).to_arrow()  # a scan of the old version: its files' tails are kept
    assert cached() == sources
