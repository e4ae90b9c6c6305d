"""Restore, compaction, clean-up and drop_columns on indexed tables, followed
by the clients' own maintenance (pylance 14 and 13 ``optimize.compact_files``
and ``optimize_indices``, LanceDB ``tbl.optimize()``), and the clients'
queries still right after (issue 25, items 8 and 9).

The indexed table: four fragments with deletions, LanceDB's BTREE (``id``)
and IVF_PQ (``vec``) indices built through the ``tessera`` plugin, Tessera's
zone map on ``f``.  "Right" means: every client reads Tessera's rows; a
filter on the BTREE column returns the matching rows; a vector search finds
a live row by its own vector, never a deleted one.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil

import pyarrow as pa
import pytest
from tessera_test_interop import assert_same, lancedb_btree, lancedb_ivf_pq, lancedb_table, rows, vector_of

import tessera

DELETED = "id % 17 = 0"
LIVE_PROBE = 205  # a live row (205 % 17 != 0)
DEAD_PROBE = 204  # deleted (204 = 12 * 17)


def _indexed(wh, name: str, *, stable_row_ids: bool = False):
    """The indexed table ``name`` in warehouse ``wh`` (see the module docstring)."""
    t = wh.cat.create_table(name, rows(0, 150), stable_row_ids=stable_row_ids)
    for start in (150, 250, 350):
        t.append(rows(start, 100))
    t.delete(DELETED)
    tbl = lancedb_table(wh.lancedb_plugin(), name)
    lancedb_btree(tbl)
    lancedb_ivf_pq(tbl)
    t = wh.cat.load_table(name)
    t.create_index("f")
    return t


def _index_rows(uri: str, name: str) -> tuple[int, int]:
    import lance

    stats = lance.dataset(uri).stats.index_stats(name)
    return stats["num_indexed_rows"], stats["num_unindexed_rows"]


def _search(tbl, i: int) -> list[int]:
    q = tbl.search(vector_of(i)).nprobes(2).refine_factor(50).limit(3)
    return q.select(["id"]).to_arrow().column("id").to_pylist()


def _queries_right(wh, name: str, lance13, *, how: str = "plugin", vector: bool = True) -> None:
    """Every client reads Tessera's rows and its queries answer right."""
    import lance

    t = wh.cat.load_table(name)
    ours = t.to_arrow()
    live = set(ours.column("id").to_pylist())
    assert LIVE_PROBE in live and DEAD_PROBE not in live
    want = sorted(i for i in live if 100 <= i < 260)
    db = wh.lancedb(how)
    tbl = lancedb_table(db, name)
    assert_same(ours, tbl.to_arrow(), f"LanceDB ({how})")
    got = tbl.search().where("id >= 100 AND id < 260").select(["id"]).limit(None).to_arrow()
    assert sorted(got.column("id").to_pylist()) == want, f"LanceDB ({how}) BTREE filter"
    ds = lance.dataset(t.uri)
    assert_same(ours, ds.to_table(), "pylance 14")
    assert sorted(ds.to_table(columns=["id"], filter="id >= 100 AND id < 260").column("id").to_pylist()) == want
    got13 = lance13.read(t.uri, [t.version])[t.version]
    assert_same(ours, got13, "pylance 13")
    if vector:
        assert _search(tbl, LIVE_PROBE)[0] == LIVE_PROBE, f"LanceDB ({how}) vector search"
        assert DEAD_PROBE not in _search(tbl, DEAD_PROBE)
        nearest = {"column": "vec", "q": vector_of(LIVE_PROBE), "k": 3, "nprobes": 2, "refine_factor": 50}
        near = ds.to_table(columns=["id"], nearest=nearest)
        assert near.column("id")[0].as_py() == LIVE_PROBE, "pylance 14 vector search"
        (res,) = lance13.ok(
            t.uri,
            [{"op": "nearest", "column": "vec", "q": vector_of(LIVE_PROBE), "k": 3, "nprobes": 2, "refine_factor": 50}],
        )
        assert lance13.table(res).column("id")[0].as_py() == LIVE_PROBE, "pylance 13 vector search"


def _clients_optimize(wh, name: str, lance13, *, how: str = "plugin") -> None:
    """pylance 14 (through the plugin), pylance 13 (by path) and LanceDB optimize, in turn."""
    import lance

    t = wh.cat.load_table(name)
    ds = lance.dataset(namespace_client=wh.pylance_namespace(), table_id=name.split("."))
    ds.optimize.compact_files()
    ds = lance.dataset(namespace_client=wh.pylance_namespace(), table_id=name.split("."))
    ds.optimize.optimize_indices()
    lance13.ok(t.uri, [{"op": "optimize"}])
    lancedb_table(wh.lancedb(how), name).optimize()
    versions = [v["version"] for v in wh.cat.load_table(name).versions()]
    assert versions == list(range(versions[0], versions[0] + len(versions))), versions


@pytest.mark.slow
@pytest.mark.parametrize("stable_row_ids", [False, True], ids=["addresses", "stable-row-ids"])
def test_compaction_keeps_indices_covering_like_pylance(warehouse, lance13, tmp_path, stable_row_ids):
    """Item 8 of issue 25: on a table with stable row ids, Tessera's
    compaction leaves the indices covering what pylance 14's compaction of the
    same table leaves them covering: every row (the ids do not move).  Without
    stable row ids Tessera leaves the fragments a vector index covers alone
    (it cannot remap such an index; pylance does): the indices must still
    answer right, before and after the clients' optimize."""
    import lance

    warehouse.namespace("m")
    t = _indexed(warehouse, "m.t", stable_row_ids=stable_row_ids)
    live = t.count_rows()
    assert _index_rows(t.uri, "vec_idx") == (live, 0)
    copy = str(tmp_path / "pylance-copy")
    shutil.copytree(t.uri, copy)
    lance.dataset(copy).optimize.compact_files()
    theirs = {ix: _index_rows(copy, ix) for ix in ("vec_idx", "id_idx")}
    metrics = t.compact()
    assert t.refresh().count_rows() == live
    ours = {ix: _index_rows(t.uri, ix) for ix in ("vec_idx", "id_idx")}
    if stable_row_ids:
        assert metrics.fragments_removed == 4 and len(t.fragments) == 1, metrics
        assert ours == theirs, f"indexed/unindexed rows after compaction: Tessera {ours}, pylance 14 {theirs}"
        assert ours["vec_idx"] == (live, 0)
    else:
        assert all(sum(counts) == live for counts in ours.values()), ours
    _queries_right(warehouse, "m.t", lance13)
    _clients_optimize(warehouse, "m.t", lance13)
    assert _index_rows(t.uri, "vec_idx") == (live, 0)
    _queries_right(warehouse, "m.t", lance13)


def test_drop_columns_of_an_indexed_column_then_optimize(warehouse, lance13):
    """Item 8 of issue 25: dropping an indexed column drops its indices (as
    pylance's drop_columns does), so the clients' optimize_indices works."""
    warehouse.namespace("m")
    t = _indexed(warehouse, "m.t")
    t.drop_columns(["vec"])
    t.append(rows(450, 20, vector=True).drop_columns(["vec"]))
    indices = {ix["name"]: ix["columns"] for ix in t.refresh().list_indices()}
    assert "vec_idx" not in indices and indices.get("id_idx") == ["id"], indices
    assert all(not c.startswith("<field") for cols in indices.values() for c in cols), indices
    _clients_optimize(warehouse, "m.t", lance13)
    _queries_right(warehouse, "m.t", lance13, vector=False)


def test_cleanup_leaves_no_empty_index_folders_then_optimize(warehouse, lance13):
    """Item 8 of issue 25: clean-up removes the folders of the indices it
    deletes (pylance does); the clients' optimize and queries work after."""
    warehouse.namespace("m")
    t = _indexed(warehouse, "m.t")
    t.append(rows(450, 30))
    lancedb_table(warehouse.lancedb_plugin(), "m.t").optimize()  # replaces index segments: old folders unreferenced
    t = t.refresh()
    t.update({"s": "'after'"}, where="id < 10")
    report = t.cleanup(older_than=dt.timedelta(0), orphan_age=dt.timedelta(0))
    assert report is not None
    folder = os.path.join(t.uri, "_indices")
    empty = [d for d in os.listdir(folder) if not os.listdir(os.path.join(folder, d))]
    assert not empty, f"cleanup left empty index folders: {empty}"
    referenced = {ix["uuid"] for ix in t.refresh().list_indices()}
    assert set(os.listdir(folder)) == referenced
    _clients_optimize(warehouse, "m.t", lance13)
    _queries_right(warehouse, "m.t", lance13)


@pytest.mark.parametrize("how", ["plugin", "rest"])
def test_lancedb_restores_a_version_tessera_wrote_past(served, lance13, how):
    """Item 9 of issue 25: LanceDB creates a table, Tessera writes (and gives
    the table its incarnation), LanceDB builds indices; then LanceDB's
    ``checkout(2)`` and ``restore()`` (a manifest from before the incarnation:
    the same table, not a recreated one), through the plugin and over REST;
    then the clients' optimize, and their queries."""
    ns = served.namespace(f"restore_{how}")
    name = f"{ns}.t"
    db = served.lancedb(how)
    tbl = db.create_table("t", rows(0, 450), namespace_path=[ns])
    tbl.delete(DELETED)
    restore_point = tbl.version
    want = served.cat.load_table(name).to_arrow()
    t = served.cat.load_table(name)
    t.append(rows(1000, 20))
    t.delete("id < 50")
    tbl.checkout_latest()
    lancedb_btree(tbl)
    lancedb_ivf_pq(tbl)
    tbl.checkout(restore_point)
    tbl.restore()
    t = t.refresh()
    assert [v["version"] for v in t.versions()] == list(range(1, t.version + 1))
    assert_same(want, t.to_arrow(), "Tessera after LanceDB's restore")
    assert tbl.version == t.version
    tbl.add(rows(2000, 3))  # the restored handle writes on
    t = t.refresh()
    assert t.count_rows() == want.num_rows + 3
    # and Tessera's own restore of that version
    t.restore(restore_point)
    assert_same(want, t.refresh().to_arrow(), "Tessera's restore")
    tbl.checkout_latest()  # an index built on a version from before a restore conflicts with it (Lance's rule)
    lancedb_btree(tbl)
    _clients_optimize(served, name, lance13, how=how)
    _queries_right(served, name, lance13, how=how)


def test_clients_see_no_rows_from_a_refused_tessera_write(warehouse):
    """A write Tessera refuses (a type pylance refuses too, item 1 of issue 25)
    leaves nothing LanceDB or pylance could read."""
    import lance

    warehouse.namespace("m")
    t = warehouse.cat.create_table("m.t", rows(0, 10, vector=False))
    bad = rows(10, 1, vector=False).set_column(0, "id", pa.array(["11"]))
    with pytest.raises(tessera.errors.SchemaMismatchError) as info:
        t.append(bad)
    assert "id" in str(info.value) and "string" in str(info.value) and "int64" in str(info.value)
    assert t.refresh().version == 1
    assert lance.dataset(t.uri).count_rows() == 10
    assert lancedb_table(warehouse.lancedb_plugin(), "m.t").count_rows() == 10
