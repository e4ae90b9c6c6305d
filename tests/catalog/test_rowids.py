"""Move-stable row ids: sequences, the row id index, take_rows, concurrency,
interop with pylance 14 both ways, and a property test against a model."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import threading

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.catalog import Table
from tessera.catalog.errors import DuplicateRowIdError, InvalidArgumentError, RowIdNotFoundError
from tessera.catalog.table.rowid_index import RowIdIndex
from tessera.commit.operation import commit_transaction, new_transaction
from tessera.format.file import schema as lschema
from tessera.format.protos import rowids_pb2
from tessera.format.table import rowids as R
from tessera.format.table.fragments import write_fragments
from tessera.stores.registry import open_object_store

RNG = np.random.default_rng(7)


def _data(a: int, b: int) -> pa.Table:
    i = np.arange(a, b, dtype=np.int64)
    return pa.table({"i": i, "s": pa.array([f"s{x}" for x in i])})


def _ids(t: Table) -> dict[int, int]:
    """i -> _rowid as Tessera reads them."""
    got = t.to_arrow(columns=["i", "_rowid"])
    return dict(zip(got.column("i").to_pylist(), got.column("_rowid").to_pylist()))


def _pylance_ids(ds) -> dict[int, int]:
    got = ds.to_table(columns=["i"], with_row_id=True)
    return dict(zip(got.column("i").to_pylist(), got.column("_rowid").to_pylist()))


# -- format.table.rowids -------------------------------------------------------------------


def _array_width(seg: rowids_pb2.U64Segment) -> str:
    which = seg.WhichOneof("segment")
    arr = seg.range_with_holes.holes if which == "range_with_holes" else getattr(seg, which)
    return arr.WhichOneof("array")


CASES = {
    "range": (np.arange(5, 3000), ["range"], None),
    "range_with_holes": (
        np.delete(np.arange(3000, 6010), [3, 40, 500, 501, 777, 1000, 2000, 2500, 2999, 3005]),
        ["range_with_holes"],
        "u16_array",
    ),
    "range_with_bitmap": (
        np.sort(RNG.choice(np.arange(10_000, 16_000), 3000, replace=False)),
        ["range_with_bitmap"],
        None,
    ),
    "sorted_array_u16": (20_000 + np.arange(3000) * 20, ["sorted_array"], "u16_array"),
    "sorted_array_u32": (100_000 + np.arange(3000) * 1000, ["sorted_array"], "u32_array"),
    "array_u16": (RNG.permutation(np.arange(5_000_000, 5_003_000)), ["array"], "u16_array"),
    "array_u32": (RNG.permutation(np.arange(6_000_000, 6_300_000, 100)), ["array"], "u32_array"),
    "array_u64": (
        RNG.permutation(np.arange(3000, dtype=np.uint64) * np.uint64(2**33) + np.uint64(2**40)),
        ["array"],
        "u64_array",
    ),
    "mixed": (
        np.concatenate(
            [
                np.arange(7_000_000, 7_001_000),
                RNG.permutation(np.arange(7_100_000, 7_100_040)),
                np.arange(7_200_000, 7_201_960),
            ]
        ),
        ["range", "array", "range"],
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sequence_encodings_round_trip(name):
    values, kinds, width = CASES[name]
    seq = R.RowIdSequence.from_values(values)
    assert seq.kinds() == kinds
    if width is not None:
        assert _array_width(seq.segments[0]) == width
    back = R.RowIdSequence.from_bytes(seq.to_bytes())
    assert np.array_equal(back.values(), np.asarray(values, np.uint64))
    assert len(back) == len(values)
    pos, first, length = back.runs()
    rebuilt = np.concatenate([first[k] + np.arange(length[k], dtype=np.uint64) for k in range(len(first))])
    assert np.array_equal(rebuilt, np.asarray(values, np.uint64))
    assert np.array_equal(pos, np.concatenate([[0], np.cumsum(length)[:-1]]))
    # never larger than Lance's one-segment choice
    assert len(seq.to_bytes()) <= len(R.RowIdSequence([R.encode_segment(values)]).to_bytes())


def test_sequence_bytes_match_lance():
    # byte examples from the format reference (section 10.2)
    assert R.RowIdSequence.from_range(0, 10000).to_bytes().hex() == "0a050a0310904e"
    assert R.constant_versions(10000, 1).hex() == "0a090a050a0310904e1001"
    holes = np.setdiff1d(np.arange(10000), np.arange(7, 10000, 100))
    seg = R.RowIdSequence.from_values(holes).segments[0]
    assert seg.WhichOneof("segment") == "range_with_holes"
    assert seg.range_with_holes.holes.u16_array.base == 7
    assert R.decode_u64_array(seg.range_with_holes.holes)[:3].tolist() == [7, 107, 207]


def test_version_sequences():
    v = np.array([1] * 5 + [3] * 2 + [1] * 4, np.uint64)
    assert np.array_equal(R.decode_versions(R.encode_versions(v)), v)
    # pylance's compaction writes spans holding old offsets; only their lengths count
    msg = rowids_pb2.RowDatasetVersionSequence()
    for (a, b), ver in (((10, 13), 1), ((0, 2), 4)):
        run = msg.runs.add()
        run.span.range.start, run.span.range.end = a, b
        run.version = ver
    assert R.decode_versions(msg.SerializeToString()).tolist() == [1, 1, 1, 4, 4]


def test_external_sequence_over_the_limit(tmp_path):
    store = open_object_store(str(tmp_path))
    frag = R.table_pb2.DataFragment(id=3, physical_rows=100_000)
    big = R.RowIdSequence.from_values(RNG.permutation(100_000)).to_bytes()
    assert len(big) > R.INLINE_LIMIT
    # by default inline however large, as pylance 14 writes them
    assert R.set_sequence(frag, R.ROW_ID_FIELDS, big, store.put) is None
    assert frag.WhichOneof("row_id_sequence") == "inline_row_ids"
    path = R.set_sequence(frag, R.ROW_ID_FIELDS, big, store.put, limit=R.INLINE_LIMIT)
    assert path and frag.WhichOneof("row_id_sequence") == "external_row_ids"
    assert frag.external_row_ids.size == len(big) and path.startswith("data/") and path.endswith(".rowids")
    assert R.decode_row_ids(store, frag).size == 100_000
    small = R.table_pb2.DataFragment(id=4, physical_rows=10)
    assert (
        R.set_sequence(
            small, R.ROW_ID_FIELDS, R.RowIdSequence.from_range(0, 10).to_bytes(), store.put, limit=R.INLINE_LIMIT
        )
        is None
    )
    assert small.WhichOneof("row_id_sequence") == "inline_row_ids"


def test_external_sequences_after_compaction(lance, tmp_path):
    """Tessera reads and writes external sequences; pylance 14.0.2 cannot open
    a table that has one (hence inline by default)."""
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 30_000), stable_row_ids=True, max_rows_per_file=10_000)
    t.compact(30_000, sort_by=[("i", "descending")], external_sequences_over=1024)
    (frag,) = t.fragments
    assert frag.WhichOneof("row_id_sequence") == "external_row_ids"
    assert os.path.exists(os.path.join(path, frag.external_row_ids.path))
    assert _ids(Table.open(path)) == {i: i for i in range(30_000)}
    assert t.take_rows([5, 29_999]).column("i").to_pylist() == [5, 29_999]
    try:
        theirs = _pylance_ids(lance.dataset(path))
    except (ValueError, OSError) as exc:  # pylance 14.0.2
        assert "All fragments must have row ids" in str(exc)
    else:  # a later pylance that reads them must agree
        assert theirs == _ids(t)


def test_every_segment_kind_reads_in_pylance(lance, tmp_path):
    """Fragments carrying each segment kind and array width: pylance reads the
    same _rowid values and takes the same rows by id."""
    path = str(tmp_path / "kinds")
    store = open_object_store(path)
    schema = _data(0, 1).schema
    fields = lschema.fields_from_arrow(schema)
    txn = new_transaction(0)
    start, expected = 0, {}
    for name in sorted(CASES):
        values = np.asarray(CASES[name][0], np.uint64)
        frag = write_fragments(store, _data(start, start + len(values)).to_batches(), schema, fields, "2.2")[0]
        R.set_sequence(frag, R.ROW_ID_FIELDS, R.RowIdSequence.from_values(values).to_bytes(), store.put)
        expected.update(zip(range(start, start + len(values)), values.tolist()))
        start += len(values)
        txn.overwrite.fragments.append(frag)
    txn.overwrite.schema.extend(lschema.fields_to_protos(fields))
    commit_transaction(store, txn, None, data_format="2.2", stable_row_ids=True)
    t = Table.open(path)
    assert _ids(t) == expected
    ds = lance.dataset(path)
    assert _pylance_ids(ds) == expected
    want = RNG.choice(np.array(list(expected.values()), np.uint64), 300, replace=False)
    mine = t.take_rows(want, columns=["i", "_rowid"])
    assert mine.column("_rowid").to_pylist() == want.tolist()
    assert ds._take_rows(want.tolist(), columns=["i"]).column("i").to_pylist() == mine.column("i").to_pylist()


# -- the row id index ----------------------------------------------------------------------


def test_index_is_compact_and_matches_brute_force(tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 50_000), stable_row_ids=True, max_rows_per_file=10_000)
    t.delete("i % 1000 = 3 OR (i >= 12000 AND i < 12500)")
    t.compact(20_000, sort_by=None)
    t.update({"s": "'u'"}, where="i >= 30000 AND i < 30010")
    t = Table.open(path)
    index = t.row_id_index()
    assert index.point_id.size == 0 and index.run_first.size < 200 and index.nbytes < 10_000
    scan = t.to_arrow(columns=["_rowid", "_rowaddr"])
    ids = scan.column("_rowid").to_numpy()
    addr, found = index.lookup(ids)
    assert found.all() and np.array_equal(addr, scan.column("_rowaddr").to_numpy())
    dead = np.array([3, 1003, 12000, 12499, 10**9], np.uint64)  # deleted, never assigned
    assert not index.lookup(dead)[1].any()
    moved = index.lookup([30000])  # updated: the same id, at its new address
    assert moved[1].all() and int(moved[0][0]) >> 32 == t.fragments[-1].id
    assert len(index) == t.count_rows()
    assert t.row_id_index() is index  # cached per version


def test_index_rejects_an_id_live_twice():
    with pytest.raises(DuplicateRowIdError):
        RowIdIndex.from_runs(np.array([0, 5], np.uint64), np.array([10, 2]), np.array([0, 1 << 32], np.uint64))
    with pytest.raises(DuplicateRowIdError):  # a single id inside a run
        RowIdIndex.from_runs(np.array([0, 5], np.uint64), np.array([10, 1]), np.array([0, 1 << 32], np.uint64))
    with pytest.raises(DuplicateRowIdError):  # two single ids
        RowIdIndex.from_runs(np.array([7, 3, 7], np.uint64), np.array([1, 1, 1]), np.array([0, 1, 2], np.uint64))


@pytest.mark.parametrize("sparse", [False, True])
def test_index_single_ids_dense_table_and_sparse_points(sparse):
    n = 20_000
    ids = RNG.permutation(np.arange(n, dtype=np.uint64) * np.uint64(50 if sparse else 1) + np.uint64(100))
    addr = (np.uint64(3) << np.uint64(32)) + np.arange(n, dtype=np.uint64)
    first = np.concatenate([ids, np.array([10**9], np.uint64)])
    index = RowIdIndex.from_runs(
        first, np.concatenate([np.ones(n, np.int64), [1000]]), np.concatenate([addr, np.array([7 << 32], np.uint64)])
    )
    assert (index.table.size > 0) != sparse and (index.point_id.size > 0) == sparse
    assert len(index) == n + 1000
    q = np.concatenate([ids[::7], np.array([10**9 + 999, 10**9 + 1000, 99, 2**63], np.uint64)])
    got, found = index.lookup(q)
    assert found.tolist() == [True] * len(ids[::7]) + [True, False, False, False]
    assert np.array_equal(got[: len(ids[::7])], addr[::7]) and int(got[-4]) == (7 << 32) + 999
    with pytest.raises(DuplicateRowIdError):
        RowIdIndex.from_runs(np.concatenate([ids, ids[:1]]), np.ones(n + 1, np.int64), np.concatenate([addr, addr[:1]]))


def test_index_ignores_dead_copies_of_an_id(lance, tmp_path):
    """pylance's update keeps the id; the old copy stays in the old fragment, deleted."""
    path = str(tmp_path / "p")
    lance.write_dataset(_data(0, 1000), path, enable_stable_row_ids=True, max_rows_per_file=400)
    lance.dataset(path).update({"s": "'x'"}, where="i >= 100 AND i < 110")
    t = Table.open(path)
    got = t.take_rows([105, 99, 110], columns=["i", "s", "_rowid"])
    assert got.to_pydict() == {"i": [105, 99, 110], "s": ["x", "s99", "s110"], "_rowid": [105, 99, 110]}
    assert t.row_id_index().lookup([105])[0][0] >> 32 == t.fragments[-1].id


# -- take_rows ------------------------------------------------------------------------------


def test_take_rows_order_repeats_missing(tmp_path):
    t = Table.create(str(tmp_path / "t"), _data(0, 100), stable_row_ids=True, max_rows_per_file=30)
    t.delete("i = 50")
    got = t.take_rows([70, 3, 70, 50, 999, 0], columns=["s", "_rowid", "_rowaddr"])
    assert got.column("s").to_pylist() == ["s70", "s3", "s70", "s0"]
    assert got.column("_rowid").to_pylist() == [70, 3, 70, 0]
    assert got.column("_rowaddr").to_pylist() == [(2 << 32) + 10, 3, (2 << 32) + 10, 0]
    assert t.take_rows(pa.array([5, 6], pa.uint64())).column("i").to_pylist() == [5, 6]
    assert t.take_rows([]).num_rows == 0 and t.take_rows([]).schema.names == ["i", "s"]
    with pytest.raises(RowIdNotFoundError, match="50"):
        t.take_rows([1, 50], on_missing="raise")
    with pytest.raises(InvalidArgumentError):
        t.take_rows([-1])
    with pytest.raises(InvalidArgumentError):
        t.take_rows([1], columns="i")


def test_take_rows_without_stable_ids_uses_addresses(lance, tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 100), max_rows_per_file=30)
    t.delete("i = 31")
    addrs = [(1 << 32) + 5, 7, (1 << 32) + 1, (9 << 32)]
    got = t.take_rows(addrs, columns=["i"])
    assert got.column("i").to_pylist() == [35, 7]
    assert lance.dataset(path)._take_rows(addrs, columns=["i"]).column("i").to_pylist() == [35, 7]


# -- updates, merge_insert ------------------------------------------------------------------


def test_update_and_merge_insert_keep_ids(lance, tmp_path):
    """As in pylance 14: an updated row keeps its id; only inserted rows get new ones."""
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 100), stable_row_ids=True)
    t.update({"s": "'u'"}, where="i >= 10 AND i < 13")
    assert t.manifest.next_row_id == 100
    ids = _ids(t)
    assert [ids[i] for i in (10, 11, 12)] == [10, 11, 12]
    assert t.take_rows([10, 11, 12]).column("s").to_pylist() == ["u"] * 3
    stats = t.merge_insert(pa.table({"i": pa.array([20, 500], pa.int64()), "s": ["m", "n"]}), on="i")
    assert stats["num_updated_rows"] == 1 and stats["num_inserted_rows"] == 1
    assert t.manifest.next_row_id == 101
    ids = _ids(t)
    assert (ids[20], ids[500]) == (20, 100) and t.take_rows([20]).column("s").to_pylist() == ["m"]
    assert _pylance_ids(lance.dataset(path)) == ids


# -- concurrency ----------------------------------------------------------------------------


def test_rebased_append_gets_fresh_ids(tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, _data(0, 100), stable_row_ids=True)
    a, b = Table.open(path), Table.open(path)
    a.append(_data(100, 150))
    b.append(_data(150, 200))  # built on version 1, rebased on 2: ids reassigned
    t = Table.open(path)
    assert t.manifest.next_row_id == 200
    ids = _ids(t)
    assert sorted(ids.values()) == list(range(200))
    assert [ids[i] for i in (150, 199)] == [150, 199]


def _thread_appends(path: str, writer: int, rounds: int, barrier: threading.Barrier) -> None:
    t = Table.open(path)
    for k in range(rounds):
        barrier.wait()
        base = 1_000_000 * (writer + 1) + 100 * k
        t.append(_data(base, base + 37))


def _process_appends(path: str, writer: int, rounds: int) -> None:
    t = Table.open(path)
    for k in range(rounds):
        base = 10_000_000 * (writer + 1) + 100 * k
        t.append(_data(base, base + 11))


@pytest.mark.filterwarnings("ignore:lance is not fork-safe")
def test_concurrent_appenders_never_share_an_id(lance, tmp_path):
    path = str(tmp_path / "t")
    Table.create(path, _data(0, 10), stable_row_ids=True)
    writers, rounds = 4, 5
    barrier = threading.Barrier(writers)
    threads = [threading.Thread(target=_thread_appends, args=(path, w, rounds, barrier)) for w in range(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_process_appends, args=(path, w, rounds)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    t = Table.open(path)
    total = 10 + writers * rounds * 37 + 2 * rounds * 11
    assert t.count_rows() == total
    ids = t.to_arrow(columns=["_rowid"]).column("_rowid").to_numpy()
    assert len(np.unique(ids)) == total
    assert t.manifest.next_row_id == total and set(ids.tolist()) == set(range(total))
    assert len(t.row_id_index()) == total
    assert _pylance_ids(lance.dataset(path)) == _ids(t)


# -- interop both ways -----------------------------------------------------------------------


def test_pylance_history_then_tessera(lance, tmp_path):
    path = str(tmp_path / "p")
    lance.write_dataset(_data(0, 3000), path, enable_stable_row_ids=True, max_rows_per_file=1000)
    ds = lance.dataset(path)
    ds.delete("i % 10 = 1")
    ds.update({"s": "'u'"}, where="i >= 500 AND i < 520")
    lance.write_dataset(_data(3000, 3500), path, mode="append")
    lance.dataset(path).optimize.compact_files(target_rows_per_fragment=2000)
    t = Table.open(path)
    assert _ids(t) == _pylance_ids(lance.dataset(path))
    t.append(_data(5000, 5100))
    t.delete("i % 10 = 2")
    t.update({"s": "'v'"}, where="i >= 600 AND i < 605")
    t.compact(2500)
    ds = lance.dataset(path)
    assert _ids(t) == _pylance_ids(ds) and ds.count_rows() == t.count_rows()
    want = [0, 503, 600, 3333, 5050, 2999, 1]
    assert (
        ds._take_rows(want, columns=["i"]).column("i").to_pylist()
        == t.take_rows(want, columns=["i"]).column("i").to_pylist()
    )
    ids = np.array(list(_ids(t).values()), np.uint64)
    assert len(np.unique(ids)) == len(ids) and int(ids.max()) < t.manifest.next_row_id
    ds.validate()


def test_tessera_history_then_pylance(lance, tmp_path):
    path = str(tmp_path / "t")
    t = Table.create(path, _data(0, 3000), stable_row_ids=True, max_rows_per_file=700)
    t.delete("i % 9 = 4")
    t.update({"s": "'u'"}, where="i >= 100 AND i < 130")
    t.append(_data(3000, 3300))
    t.compact(1500)
    ds = lance.dataset(path)
    assert _pylance_ids(ds) == _ids(t)
    ds.delete("i % 9 = 5")
    ds = lance.dataset(path)
    ds.update({"s": "'p'"}, where="i >= 200 AND i < 210")
    lance.write_dataset(_data(4000, 4100), path, mode="append")
    ds = lance.dataset(path)
    ds.optimize.compact_files(target_rows_per_fragment=2000)
    ds = lance.dataset(path)
    t = Table.open(path)
    assert _ids(t) == _pylance_ids(ds)
    assert t.manifest.next_row_id == ds.to_table(columns=[], with_row_id=True).column("_rowid").to_numpy().max() + 1
    sample = list(_ids(t).values())[::97]
    assert t.take_rows(sample, columns=["i", "s"]).equals(ds._take_rows(sample, columns=["i", "s"]))
    filt = ds.to_table(columns=["i"], filter=f"_rowid IN ({', '.join(map(str, sample[:20]))})")
    assert sorted(filt.column("i").to_pylist()) == sorted(t.take_rows(sample[:20]).column("i").to_pylist())


# -- property test ---------------------------------------------------------------------------

OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 40)),
    st.tuples(st.just("delete"), st.integers(2, 6), st.integers(0, 5)),
    st.tuples(st.just("update"), st.integers(2, 6), st.integers(0, 5)),
    st.tuples(st.just("compact"), st.integers(5, 60), st.booleans()),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.integers(1, 40), ops=st.lists(OPS, min_size=1, max_size=7))
def test_model_row_id_to_row(first, ops):
    """A model of row id -> (i, w) stays in step with take_rows and scans."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t")

        def rows(a, b):
            return pa.table({"i": np.arange(a, b, dtype=np.int64), "w": np.zeros(b - a, np.int64)})

        t = Table.create(path, rows(0, first), stable_row_ids=True, max_rows_per_file=16)
        model = {k: (k, 0) for k in range(first)}
        dead: set[int] = set()
        next_i, next_id = first, first
        for op in ops:
            if op[0] == "append":
                t.append(rows(next_i, next_i + op[1]))
                model.update({next_id + k: (next_i + k, 0) for k in range(op[1])})
                next_i, next_id = next_i + op[1], next_id + op[1]
            elif op[0] in ("delete", "update"):
                m, r = op[1], op[2] % op[1]
                hit = {rid for rid, (i, _) in model.items() if i % m == r}
                if op[0] == "delete":
                    t.delete(f"i % {m} = {r}")
                    for rid in hit:
                        del model[rid]
                    dead |= hit
                else:
                    t.update({"w": "w + 1"}, where=f"i % {m} = {r}")
                    scan = t.to_arrow(columns=["i", "w", "_rowid"], filter=f"i % {m} = {r}")
                    kept = scan.column("_rowid").to_pylist()
                    assert sorted(kept) == sorted(hit)  # updated rows keep their ids
                    for rid, i, w in zip(kept, scan.column("i").to_pylist(), scan.column("w").to_pylist()):
                        assert (i, w) == (model[rid][0], model[rid][1] + 1)
                        model[rid] = (i, w)
            else:
                t.compact(op[1], sort_by="i" if op[2] else None)
            assert t.manifest.next_row_id == next_id
            want = list(model)
            got = t.take_rows(want, columns=["i", "w", "_rowid"])
            assert got.column("_rowid").to_pylist() == want
            assert list(zip(got.column("i").to_pylist(), got.column("w").to_pylist())) == [model[k] for k in want]
            assert t.take_rows(sorted(dead)).num_rows == 0
            scan = t.to_arrow(columns=["i", "w", "_rowid"])
            assert {
                rid: (i, w) for rid, i, w in zip(*(scan.column(c).to_pylist() for c in ("_rowid", "i", "w")))
            } == model
        import lance

        theirs = lance.dataset(path).to_table(columns=["i", "w"], with_row_id=True)
        assert {
            rid: (i, w) for rid, i, w in zip(*(theirs.column(c).to_pylist() for c in ("_rowid", "i", "w")))
        } == model
