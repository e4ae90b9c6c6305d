"""merge_insert gives pylance's answers: duplicate target keys are each
updated, a target row matched twice is refused, NULL keys never match; the
pylance-style builder works the same way."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tessera import errors as E
from tessera.catalog import Table


def _t(keys, vals):
    return pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array(vals, pa.string())})


def _rows(table) -> list[tuple]:
    return sorted((r["k"] is None, r["k"] or 0, r["v"]) for r in table.to_pylist())


CASES = [
    ("duplicate target keys", [1, 2, 2], ["a", "b", "c"], [2], ["z"]),
    ("duplicate source keys matching nothing", [1], ["a"], [3, 3], ["x", "y"]),
    ("null keys never match", [1, None], ["a", "n"], [None, 1], ["z", "y"]),
    ("null source keys", [1, None], ["a", "n"], [None, None], ["z", "y"]),
    ("plain upsert", [1, 2, 3], ["a", "b", "c"], [3, 4], ["x", "y"]),
]


@pytest.mark.parametrize("flags", [(True, True), (True, False), (False, True)], ids=["upsert", "update", "insert"])
@pytest.mark.parametrize("name,tkeys,tvals,skeys,svals", CASES, ids=[c[0] for c in CASES])
def test_merge_insert_matches_pylance(tmp_path, lance, name, tkeys, tvals, skeys, svals, flags):
    update, insert = flags
    ours = Table.create(str(tmp_path / "ours"), _t(tkeys, tvals))
    theirs = lance.write_dataset(_t(tkeys, tvals), str(tmp_path / "theirs"))
    b = theirs.merge_insert("k")
    if update:
        b = b.when_matched_update_all()
    if insert:
        b = b.when_not_matched_insert_all()
    expected = b.execute(_t(skeys, svals))
    got = ours.merge_insert(_t(skeys, svals), "k", when_matched_update_all=update, when_not_matched_insert_all=insert)
    assert got == expected
    after = lance.dataset(str(tmp_path / "theirs")).to_table()
    assert _rows(Table.open(str(tmp_path / "ours")).to_arrow()) == _rows(after)
    # the builder gives the same answer
    built = Table.create(str(tmp_path / "built"), _t(tkeys, tvals)).merge_insert("k")
    if update:
        built = built.when_matched_update_all()
    if insert:
        built = built.when_not_matched_insert_all()
    assert built.execute(_t(skeys, svals)) == expected
    assert _rows(Table.open(str(tmp_path / "built")).to_arrow()) == _rows(after)


def test_the_exact_report_target_keys_1_2_2(tmp_path):
    t = Table.create(str(tmp_path / "t"), _t([1, 2, 2], ["a", "b", "c"]))
    stats = t.merge_insert(_t([2], ["z"]), on="k", when_not_matched_insert_all=False)
    assert stats == {"num_updated_rows": 2, "num_inserted_rows": 0, "num_deleted_rows": 0}
    assert _rows(t.to_arrow()) == [(False, 1, "a"), (False, 2, "z"), (False, 2, "z")]


def test_a_target_row_matched_twice_is_refused_and_nothing_is_written(tmp_path, lance):
    t = Table.create(str(tmp_path / "t"), _t([1, 2], ["a", "b"]))
    with pytest.raises(E.InvalidArgumentError, match="ambiguous"):
        t.merge_insert(_t([2, 2], ["y", "z"]), on="k")
    with pytest.raises(OSError, match="Ambiguous"):  # pylance refuses the same input
        lance.write_dataset(_t([1, 2], ["a", "b"]), str(tmp_path / "p")).merge_insert(
            "k"
        ).when_matched_update_all().when_not_matched_insert_all().execute(_t([2, 2], ["y", "z"]))
    again = Table.open(str(tmp_path / "t"))
    assert again.version == 1 and _rows(again.to_arrow()) == [(False, 1, "a"), (False, 2, "b")]


def test_builder_without_clauses_and_bad_keys(tmp_path):
    t = Table.create(str(tmp_path / "t"), _t([1], ["a"]))
    with pytest.raises(E.InvalidArgumentError, match="not configured"):
        t.merge_insert("k").execute(_t([1], ["b"]))
    with pytest.raises(E.InvalidArgumentError, match="key columns"):
        t.merge_insert(_t([1], ["b"]))
    with pytest.raises(E.UnknownColumnError):
        t.merge_insert(["nope"]).when_matched_update_all().execute(_t([1], ["b"]))
