"""The conflict matrix, table-driven: unit level for every operation pair, and
end to end with real tables for the pairs users hit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import errors as E
from tessera.catalog.table import Table, mutations
from tessera.commit import conflicts
from tessera.commit.conflicts import MATRIX, Verdict
from tessera.format.protos import table_pb2, transaction_pb2

OPS = [
    "append",
    "delete",
    "update",
    "overwrite",
    "create_index",
    "rewrite",
    "merge",
    "project",
    "data_replacement",
    "update_config",
    "reserve_fragments",
    "restore",
]


def _txn(op: str, frags=(), removed=()) -> transaction_pb2.Transaction:
    t = transaction_pb2.Transaction(uuid=op)
    body = getattr(t, op)
    body.SetInParent()
    if op == "delete":
        for f in frags:
            body.updated_fragments.add(id=f)
        body.deleted_fragment_ids.extend(removed)
    elif op == "update":
        for f in frags:
            body.updated_fragments.add(id=f)
        body.removed_fragment_ids.extend(removed)
    elif op == "rewrite":
        g = body.groups.add()
        for f in frags:
            g.old_fragments.add(id=f)
    elif op == "data_replacement":
        for f in frags:
            body.replacements.add(fragment_id=f)
    elif op == "create_index":
        from pyroaring import BitMap

        body.new_indices.add(name="idx", fragment_bitmap=BitMap(frags).serialize())
    return t


def _outcome(ours: str, theirs: str, frags_ours=(1,), frags_theirs=(1,)) -> str:
    base = {i: table_pb2.DataFragment(id=i) for i in range(4)}
    plan = conflicts.Rebase()
    try:
        conflicts.check(_txn(ours, frags_ours), _txn(theirs, frags_theirs), base, plan)
    except conflicts.Incompatible:
        return "X"
    except conflicts.RetryableConflict:
        return "R"
    return "merge" if plan.needs_merge else "C"


@pytest.mark.parametrize("ours", OPS)
@pytest.mark.parametrize("theirs", OPS)
def test_matrix_cell(ours, theirs):
    verdict = MATRIX[(ours, theirs)]
    got_overlap = _outcome(ours, theirs)
    got_disjoint = _outcome(ours, theirs, (1,), (2,))
    if verdict is Verdict.COMPATIBLE:
        assert got_overlap == got_disjoint == "C"
    elif verdict is Verdict.INCOMPATIBLE:
        assert got_overlap == got_disjoint == "X"
    elif verdict is Verdict.RETRYABLE:
        assert got_overlap == got_disjoint == "R"
    else:  # compatible unless they overlap
        assert got_disjoint == "C"
        if ours in ("delete", "update") and theirs in ("delete", "update"):
            assert got_overlap == "merge"  # same fragment: deletion vectors are merged
        elif {ours, theirs} & {"overwrite", "update_config"}:
            assert got_overlap == "C"  # no shared config keys
        else:
            assert got_overlap == "R"


def test_missing_transaction_is_a_conflict():
    with pytest.raises(conflicts.RetryableConflict):
        conflicts.check(_txn("append"), None, {}, conflicts.Rebase())


def test_removed_fragment_is_retryable():
    plan = conflicts.Rebase()
    with pytest.raises(conflicts.RetryableConflict):
        conflicts.check(_txn("delete", (1,)), _txn("delete", (), (1,)), {1: table_pb2.DataFragment(id=1)}, plan)


# ---- end to end --------------------------------------------------------------------


def _pair(tmp_path, n=100):
    path = str(tmp_path / "t")
    a = Table.create(path, pa.table({"i": np.arange(n, dtype=np.int64), "v": np.zeros(n)}))
    return path, a, Table.open(path)


def _ids(path):
    return sorted(Table.open(path).to_arrow().column("i").to_pylist())


def test_disjoint_deletes_on_one_fragment_rebase_without_rerun(tmp_path, monkeypatch):
    path, a, b = _pair(tmp_path)
    calls = []
    real = mutations.build_delete
    monkeypatch.setattr(mutations, "build_delete", lambda *x: calls.append(1) or real(*x))
    a.delete("i < 10")
    b.delete("i >= 40 AND i < 50")  # same fragment, other rows: merged, not re-run
    assert len(calls) == 2  # one build each: b was rebased, not re-executed
    assert _ids(path) == [i for i in range(100) if not (i < 10 or 40 <= i < 50)]
    assert Table.open(path).count_rows() == 80


def test_overlapping_deletes_are_rerun(tmp_path, monkeypatch):
    path, a, b = _pair(tmp_path)
    calls = []
    real = mutations.build_delete
    monkeypatch.setattr(mutations, "build_delete", lambda *x: calls.append(1) or real(*x))
    a.delete("i < 20")
    b.delete("i >= 10 AND i < 30")  # rows 10..19 deleted by both: retryable, re-run
    assert len(calls) == 3
    assert _ids(path) == list(range(30, 100))
    t = Table.open(path)
    assert t.count_rows() == 70 and t.fragments[0].deletion_file.num_deleted_rows == 30


def test_updates_same_rows_rerun(tmp_path):
    path, a, b = _pair(tmp_path)
    a.update({"v": 1.0}, where="i < 5")
    b.update({"v": 2.0}, where="i < 5")
    t = Table.open(path).to_arrow(filter="i < 5")
    assert t.num_rows == 5 and set(t.column("v").to_pylist()) == {2.0}
    assert Table.open(path).count_rows() == 100


def test_overwrite_then_stale_append_is_incompatible(tmp_path):
    path, a, b = _pair(tmp_path)
    a.overwrite(pa.table({"i": np.arange(3, dtype=np.int64), "v": np.zeros(3)}))
    with pytest.raises(E.IncompatibleTransactionError):
        b.append(pa.table({"i": [1000], "v": [0.0]}))
    assert _ids(path) == [0, 1, 2]


def test_append_then_stale_overwrite_wins(tmp_path):
    path, a, b = _pair(tmp_path)
    a.append(pa.table({"i": [1000], "v": [0.0]}))
    b.overwrite(pa.table({"i": np.arange(3, dtype=np.int64), "v": np.zeros(3)}))
    assert _ids(path) == [0, 1, 2]


def test_append_then_stale_add_columns_reruns(tmp_path):
    path, a, b = _pair(tmp_path)
    a.append(pa.table({"i": [1000], "v": [0.0]}))
    b.add_columns({"w": "i * 2"})  # Merge preempted by Append: re-run, so the new row gets w too
    t = Table.open(path).to_arrow(filter="i = 1000")
    assert t.column("w").to_pylist() == [2000]


def test_drop_then_stale_add_columns_is_incompatible(tmp_path):
    path, a, b = _pair(tmp_path)
    a.drop_columns(["v"])
    with pytest.raises(E.IncompatibleTransactionError):
        b.add_columns({"w": "i * 2"})
    assert Table.open(path).schema.names == ["i"]


def test_restore_then_stale_append_is_incompatible(tmp_path):
    path, a, b = _pair(tmp_path)
    a.append(pa.table({"i": [1000], "v": [0.0]}))
    b2 = Table.open(path)
    a.restore(1)
    with pytest.raises(E.IncompatibleTransactionError):
        b2.append(pa.table({"i": [2000], "v": [0.0]}))
    assert _ids(path) == list(range(100))
