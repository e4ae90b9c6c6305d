"""Indices after Tessera's compaction follow the rows, as after pylance 14's (issue 25, item 8).

With stable row ids an index of row ids keeps covering the rewritten rows
(its fragment bitmap moves to the new fragments), pylance 14's BTREE of row
addresses is remapped into a new index, zone maps and bloom filters stop
covering the rewritten fragments; without stable row ids BTREEs are
remapped too.  Judged by pylance 14 (``index_statistics``, queries, its own
compaction of a copy of the table) and LanceDB 0.40 (``index_stats``, queries).
"""

from __future__ import annotations

import shutil
import uuid
import warnings

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

from tessera.catalog import Table
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import indices as I

lancedb = pytest.importorskip("lancedb")

D = 16
VECS = np.random.default_rng(0).standard_normal((4000, D)).astype(np.float32)
QUERIES = ["v = 170", "v < 100", "v >= 39000", "i = 1234", "i < 30", "i BETWEEN 2990 AND 3010", "tag = 't3'"]


def _data(a: int, b: int) -> pa.Table:
    i = np.arange(a, b, dtype=np.int64)
    return pa.table(
        {
            "i": i,
            "v": i * 10,
            "s": pa.array([f"w{k % 50} z{k % 7}" for k in i]),
            "tag": pa.array([f"t{k % 5}" for k in i]),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(VECS[a:b].ravel()), D),
        }
    )


def _indexed_table(lance, root, fv: str, stable: bool, n: int = 2000, existing: bool = False):
    """A table made by pylance (unless ``existing``) with indices made by LanceDB
    (BTREE on v, IVF_PQ on vec, FTS on s) and pylance 14 (BTREE on i, BITMAP on tag)."""
    path = str(root / "t.lance")
    if not existing:
        lance.write_dataset(
            _data(0, n), path, enable_stable_row_ids=stable, max_rows_per_file=300, data_storage_version=fv
        )
    db = lancedb.connect(str(root))
    lt = db.open_table("t")
    lt.create_index("v", config=lancedb.index.BTree())
    lt.create_index("vec", config=lancedb.index.IvfPq(num_partitions=4, num_sub_vectors=4))
    lt.create_index("s", config=lancedb.index.FTS())
    lance.dataset(path).create_scalar_index("i", "BTREE")
    lance.dataset(path).create_scalar_index("tag", "BITMAP")
    return path, db


def _answers(ds) -> dict:
    out = {q: sorted(ds.to_table(filter=q, columns=["i"]).column("i").to_pylist()) for q in QUERIES}
    out["fts"] = sorted(ds.to_table(full_text_query="w17", columns=["i"]).column("i").to_pylist())
    out["vec"] = ds.to_table(nearest={"column": "vec", "q": VECS[17].tolist(), "k": 5}, columns=["i"])["i"].to_pylist()
    return out


def _lancedb_answers(lt) -> dict:
    out = {q: sorted(r["i"] for r in lt.search().where(q).select(["i"]).limit(10**6).to_list()) for q in QUERIES}
    out["vec"] = [r["i"] for r in lt.search(VECS[17].tolist()).limit(5).select(["i"]).to_list()]
    return out


def _stats(ds) -> dict[str, tuple[int, int]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return {
            m["name"]: (
                ds.index_statistics(m["name"])["num_indexed_rows"],
                ds.index_statistics(m["name"])["num_unindexed_rows"],
            )
            for m in ds.list_indices()
        }


def _section(t: Table) -> dict[str, table_pb2.IndexMetadata]:
    raw = t.snapshot.mfile.index_section
    return {m.name: m for m in table_pb2.IndexSection.FromString(raw).indices} if raw else {}


@pytest.mark.parametrize("fv", ["2.0", "2.1", "2.2"])
def test_stable_row_ids_compaction_keeps_every_index_covering(lance, tmp_path, fv):
    """Small fragments merged: every index (LanceDB's BTREE, IVF_PQ and FTS,
    pylance's BTREE and BITMAP) still covers every row, answers unchanged."""
    path, db = _indexed_table(lance, tmp_path, fv, stable=True)
    ds = lance.dataset(path)
    before, before_ldb = _answers(ds), _lancedb_answers(db.open_table("t"))
    assert set(_stats(ds).values()) == {(2000, 0)}
    old = _section(Table.open(path))

    m = Table.open(path).compact(1000)
    assert m.fragments_removed == 7 and m.fragments_added == 2
    ds = lance.dataset(path)
    assert set(_stats(ds).values()) == {(2000, 0)}  # every row still indexed
    assert _answers(ds) == before
    lt = db.open_table("t")
    assert _lancedb_answers(lt) == before_ldb
    for name in ("v_idx", "vec_idx", "s_idx", "tag_idx"):
        st = lt.index_stats(name)
        assert (st.num_indexed_rows, st.num_unindexed_rows) == (2000, 0)
    new = _section(Table.open(path))
    new_ids = {f.id for f in Table.open(path).fragments}
    for name, meta in new.items():
        assert set(BitMap.deserialize(meta.fragment_bitmap)) == new_ids
        # indices of row ids keep their files; pylance 14's BTREE of row addresses is a new index
        assert (meta.uuid.uuid == old[name].uuid.uuid) == (name != "i_idx")
    ds.validate()


@pytest.mark.parametrize("deleted", ["after-the-indices", "before-the-indices"])
def test_deleted_rows_compacted_away_keep_answers_whole(lance, tmp_path, deleted):
    """Deleted rows materialised.  The exact-set indices keep covering every
    row.  A vector or FTS index built before the delete still holds the
    deleted rows' ids: it stops covering the rewritten rows, so its top-k
    answers stay whole (pylance 14 moves it and returns fewer than k rows);
    one built after the delete follows the rows, as in pylance."""
    if deleted == "after-the-indices":
        path, db = _indexed_table(lance, tmp_path, "2.1", stable=True)
        lance.dataset(path).delete("i % 7 = 3")
    else:
        path = str(tmp_path / "t.lance")
        lance.write_dataset(_data(0, 2000), path, enable_stable_row_ids=True, max_rows_per_file=300)
        lance.dataset(path).delete("i % 7 = 3")
        _, db = _indexed_table(lance, tmp_path, "2.1", stable=True, existing=True)
    ds = lance.dataset(path)
    live = ds.count_rows()
    scalar = ("v_idx", "i_idx", "tag_idx")
    before = _answers(ds)
    Table.open(path).compact(1000)
    ds = lance.dataset(path)
    stats = _stats(ds)
    assert {n: stats[n] for n in scalar} == {n: (live, 0) for n in scalar}
    ranked = (0, live) if deleted == "after-the-indices" else (live, 0)
    assert stats["vec_idx"] == stats["s_idx"] == ranked
    after = _answers(ds)
    assert {q: a for q, a in after.items() if q not in ("vec", "fts")} == {
        q: a for q, a in before.items() if q not in ("vec", "fts")
    }
    alive = np.array([k for k in range(2000) if k % 7 != 3])
    for qi in range(0, 2000, 131):
        got = ds.to_table(nearest={"column": "vec", "q": VECS[qi].tolist(), "k": 10}, columns=["i"])
        ldb = db.open_table("t").search(VECS[qi].tolist()).limit(10).select(["i"]).to_list()
        assert got.num_rows == len(ldb) == 10  # never short
        if deleted == "after-the-indices":  # searched exactly
            exact = alive[np.argsort(((VECS[alive] - VECS[qi]) ** 2).sum(1), kind="stable")[:10]].tolist()
            assert got.column("i").to_pylist() == [r["i"] for r in ldb] == exact
    for word in ("w3", "w17", "z2"):
        hits = ds.to_table(full_text_query=word, columns=["i", "s"], limit=10)
        assert hits.num_rows == 10 and all(word in s.split() for s in hits.column("s").to_pylist())
    ds.validate()


def test_btree_of_row_addresses_is_remapped_as_pylance_does(lance, tmp_path):
    """pylance 14's BTREE on a stable-row-id table holds row addresses: several
    pages, NULLs and strings, compacted by Tessera and by pylance (a copy)."""
    path, ref = str(tmp_path / "t"), str(tmp_path / "ref")
    rng = np.random.default_rng(1)

    def data(a, b):
        i = np.arange(a, b, dtype=np.int64)
        v = pa.array(rng.integers(0, 3000, b - a).astype(float), mask=(i % 11 == 0))
        s = pa.array([f"k{k % 997:04d}" if k % 13 else None for k in i])
        return pa.table({"i": i, "v": v, "s": s})

    lance.write_dataset(data(0, 12000), path, enable_stable_row_ids=True, max_rows_per_file=1500)
    for col in ("i", "v", "s"):
        lance.dataset(path).create_scalar_index(col, "BTREE")
    lance.dataset(path).delete("i % 5 = 1 AND i > 3000")
    shutil.copytree(path, ref)
    queries = ["v = 17", "v < 40", "v > 2990", "v IS NULL", "s = 'k0100'", "s IS NULL", "s >= 'k0990'", "i = 7777"]

    def answers(ds):
        return {q: sorted(ds.to_table(filter=q, columns=["i"]).column("i").to_pylist()) for q in queries}

    before = answers(lance.dataset(path))
    old = _section(Table.open(path))
    t = Table.open(path)
    t.compact(5000)
    lance.dataset(ref).optimize.compact_files(target_rows_per_fragment=5000)
    ds = lance.dataset(path)
    assert answers(ds) == before == answers(lance.dataset(ref))
    assert _stats(ds) == _stats(lance.dataset(ref)) == {n: (ds.count_rows(), 0) for n in ("i_idx", "v_idx", "s_idx")}
    rw = t.snapshot.mfile.transaction.rewrite
    assert {bytes(r.old_id.uuid) for r in rw.rewritten_indices} == {bytes(m.uuid.uuid) for m in old.values()}
    new = _section(t)
    for r in rw.rewritten_indices:
        meta = next(m for m in new.values() if m.uuid.uuid == r.new_id.uuid)
        assert r.new_index_version == meta.index_version == 1 and list(meta.files) == list(r.new_index_files)
        uid = uuid.UUID(bytes=bytes(meta.uuid.uuid))
        for f in meta.files:  # the files are where the manifest says, of the sizes it says
            assert len(t.store.read(f"_indices/{uid}/{f.path}")) == f.size
    ds.optimize.optimize_indices()  # pylance builds on the remapped index
    assert answers(lance.dataset(path)) == before
    lance.dataset(path).validate()


def test_plain_table_btrees_are_remapped(lance, tmp_path):
    """Without stable row ids every index holds row addresses: BTREEs (pylance's
    and LanceDB's) are remapped and the indexed fragments are compacted, as
    pylance does."""
    path = str(tmp_path / "t.lance")
    lance.write_dataset(_data(0, 2000), path, max_rows_per_file=300)
    db = lancedb.connect(str(tmp_path))
    db.open_table("t").create_index("v", config=lancedb.index.BTree())
    lance.dataset(path).create_scalar_index("i", "BTREE")
    lance.dataset(path).delete("i % 7 = 3")
    ds = lance.dataset(path)
    queries = QUERIES[:6]
    before = {q: sorted(ds.to_table(filter=q, columns=["i"]).column("i").to_pylist()) for q in queries}
    m = Table.open(path).compact(1000)
    assert m.fragments_removed == 7
    ds = lance.dataset(path)
    assert {q: sorted(ds.to_table(filter=q, columns=["i"]).column("i").to_pylist()) for q in queries} == before
    assert set(_stats(ds).values()) == {(ds.count_rows(), 0)}
    st = db.open_table("t").index_stats("v_idx")
    assert (st.num_indexed_rows, st.num_unindexed_rows) == (ds.count_rows(), 0)
    assert len(Table.open(path).snapshot.mfile.transaction.rewrite.rewritten_indices) == 2
    ds.validate()


def test_groups_never_mix_indexed_and_unindexed_fragments(lance, tmp_path):
    path, db = _indexed_table(lance, tmp_path, "2.1", stable=True, n=1500)
    lance.write_dataset(_data(1500, 1700), str(path), mode="append", max_rows_per_file=100)  # not indexed
    ref = str(tmp_path / "ref.lance")
    shutil.copytree(path, ref)
    ds = lance.dataset(path)
    stats = _stats(ds)
    assert set(stats.values()) == {(1500, 200)}
    before = _answers(ds)
    m = Table.open(path).compact(5000)
    assert [len(old) for old, _ in m.groups] == [5, 2]  # fragments 0-4 (indexed), 5-6 (not)
    lance.dataset(ref).optimize.compact_files(target_rows_per_fragment=5000)
    ds = lance.dataset(path)
    assert _stats(ds) == stats == _stats(lance.dataset(ref))
    assert _answers(ds) == before


def test_compaction_rebased_over_an_append_keeps_indices(lance, tmp_path):
    path, db = _indexed_table(lance, tmp_path, "2.2", stable=True, n=1200)
    stale = Table.open(path)
    Table.open(path).append(_data(1200, 1300))  # committed first; the compaction rebases over it
    before = _answers(lance.dataset(path))
    stale.compact(1000)
    t = Table.open(path)
    assert [h["operation"] for h in t.versions()][-3:] == ["append", "reserve_fragments", "rewrite"]
    ds = lance.dataset(path)
    assert set(_stats(ds).values()) == {(1200, 100)}
    assert _answers(ds) == before


def test_rewrite_section_rules():
    """Which index follows the rows, unit by unit (format.table.indices)."""

    def meta(name, kind, version=0, frags=(0, 1, 2)):
        m = table_pb2.IndexMetadata(name=name, index_version=version)
        m.uuid.uuid = name.encode().ljust(16, b"_")
        m.index_details.type_url = f"/lance.table.{kind}"
        m.fragment_bitmap = BitMap(frags).serialize()
        return m

    section = table_pb2.IndexSection(
        indices=[
            meta("vec", "VectorIndexDetails", 1),
            meta("btree0", "BTreeIndexDetails", 0),
            meta("btree1", "BTreeIndexDetails", 1),
            meta("zones", "ZoneMapIndexDetails"),
            meta("future", "SomethingNewIndexDetails"),
            meta("newer_bitmap", "BitmapIndexDetails", 7),
            meta("partial", "InvertedIndexDetails", 2, frags=(0, 2)),
        ]
    ).SerializeToString()
    txn = transaction_pb2.Transaction()
    g = txn.rewrite.groups.add()
    g.old_fragments.extend([table_pb2.DataFragment(id=0), table_pb2.DataFragment(id=1)])
    g.new_fragments.extend([table_pb2.DataFragment(id=5)])

    def bitmaps(raw):
        return {
            m.name: sorted(BitMap.deserialize(m.fragment_bitmap))
            for m in table_pb2.IndexSection.FromString(raw).indices
        }

    assert bitmaps(I.rewrite_section(txn, section, stable=True)) == {
        "vec": [2, 5],
        "btree0": [2, 5],
        "btree1": [2],  # row addresses, not remapped: stops covering the group
        "zones": [2],
        "future": [2],  # an unknown kind is taken to hold addresses
        "newer_bitmap": [2],
        "partial": [2],  # covered the group in part: cannot follow it
    }
    assert bitmaps(I.rewrite_section(txn, section, stable=False)) == {m: [0, 1, 2] for m in bitmaps(section)} | {
        "partial": [0, 2]
    }
    # a ranked index that holds ids of rows the group drops does not follow it (compaction says which)
    dropped = transaction_pb2.Transaction()
    dropped.CopyFrom(txn)
    I.set_unfollowed(dropped, [(b"vec".ljust(16, b"_"), 0)])
    assert I.unfollowed(dropped) == {b"vec".ljust(16, b"_"): {0}}
    assert bitmaps(I.rewrite_section(dropped, section, stable=True))["vec"] == [2]
    assert bitmaps(I.rewrite_section(dropped, section, stable=True))["btree0"] == [2, 5]
    r = txn.rewrite.rewritten_indices.add()
    r.old_id.uuid = b"btree1".ljust(16, b"_")
    r.new_id.uuid = b"remapped".ljust(16, b"_")
    r.new_index_version = 1
    r.new_index_files.add(path="page_data.lance", size=10)
    out = {m.name: m for m in table_pb2.IndexSection.FromString(I.rewrite_section(txn, section, stable=True)).indices}
    assert out["btree1"].uuid.uuid == r.new_id.uuid
    assert sorted(BitMap.deserialize(out["btree1"].fragment_bitmap)) == [2, 5]
    assert [f.path for f in out["btree1"].files] == ["page_data.lance"]
