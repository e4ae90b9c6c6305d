"""Updates and merge_inserts keep stable row ids, as pylance 14 does (issue 25, item 2).

An updated row is deleted where it was and written into a new fragment that
names the same row id; its created-at version stays and its last-updated-at
version becomes the committing version.  Checked against pylance 14 doing the
same operations on a copy of the table, and read back by pylance 14
(``_take_rows``, lineage columns, index queries) and LanceDB 0.40 (its own
Lance 13 core: ``take_row_ids``, index queries).
"""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.format.table import rowids as R

VERSIONS = ["2.0", "2.1", "2.2"]
LINEAGE = ["_row_created_at_version", "_row_last_updated_at_version"]


def _data(a: int, b: int) -> pa.Table:
    i = np.arange(a, b, dtype=np.int64)
    return pa.table({"i": i, "v": i * 10, "s": pa.array([f"s{x}" for x in i])})


def _make(lance, path: str, fv: str, n: int = 1000) -> None:
    """A stable-row-id table of ``n`` rows in fragments of 300, then 200 rows appended (version 2)."""
    lance.write_dataset(_data(0, n), path, enable_stable_row_ids=True, max_rows_per_file=300, data_storage_version=fv)
    lance.write_dataset(_data(n, n + 200), path, mode="append", max_rows_per_file=300)


def _ids(t: Table) -> dict[int, int]:
    got = t.to_arrow(columns=["i", "_rowid"])
    return dict(zip(got.column("i").to_pylist(), got.column("_rowid").to_pylist()))


def _pylance_rows(ds) -> dict[int, tuple]:
    """i -> (_rowid, v, s, created-at, last-updated-at) as pylance reads them."""
    got = ds.to_table(columns=["i", "v", "s", *LINEAGE], with_row_id=True)
    cols = [got.column(c).to_pylist() for c in ("i", "_rowid", "v", "s", *LINEAGE)]
    return {row[0]: tuple(row[1:]) for row in zip(*cols)}


@pytest.mark.parametrize("fv", VERSIONS)
def test_update_keeps_row_ids_and_advances_lineage(lance, tmp_path, fv):
    path, ref = str(tmp_path / "t"), str(tmp_path / "ref")
    _make(lance, path, fv)
    shutil.copytree(path, ref)
    t = Table.open(path)
    before = _ids(t)
    where = "(i >= 250 AND i < 300) OR (i >= 1100 AND i < 1150)"  # 100 rows over three fragments
    t.update({"v": "v + 1", "s": "'u'"}, where=where)
    lance.dataset(ref).update({"v": "v + 1", "s": "'u'"}, where=where)
    assert t.version == 3 and lance.dataset(ref).version == 3

    after = _ids(t)
    assert after == before  # no row changed its id
    assert t.manifest.next_row_id == 1200  # and none was handed out
    old = [before[i] for i in range(250, 300)] + [before[i] for i in range(1100, 1150)]
    want = {"i": list(range(250, 300)) + list(range(1100, 1150))}
    want["v"] = [i * 10 + 1 for i in want["i"]]
    got = t.take_rows(old, columns=["i", "v", "s"])
    assert got.column("i").to_pylist() == want["i"] and got.column("v").to_pylist() == want["v"]
    assert set(got.column("s").to_pylist()) == {"u"}
    ds = lance.dataset(path)
    theirs = ds._take_rows(old, columns=["i", "v"])
    assert theirs.column("i").to_pylist() == want["i"] and theirs.column("v").to_pylist() == want["v"]
    # pylance's view of the table Tessera updated is the one pylance made: ids, values and lineage
    mine, reference = _pylance_rows(ds), _pylance_rows(lance.dataset(ref))
    assert mine == reference
    assert mine[260][3:] == (1, 3) and mine[1120][3:] == (2, 3) and mine[10][3:] == (1, 1)
    ds.validate()


@pytest.mark.parametrize("fv", VERSIONS)
def test_merge_insert_keeps_matched_row_ids(lance, tmp_path, fv):
    path, ref = str(tmp_path / "t"), str(tmp_path / "ref")
    _make(lance, path, fv)
    shutil.copytree(path, ref)
    t = Table.open(path)
    before = _ids(t)
    # matched rows in three fragments, two inserted rows
    src = pa.table(
        {"i": pa.array([5, 6, 1100, 2000, 2001], pa.int64()), "v": pa.array([-1, -2, -3, -4, -5], pa.int64())}
    ).append_column("s", pa.array(["m"] * 5))
    stats = t.merge_insert("i").when_matched_update_all().when_not_matched_insert_all().execute(src)
    lance.dataset(ref).merge_insert("i").when_matched_update_all().when_not_matched_insert_all().execute(src)
    assert (stats["num_updated_rows"], stats["num_inserted_rows"]) == (3, 2)
    after = _ids(t)
    assert {i: after[i] for i in before} == before
    assert (after[2000], after[2001]) == (1200, 1201) and t.manifest.next_row_id == 1202
    assert t.take_rows([before[5], before[1100]], columns=["v"]).column("v").to_pylist() == [-1, -3]
    ds = lance.dataset(path)
    assert ds._take_rows([before[6], before[1100]], columns=["v"]).column("v").to_pylist() == [-2, -3]
    assert _pylance_rows(ds) == _pylance_rows(lance.dataset(ref))

    # a merge that also deletes every target row no source row matches
    src2 = _data(0, 1300)
    src2 = src2.filter(pa.compute.equal(pa.compute.bit_wise_and(src2.column("i"), 1), 0))  # even keys
    src2 = src2.set_column(1, "v", pa.compute.multiply(src2.column("v"), 100))
    both = [Table.open(path).merge_insert("i"), lance.dataset(ref).merge_insert("i")]
    for b in both:
        b.when_matched_update_all().when_not_matched_insert_all().when_not_matched_by_source_delete().execute(src2)
    ds = lance.dataset(path)
    mine = _pylance_rows(ds)
    assert mine == _pylance_rows(lance.dataset(ref))
    assert len(mine) == 650 and mine[1100][0] == before[1100] and mine[1250][0] >= 1202
    assert mine[0][3:] == (1, 4) and mine[1100][3:] == (2, 4) and mine[1250][3:] == (4, 4)
    assert Table.open(path).count_rows() == 650
    ds.validate()


@pytest.mark.parametrize("fv", VERSIONS)
def test_updated_rows_survive_compaction_and_delete(lance, tmp_path, fv):
    path = str(tmp_path / "t")
    _make(lance, path, fv)
    t = Table.open(path)
    before = _ids(t)
    t.update({"v": "v + 1"}, where="i % 10 = 3")  # 120 rows in every fragment
    t.merge_insert("i").when_matched_update_all().when_not_matched_insert_all().execute(_data(1190, 1210))
    t.compact(700)
    t.delete("i % 10 = 3 AND i < 500")
    t = Table.open(path)
    after = _ids(t)
    assert len(after) == 1210 - 50 == t.count_rows() == lance.dataset(path).count_rows()
    assert all(after[i] == before[i] for i in after if i < 1200)
    assert {after[i] for i in range(1200, 1210)} == set(range(1200, 1210))
    kept = [before[i] for i in range(503, 1190, 10)]
    got = t.take_rows(kept, columns=["i", "v"])
    assert got.column("v").to_pylist() == [i * 10 + 1 for i in range(503, 1190, 10)]
    gone = [before[i] for i in range(3, 500, 10)]
    assert t.take_rows(gone).num_rows == 0 and lance.dataset(path)._take_rows(gone, columns=["i"]).num_rows == 0
    assert lance.dataset(path)._take_rows(kept, columns=["i", "v"]).equals(got)
    lance.dataset(path).validate()


def test_row_id_index_resolves_the_new_location(lance, tmp_path):
    path = str(tmp_path / "t")
    _make(lance, path, "2.1")
    t = Table.open(path)
    t.update({"s": "'u'"}, where="i >= 100 AND i < 110")
    t = Table.open(path)
    new = t.fragments[-1]
    addr, found = t.row_id_index().lookup(np.arange(100, 110))
    assert found.all() and set((addr >> np.uint64(32)).tolist()) == {new.id}
    assert (addr & np.uint64(0xFFFFFFFF)).tolist() == list(range(10))
    # the old copies are deleted rows of fragment 0; scans see each id once
    scan = t.to_arrow(columns=["_rowid", "_rowaddr"])
    assert len(set(scan.column("_rowid").to_pylist())) == scan.num_rows == 1200
    seq = R.read_row_id_sequence(t.store, new)
    assert seq is not None and seq.values().tolist() == list(range(100, 110))


def test_lancedb_takes_and_queries_after_an_update(lance, tmp_path):
    lancedb = pytest.importorskip("lancedb")
    rng = np.random.default_rng(0)
    n, d = 2000, 16
    vecs = rng.standard_normal((n, d)).astype(np.float32)
    data = _data(0, n).append_column("w", pa.array(np.arange(n) * 10))
    data = data.append_column("vec", pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), d))
    root = tmp_path / "db"
    path = str(root / "t.lance")
    lance.write_dataset(data, path, enable_stable_row_ids=True, max_rows_per_file=700)
    db = lancedb.connect(str(root))
    lt = db.open_table("t")
    lt.create_index("v", config=lancedb.index.BTree())  # LanceDB's BTREE: row ids
    lt.create_index("vec", config=lancedb.index.IvfPq(num_partitions=4, num_sub_vectors=4))
    lance.dataset(path).create_scalar_index("w", "BTREE")  # pylance 14's BTREE: row addresses

    t = Table.open(path)
    before = _ids(t)
    new_vec = (vecs[260] * -3 + 5).tolist()
    t.update({"v": "v + 1", "w": "w + 1"}, where="i >= 250 AND i < 350")
    t.update({"vec": pa.scalar(new_vec, pa.list_(pa.float32(), d))}, where="i = 260")
    rid = before[260]

    ds = lance.dataset(path)
    for col in ("v", "w"):
        assert "ScalarIndexQuery" in ds.scanner(filter=f"{col} = 2601").explain_plan()
        assert ds.to_table(filter=f"{col} = 2600", columns=["i"]).num_rows == 0
        hit = ds.to_table(filter=f"{col} = 2601", columns=["i"], with_row_id=True)
        assert hit.to_pylist() == [{"i": 260, "_rowid": rid}]
    near = ds.to_table(nearest={"column": "vec", "q": new_vec, "k": 1}, columns=["i"], with_row_id=True)
    assert (near.column("i").to_pylist(), near.column("_rowid").to_pylist()) == ([260], [rid])
    old_near = ds.to_table(nearest={"column": "vec", "q": vecs[260].tolist(), "k": 3}, columns=["i"])
    assert 260 not in old_near.column("i").to_pylist()

    lt = db.open_table("t")
    old = [before[i] for i in (250, 260, 349)]
    took = lt.take_row_ids(old).select(["i", "v"]).to_arrow().sort_by("i")  # LanceDB returns them in address order
    assert took.column("i").to_pylist() == [250, 260, 349] and took.column("v").to_pylist() == [2501, 2601, 3491]
    assert lt.search().where("v = 2600").select(["i"]).to_list() == []
    got = lt.search().where("v = 2601").select(["i"]).with_row_id(True).to_list()
    assert [(r["i"], r["_rowid"]) for r in got] == [(260, rid)]
    hits = lt.search(new_vec).limit(1).select(["i"]).with_row_id(True).to_list()
    assert [(r["i"], r["_rowid"]) for r in hits] == [(260, rid)]
    assert 260 not in [r["i"] for r in lt.search(vecs[260].tolist()).limit(3).select(["i"]).to_list()]


def test_concurrent_updates_of_the_same_rows_conflict(tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, _data(0, 600), stable_row_ids=True, max_rows_per_file=200)
    a, b = Table.open(path), Table.open(path)
    a.update({"v": "v + 1"}, where="i >= 100 AND i < 110")
    b.update({"v": "v + 1"}, where="i >= 105 AND i < 120")  # deletes rows a deleted: re-run, not merged
    t = Table.open(path)
    assert [h["operation"] for h in t.versions()][-2:] == ["update", "update"]
    rows = t.to_arrow(columns=["i", "v", "_rowid"]).sort_by("i")
    assert rows.column("_rowid").to_pylist() == list(range(600))  # ids kept through the re-run
    v = dict(zip(rows.column("i").to_pylist(), rows.column("v").to_pylist()))
    assert [v[i] - i * 10 for i in (99, 100, 104, 105, 109, 110, 119, 120)] == [0, 1, 1, 2, 2, 1, 1, 0]
    assert t.take_rows([105]).column("v").to_pylist() == [1052]


def test_update_rebased_over_an_append_keeps_ids_and_the_version_it_commits(lance, tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, _data(0, 300), stable_row_ids=True, max_rows_per_file=100)
    stale, other = Table.open(path), Table.open(path)
    other.append(_data(300, 350))  # version 2, ids 300..349
    src = pa.table({"i": pa.array([5, 400], pa.int64()), "v": pa.array([-1, -2], pa.int64()), "s": ["m", "n"]})
    stale.merge_insert(src, on="i")  # built on version 1, rebased on 2, committed as 3
    t = Table.open(path)
    assert t.version == 3 and t.manifest.next_row_id == 351  # never goes back over the append's ids
    ids = _ids(t)
    assert ids[5] == 5 and ids[400] == 350 and [ids[i] for i in (300, 349)] == [300, 349]
    lineage = lance.dataset(path).to_table(columns=["i", *LINEAGE], filter="i IN (5, 6, 300, 400)").sort_by("i")
    assert lineage.to_pylist() == [
        {"i": 5, "_row_created_at_version": 1, "_row_last_updated_at_version": 3},
        {"i": 6, "_row_created_at_version": 1, "_row_last_updated_at_version": 1},
        {"i": 300, "_row_created_at_version": 2, "_row_last_updated_at_version": 2},
        {"i": 400, "_row_created_at_version": 3, "_row_last_updated_at_version": 3},
    ]
