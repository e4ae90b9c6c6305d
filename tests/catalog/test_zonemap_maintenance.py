"""Zone maps kept current by every write path, shared with pylance 14 both ways."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pytest

import tessera
from tessera.catalog import Table
from tessera.catalog.table.indexes import ZONEMAP_COLUMNS
from tessera.commit.builder import build_index_section
from tessera.commit.errors import IndexReplacedError
from tessera.format.table import zonemap as zm

lance = pytest.importorskip("lance")

WHERE = "key >= 30000 AND key < 31000"


def _rows(lo: int, hi: int) -> pa.Table:
    key = np.arange(lo, hi, dtype=np.int64)
    v = key * 0.5
    v[::97] = np.nan
    s = pa.array([None if k % 13 == 0 else f"s{k % 1000:04d}" for k in key])
    return pa.table({"key": key, "v": v, "s": s})


def _expected(t: Table, where: str = WHERE) -> list:
    """The answer without any index: every fragment read whole, the filter applied."""
    scan = t.scanner(filter=where)
    scan.row_ranges = None
    return sorted(scan.to_table().column("key").to_pylist())


def _covered(t: Table) -> None:
    """Each maintained column has exactly one zone map, covering every fragment."""
    idx = [i for i in t.list_indices() if i["type"] == "ZONEMAP"]
    frags = {f.id for f in t.fragments}
    for col in {c for i in idx for c in i["columns"]}:
        mine = [i for i in idx if i["columns"] == [col]]
        assert len(mine) == 1, mine
        assert frags <= set(mine[0]["fragments"]), (col, frags, mine[0]["fragments"])


def _check(t: Table, where: str = WHERE) -> dict:
    want = _expected(t, where)
    scan = t.scanner(filter=where)
    got = sorted(scan.to_table().column("key").to_pylist())
    assert got == want
    assert sorted(lance.dataset(t.uri).to_table(filter=where).column("key").to_pylist()) == want
    return scan.stats


@pytest.fixture
def table(tmp_path):
    return Table.create(str(tmp_path / "t"), _rows(0, 60_000), max_rows_per_file=10_000)


def test_create_index_prunes_and_pylance_uses_it(table):
    assert table.create_index("key") is table
    (idx,) = table.list_indices()
    assert idx["name"] == "key_idx" and idx["type"] == "ZONEMAP" and idx["columns"] == ["key"]
    assert idx["fragments"] == [f.id for f in table.fragments]
    stats = _check(table)
    assert stats["fragments"] == 1 and stats["pruned_fragments"] == 5, stats
    ds = lance.dataset(table.uri)
    assert "key_idx(ZoneMap)" in ds.scanner(filter=WHERE).explain_plan()
    (desc,) = ds.describe_indices()
    assert desc.num_rows_indexed == 60_000
    # strings and floats (NULLs, NaN) too; pylance's answers equal ours
    table.create_index("s", rows_per_zone=1000)
    table.create_index("v")
    for where in ("s = 's0042'", "s >= 's0990'", "v > 29000.0 AND v < 29100.0", "v IS NULL", "s IS NULL"):
        _check(table, where)
    assert {i["name"] for i in table.list_indices()} == {"key_idx", "s_idx", "v_idx"}


def test_every_write_path_keeps_the_index_covering(table):
    table.create_index("key")
    table.append(_rows(60_000, 65_000))
    _covered(table)
    stats = _check(table, "key >= 61000 AND key < 61500")
    assert stats["fragments"] == 1, stats
    table.update({"v": "v + 1"}, where="key < 2000")
    _covered(table)
    _check(table, "key < 100")
    out = table.merge_insert(_rows(64_000, 66_000), on="key")
    assert out["num_inserted_rows"] == 1000
    _covered(table)
    _check(table, "key >= 65500")
    table.add_columns({"w": "key * 2"})
    _covered(table)
    table.delete("key % 2 = 0")
    _check(table)
    m = table.compact(target_rows_per_fragment=30_000)
    assert m.fragments_removed > 0
    _covered(table)
    stats = _check(table)
    full = table.scanner()
    full.to_table()
    assert stats["bytes_read"] < full.stats["bytes_read"] / 2, (stats, full.stats)  # zones inside the fragments
    # overwrite drops the index; the property brings it back on the next write
    table.set_properties({ZONEMAP_COLUMNS: "key"})
    table.overwrite(_rows(0, 20_000))
    _covered(table)
    assert [i["columns"] for i in table.list_indices()] == [["key"]]
    _check(table, "key = 123")


def test_sorted_compaction_indexes_its_sort_column(tmp_path):
    rng = np.random.default_rng(7)
    key = rng.permutation(40_000).astype(np.int64)
    t = Table.create(str(tmp_path / "t"), pa.table({"key": key, "x": key % 7}), max_rows_per_file=5_000)
    assert t.list_indices() == []
    t.compact(target_rows_per_fragment=10_000, sort_by="key")
    (idx,) = t.list_indices()
    assert idx["columns"] == ["key"] and set(idx["fragments"]) == {f.id for f in t.fragments}
    stats = _check(t, "key >= 12000 AND key < 12400")
    assert stats["fragments"] == 1 and stats["pruned_fragments"] == 3, stats
    # an explicit (empty) property turns the default off
    t2 = Table.create(str(tmp_path / "t2"), pa.table({"key": key}), max_rows_per_file=5_000)
    t2.set_properties({ZONEMAP_COLUMNS: ""})
    t2.compact(target_rows_per_fragment=10_000, sort_by="key")
    assert t2.list_indices() == []


def test_property_names_columns_and_bad_input_is_typed(table):
    table.set_properties({ZONEMAP_COLUMNS: "key, s"})
    assert table.properties[ZONEMAP_COLUMNS] == "key, s"
    assert sorted(i["columns"][0] for i in table.list_indices()) == ["key", "s"]
    version = table.version
    with pytest.raises(tessera.errors.UnknownColumnError):
        table.set_properties({ZONEMAP_COLUMNS: "nope"})
    with pytest.raises(tessera.errors.InvalidArgumentError):
        table.set_properties({"tessera.commit.coordinator": "redis"})
    with pytest.raises(tessera.errors.InvalidArgumentError):
        table.set_properties({"k": 1})  # type: ignore[dict-item]
    with pytest.raises(tessera.errors.InvalidArgumentError):
        table.create_index("key", "btree")
    with pytest.raises(tessera.errors.InvalidArgumentError):
        table.create_index("key", rows_per_zone=0)
    with pytest.raises(tessera.errors.UnknownColumnError):
        table.create_index("nope")
    t = Table.create(table.uri + "2", pa.table({"l": pa.array([[1], [2]])}))
    with pytest.raises(tessera.errors.InvalidArgumentError):
        t.create_index("l")
    assert table.version == version  # nothing committed by a refused call
    table.set_properties(remove=[ZONEMAP_COLUMNS])
    assert ZONEMAP_COLUMNS not in table.properties


def test_an_empty_table_is_indexed_by_its_first_write(tmp_path):
    t = Table.create(str(tmp_path / "t"), pa.schema([("key", pa.int64())]))
    t.create_index("key")
    assert t.list_indices() == [] and t.properties[ZONEMAP_COLUMNS] == "key"
    t.append(pa.table({"key": np.arange(100, dtype=np.int64)}))
    _covered(t)
    assert len(t.list_indices()) == 1


def test_a_failed_index_commit_leaves_right_answers_and_the_next_write_catches_up(table, monkeypatch, caplog):
    table.create_index("key")

    def broken(*a, **k):
        raise OSError("disk full while writing the zone map")

    monkeypatch.setattr(zm, "write_zones", broken)
    with caplog.at_level(logging.WARNING):
        table.append(_rows(60_000, 62_000))  # the data commit stands; the index update failed
    assert "zone maps not updated" in caplog.text
    assert table.count_rows() == 62_000
    (idx,) = table.list_indices()
    assert table.fragments[-1].id not in idx["fragments"]  # the new fragment is read whole ...
    stats = _check(table, "key < 100")  # ... and answers stay right
    assert stats["fragments"] == 2 and stats["pruned_fragments"] == 5, stats  # fragment 0 and the new one
    monkeypatch.undo()
    table.append(_rows(62_000, 63_000))
    _covered(table)


def test_a_concurrent_index_update_is_rebuilt_on_the_latest(table):
    table.create_index("key")
    other = Table.open(table.uri)
    table.append(_rows(60_000, 61_000))  # replaces the index (new uuid)
    other.append(_rows(61_000, 62_000))  # its index update found the old one gone: rebuilt on the latest
    _covered(other)
    assert other.count_rows() == 62_000
    assert len(other.list_indices()) == 1
    _check(other, "key >= 60500 AND key < 61500")
    # two writers update the same index from one version: the second rebuilds on the first's
    lance.write_dataset(_rows(62_000, 63_000), table.uri, mode="append")
    h1, h2 = Table.open(table.uri), Table.open(table.uri)
    h1.optimize_indices()
    assert h1.version == h2.version + 1
    h2.optimize_indices()  # conflicts, re-runs on the latest and finds nothing left to do
    latest = Table.open(table.uri)
    assert latest.version == h1.version
    (idx,) = latest.list_indices()
    assert idx == h1.list_indices()[0]
    _covered(latest)


def test_build_index_section_refuses_a_replaced_index():
    a = zm.table_pb2.IndexMetadata(name="a")
    a.uuid.uuid = b"1" * 16
    b = zm.table_pb2.IndexMetadata(name="a")
    b.uuid.uuid = b"2" * 16
    section = zm.table_pb2.IndexSection(indices=[a]).SerializeToString()
    from tessera.commit.operation import new_transaction

    txn = new_transaction(1)
    txn.create_index.new_indices.append(b)
    txn.create_index.removed_indices.append(a)
    got = zm.table_pb2.IndexSection.FromString(build_index_section(txn, section, version=1))
    assert [m.uuid.uuid for m in got.indices] == [b"2" * 16]
    with pytest.raises(IndexReplacedError):
        build_index_section(txn, zm.table_pb2.IndexSection(indices=[b]).SerializeToString(), version=2)
    txn2 = new_transaction(1)
    txn2.create_index.new_indices.append(b)
    with pytest.raises(IndexReplacedError):  # same name, not replacing it
        build_index_section(txn2, section, version=1)


def test_pylance_and_tessera_maintain_each_others_zone_maps(tmp_path):
    uri = str(tmp_path / "t")
    lance.write_dataset(_rows(0, 40_000), uri, max_rows_per_file=10_000)
    ds = lance.dataset(uri)
    ds.create_scalar_index("key", "ZONEMAP")
    t = Table.open(uri)
    stats = _check(t)
    assert stats["pruned_fragments"] == 3, stats
    t.append(_rows(40_000, 45_000))  # Tessera extends pylance's index
    _covered(t)
    ds = lance.dataset(uri)
    assert ds.describe_indices()[0].num_rows_indexed == 45_000
    # pylance appends (unindexed), then its optimize_indices covers them
    lance.write_dataset(_rows(45_000, 50_000), uri, mode="append")
    ds = lance.dataset(uri)
    ds.optimize.optimize_indices()
    t = Table.open(uri)
    _covered(t)
    stats = _check(t, "key >= 46000 AND key < 47000")
    assert stats["fragments"] == 1, stats
    # pylance compacts a Tessera-maintained table; Tessera's answers stay right and its next write re-covers
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=20_000)
    t = Table.open(uri)
    _check(t)
    t.optimize_indices()
    _covered(t)
    stats = _check(t)
    assert stats["pruned_fragments"] >= 1, stats
    # a pylance delete, then Tessera's compaction (zone maps never block it)
    lance.dataset(uri).delete("key % 3 = 0")
    t = Table.open(uri)
    t.compact(target_rows_per_fragment=25_000)
    _covered(t)
    _check(t)
    lance.dataset(uri).optimize.optimize_indices()
    _check(Table.open(uri))


def test_five_unindexed_appends_then_an_index_update_prune_again(tmp_path):
    uri = str(tmp_path / "t")
    n = 1_000_000  # 20 fragments sorted by key
    t = Table.create(
        uri, pa.table({"key": np.arange(n, dtype=np.int64), "x": np.arange(n) * 1.0}), max_rows_per_file=50_000
    )
    t.create_index("key")
    for i in range(5):  # pylance appends: no index maintenance
        lo = n + i * 10_000
        lance.write_dataset(
            pa.table({"key": np.arange(lo, lo + 10_000, dtype=np.int64), "x": np.zeros(10_000)}), uri, mode="append"
        )
    t = Table.open(uri)
    where = "key >= 500000 AND key < 510000"  # 1% of the rows
    full = t.scanner()
    full.to_table()
    before = t.scanner(filter=where)
    assert before.to_table().num_rows == 10_000
    assert before.stats["fragments"] == 6  # the indexed one and the five unindexed appends
    t.optimize_indices()
    after = t.scanner(filter=where)
    assert after.to_table().num_rows == 10_000
    assert after.stats["fragments"] <= 2, after.stats
    assert after.stats["bytes_read"] <= 0.03 * full.stats["bytes_read"], (after.stats, full.stats)


def test_index_commits_through_an_external_store(tmp_path):
    cat = tessera.connect(warehouse=str(tmp_path / "wh"))
    cat.create_namespace("n")
    t = cat.create_table("n.t", _rows(0, 30_000))
    t.create_index("key")
    t.append(_rows(30_000, 40_000))
    _covered(t)
    t2 = cat.load_table("n.t")
    assert t2.version == t.version
    stats = _check(t2)
    assert stats["fragments"] == 1, stats


def test_cleanup_removes_replaced_zone_maps_and_keeps_the_live_one(table, tmp_path):
    import datetime as dt
    import os

    table.create_index("key")
    for i in range(3):
        table.append(_rows(60_000 + i * 1000, 61_000 + i * 1000))
    root = table.uri
    dirs = set(os.listdir(os.path.join(root, "_indices")))
    assert len(dirs) == 4  # one per index commit
    (live,) = [i["uuid"] for i in table.list_indices()]
    os.makedirs(os.path.join(root, "_indices", "orphan-of-a-failed-commit"))
    with open(os.path.join(root, "_indices", "orphan-of-a-failed-commit", "zonemap.lance"), "wb") as f:
        f.write(b"x")
    dry = table.cleanup(older_than=dt.timedelta(0), orphan_age=dt.timedelta(0), dry_run=True)
    assert set(os.listdir(os.path.join(root, "_indices"))) == dirs | {"orphan-of-a-failed-commit"}
    report = table.cleanup(older_than=dt.timedelta(0), orphan_age=dt.timedelta(0))
    assert sorted(report.removed_files) == sorted(dry.removed_files)
    assert len([p for p in report.removed_files if p.startswith("_indices/")]) == 3
    assert {p for p in report.orphans.removed if p.startswith("_indices/")} == {
        "_indices/orphan-of-a-failed-commit/zonemap.lance"
    }
    assert [d for d in os.listdir(os.path.join(root, "_indices")) if os.listdir(os.path.join(root, "_indices", d))] == [
        live
    ]
    _check(Table.open(root))
    assert "key_idx(ZoneMap)" in lance.dataset(root).scanner(filter=WHERE).explain_plan()


def test_a_catalog_transaction_leaves_its_tables_indexed(tmp_path):
    cat = tessera.connect(warehouse=str(tmp_path / "wh"))
    cat.create_namespace("n")
    a = cat.create_table("n.a", _rows(0, 20_000), commit_store="catalog")
    a.create_index("key")
    cat.create_table("n.b", _rows(0, 10), commit_store="catalog")
    with cat.transaction() as tx:
        tx.load_table("n.a").append(_rows(20_000, 21_000))
        tx.load_table("n.b").delete("key = 1")
    a = cat.load_table("n.a")
    _covered(a)
    stats = _check(a, "key >= 20500")
    assert stats["fragments"] == 1, stats
    assert cat.load_table("n.b").list_indices() == []
