"""The change data feed (``Table.changes``) and the row-lineage columns
(``_row_created_at_version``, ``_row_last_updated_at_version``) in scans,
checked against what pylance 14 reads from the same tables."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from tessera.catalog import errors as E
from tessera.catalog.table import Table

LINEAGE = ["_row_created_at_version", "_row_last_updated_at_version"]


def _rows(ids, v) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(v, pa.string())})


def _history(path: str, stable: bool) -> Table:
    t = Table.create(path, _rows([1, 2, 3], ["a", "b", "c"]), stable_row_ids=stable)  # v1
    t.append(_rows([4], ["d"]))  # v2
    t.update({"v": "'B'"}, where="id = 2")  # v3
    t.delete("id = 3")  # v4
    return t


def _feed(t: Table, *args, **kw) -> list[tuple]:
    c = t.changes(*args, **kw)
    return [(r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in c.to_pylist()]


@pytest.mark.parametrize("stable", [True, False])
def test_lineage_columns_read_as_pylance_reads_them(tmp_path, stable):
    path = str(tmp_path / "t")
    t = _history(path, stable)
    t.merge_insert(on="id").when_matched_update_all().when_not_matched_insert_all().execute(_rows([1, 9], ["A", "z"]))
    cols = ["id", "v", *LINEAGE, "_rowid"]
    ours = t.to_arrow(columns=cols)
    theirs = lance.dataset(path).to_table(columns=cols)
    assert ours.sort_by("id").to_pydict() == theirs.sort_by("id").to_pydict()
    assert ours.schema.field(LINEAGE[0]).type == pa.uint64()
    if stable:  # the values say something: rows created and updated at different versions
        by_id = {r["id"]: r for r in ours.to_pylist()}
        assert by_id[4]["_row_created_at_version"] == 2 and by_id[2]["_row_last_updated_at_version"] == 3
    # the same through the paths that read small fragments together and through batches
    one_by_one = pa.Table.from_batches(list(t.to_batches(columns=["id", LINEAGE[1]], batch_size=1)))
    assert one_by_one.sort_by("id").to_pydict() == theirs.select(["id", LINEAGE[1]]).sort_by("id").to_pydict()
    assert ours.schema == theirs.schema  # the special columns typed as pylance's (nullable uint64)


def test_pylance_reads_lineage_of_a_table_tessera_compacted(tmp_path):
    path = str(tmp_path / "t")
    t = _history(path, True)
    before = t.to_arrow(columns=["id", *LINEAGE]).sort_by("id")
    t.compact()
    assert t.to_arrow(columns=["id", *LINEAGE]).sort_by("id") == before
    assert lance.dataset(path).to_table(columns=["id", *LINEAGE]).sort_by("id") == before


def test_change_feed_with_stable_row_ids_is_exact(tmp_path):
    t = _history(str(tmp_path / "t"), True)
    t.compact()  # moves rows, changes none
    compacted = t.version
    t.merge_insert(on="id").when_matched_update_all().when_not_matched_insert_all().execute(_rows([1, 9], ["A", "z"]))
    feed = _feed(t, 1)
    assert feed == [
        (1, "a", "insert", 1),
        (2, "b", "insert", 1),
        (3, "c", "insert", 1),
        (4, "d", "insert", 2),
        (2, "b", "update_preimage", 3),
        (2, "B", "update_postimage", 3),
        (3, "c", "delete", 4),
        (1, "a", "update_preimage", t.version),
        (1, "A", "update_postimage", t.version),
        (9, "z", "insert", t.version),
    ]
    assert not [r for r in feed if r[3] == compacted]
    c = t.changes(1)
    assert c.schema.metadata[b"tessera.changes.exact"] == b"true"
    assert c.schema.names == ["id", "v", "_change_type", "_commit_version", "_commit_timestamp"]
    assert c.column("_commit_timestamp").type == pa.timestamp("us", tz="UTC")


def test_change_feed_without_stable_row_ids_says_it_is_not_exact(tmp_path):
    t = _history(str(tmp_path / "t"), False)
    t.compact()  # a rewrite: no change, although every row moved
    feed = _feed(t, 3)
    assert feed == [(2, "b", "delete", 3), (2, "B", "insert", 3), (3, "c", "delete", 4)]
    assert t.changes(3).schema.metadata[b"tessera.changes.exact"] == b"false"
    assert t.changes(4).schema.metadata[b"tessera.changes.exact"] == b"true"  # a delete alone is exact


def test_ranges_columns_and_old_versions(tmp_path):
    t = _history(str(tmp_path / "t"), True)
    assert _feed(t, 2, 2) == [(4, "d", "insert", 2)]
    assert t.changes(3, columns=["v"]).column_names[:1] == ["v"]
    old = t.checkout(2)
    assert [r[2] for r in _feed(old, 1)] == ["insert"] * 4  # a pinned table's feed ends at its version
    t.add_columns({"w": "id * 10"})
    t.append(pa.table({"id": pa.array([7], pa.int64()), "v": ["g"], "w": pa.array([70], pa.int64())}))
    c = t.changes(1)
    assert c.column_names[:3] == ["id", "v", "w"]  # the range's last schema; NULL where a version lacked it
    rows = {(r["id"], r["_change_type"]): r["w"] for r in c.to_pylist()}
    assert rows[(1, "insert")] is None and rows[(7, "insert")] == 70


def test_overwrite_and_restore(tmp_path):
    t = _history(str(tmp_path / "t"), True)
    t.overwrite(_rows([10], ["x"]))
    v = t.version
    feed = _feed(t, v)
    assert sorted(feed) == sorted([(1, "a", "delete", v), (2, "B", "delete", v), (4, "d", "delete", v),
                                   (10, "x", "insert", v)])  # fmt: skip
    t.restore(2)
    back = _feed(t, t.version)
    assert sorted(r[0] for r in back if r[2] == "insert") == [1, 2, 3, 4]
    assert [r[0] for r in back if r[2] == "delete"] == [10]


def test_bad_ranges_are_refused(tmp_path):
    t = _history(str(tmp_path / "t"), True)
    for args in [(0,), (3, 2), ("1",), (1, 99)]:
        with pytest.raises((E.InvalidArgumentError, E.VersionNotFoundError)):
            t.changes(*args)
    with pytest.raises(E.TesseraError):
        t.changes(1, columns=["nope"])


@pytest.mark.parametrize(
    "where",
    [
        "_row_last_updated_at_version > 2",
        "_row_created_at_version = 2",
        "_rowid >= 2",
        "_rowaddr > 4294967295 AND id > 3",
        "id > 0 AND _row_last_updated_at_version = 1",
    ],
)
def test_filters_on_special_columns_match_pylance(tmp_path, where):
    """pylance filters on row ids, addresses and lineage; so does Tessera,
    through every read path: small fragments read together, one fragment at a
    time, and a count that reads no column."""
    path = str(tmp_path / "t")
    t = _history(path, True)
    for k in range(5):  # small fragments: read together
        t.append(_rows([100 + k], [f"s{k}"]))
    ds = lance.dataset(path)
    assert t.to_arrow(filter=where).sort_by("id") == ds.to_table(filter=where).sort_by("id")
    assert t.count_rows(where) == ds.count_rows(where)
    assert t.to_arrow(columns=["v"], filter=where).num_rows == ds.count_rows(where)


def test_only_changed_fragments_are_read(tmp_path, monkeypatch):
    """The feed's cost follows what changed, not the table's size: a version
    that appends one fragment to 40, or deletes a row of one, reads that
    fragment only (pinned: fragments opened by the feed)."""
    from tessera.catalog.table import changes as feed

    t = Table.create(str(tmp_path / "t"), _rows(list(range(400)), ["x"] * 400), max_rows_per_file=10)
    assert len(t.fragments) == 40
    opened: list[int] = []
    real = feed.FragmentReader

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, store, fragment, fields, *a, **kw):
            opened.append(fragment.id)
            super().__init__(store, fragment, fields, *a, **kw)

    monkeypatch.setattr(feed, "FragmentReader", Counting)
    t.append(_rows([1000], ["y"]))
    assert [r[0] for r in _feed(t, t.version)] == [1000]
    assert set(opened) == {t.fragments[-1].id}
    opened.clear()
    t.delete("id = 15")
    assert _feed(t, t.version) == [(15, "x", "delete", t.version)]
    assert set(opened) == {1}  # the fragment of rows 10-19
