"""Indices through Tessera's schema changes and clean-ups, judged by pylance 14 and LanceDB 0.40.

Each table here has pylance's indices (BTREE on a top-level and on a nested
column, IVF_PQ on a vector column) and Tessera's zone map.  What Tessera does
to them is compared with what pylance does to a byte-identical copy of the
table (same index uuids), then the other clients' maintenance runs on
Tessera's result: pylance's ``optimize_indices()`` and LanceDB's
``optimize()`` (which runs it) fail on an index naming a field the schema no
longer has.  See docs/reference/index-lifecycle.md.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
import uuid as uuidlib

import numpy as np
import pyarrow as pa
import pytest

from tessera.catalog import Table
from tessera.catalog.table.indexes import build_index_transaction
from tessera.commit.errors import IndexReplacedError
from tessera.commit.operation import commit_transaction
from tessera.format.table import paths

lance = pytest.importorskip("lance")
pytestmark = pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")

N = 512
DIM = 8


def _rows(start: int, n: int = N, seed: int = 0, k: bool = True) -> pa.Table:
    rng = np.random.default_rng(seed + start)
    ids = np.arange(start, start + n, dtype=np.int64)
    cols = {"id": pa.array(ids)}
    if k:
        cols["k"] = pa.array(rng.integers(0, 50, n))
    cols["vec"] = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * DIM, dtype=np.float32)), DIM)
    cols["s"] = pa.StructArray.from_arrays([pa.array(ids), pa.array(ids % 7)], ["a", "b"])
    cols["z"] = pa.array(ids * 2)
    return pa.table(cols)


def _indexed_table(path: str) -> Table:
    """A Tessera table (4 fragments) with pylance's BTREE on ``k`` and on ``s.b``,
    its IVF_PQ on ``vec``, and Tessera's zone map on ``z``."""
    t = Table.create(path, _rows(0), max_rows_per_file=128)
    ds = lance.dataset(path)
    ds.create_scalar_index("k", "BTREE")
    ds.create_scalar_index("s.b", "BTREE")
    ds.create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    t = Table.open(path)
    t.create_index("z")
    return t


def _open(path: str) -> Table:
    t = Table.open(path)
    t.max_rows_per_file = 128
    return t


def _with_deltas(path: str) -> Table:
    """A table whose ``k_idx`` and ``vec_idx`` have a delta each (pylance's
    ``optimize_indices(num_indices_to_merge=0)``): fragments 0-1 in the first
    entry, 2-3 in the delta, 4-5 unindexed."""
    Table.create(path, _rows(0, 256), max_rows_per_file=128)
    ds = lance.dataset(path)
    ds.create_scalar_index("k", "BTREE")
    ds.create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    _open(path).append(_rows(1000, 256))
    lance.dataset(path).optimize.optimize_indices(num_indices_to_merge=0)
    t = _open(path)
    t.append(_rows(2000, 256))
    assert [f.id for f in t.fragments] == [0, 1, 2, 3, 4, 5]
    return t


def _twin(path: str, tmp_path) -> str:
    """A byte-identical copy of the table, for pylance to change its own way."""
    copy = str(tmp_path / "twin.lance")
    shutil.copytree(path, copy)
    return copy


def _indices(path: str, version: int | None = None) -> list[tuple]:
    """The indices as pylance lists them: name, columns, uuid, fragments covered."""
    ds = lance.dataset(path, version=version)
    return sorted(
        (i["name"], tuple(i["fields"]), i["uuid"], tuple(sorted(i["fragment_ids"]))) for i in ds.list_indices()
    )


def _index_dirs(path: str) -> dict[str, list[str]]:
    base = os.path.join(path, paths.INDICES_DIR)
    if not os.path.isdir(base):
        return {}
    return {d: sorted(os.listdir(os.path.join(base, d))) for d in os.listdir(base)}


def _uuid_of(path: str, name: str) -> str:
    return next(i["uuid"] for i in lance.dataset(path).list_indices() if i["name"] == name)


def _clients_optimize(path: str) -> None:
    """pylance's and LanceDB's index maintenance run on the table, and a vector query through LanceDB."""
    lance.dataset(path).optimize.optimize_indices()
    lancedb = pytest.importorskip("lancedb")
    db = lancedb.connect(os.path.dirname(path))
    tbl = db.open_table(os.path.basename(path).removesuffix(".lance"))
    tbl.optimize()
    got = tbl.search(np.zeros(DIM, dtype=np.float32)).limit(3).to_arrow()
    assert got.num_rows == 3


def test_drop_indexed_columns_removes_their_indices_as_pylance_does(tmp_path):
    path = str(tmp_path / "t.lance")
    t = _indexed_table(path)
    twin = _twin(path, tmp_path)
    k_uuid, sb_uuid, z_uuid = (_uuid_of(path, n) for n in ("k_idx", "s.b_idx", "z_idx"))

    t.drop_columns(["k", "s", "z"])  # a top-level, a struct (its child s.b is indexed), the zone-mapped one
    lance.dataset(twin).drop_columns(["k", "s", "z"])

    assert _indices(path) == _indices(twin)
    assert [i["name"] for i in t.list_indices()] == ["vec_idx"]
    assert all(not c.startswith("<field") for i in t.list_indices() for c in i["columns"])
    # the dropped indices' files stay until clean-up (as pylance leaves them)
    assert {k_uuid, sb_uuid, z_uuid} <= set(_index_dirs(path))

    # writes after the drop: Tessera's zone-map maintenance does not bring z back
    t.append(_rows(5000, k=False).drop_columns(["s", "z"]))
    assert [i["name"] for i in t.list_indices()] == ["vec_idx"]
    _clients_optimize(path)
    assert Table.open(path).count_rows() == lance.dataset(path).count_rows() == 2 * N


def test_a_schema_change_prunes_empty_index_deltas_as_pylance_does(tmp_path):
    """pylance keeps, per index name with several entries, those covering a
    live fragment (else only the oldest): after a drop of an unindexed column
    too, and after add_columns (a Merge)."""
    path = str(tmp_path / "t.lance")
    t = _with_deltas(path)
    t.delete("id < 1000")  # fragments 0-1 go whole; Tessera's delete keeps the index section as it is
    twin = _twin(path, tmp_path)
    assert len(_indices(path)) == 4

    t.drop_columns(["z"])
    lance.dataset(twin).drop_columns(["z"])
    assert _indices(path) == _indices(twin)
    assert sorted(n for n, *_ in _indices(path)) == ["k_idx", "vec_idx"]
    assert all(frags == (2, 3) for *_, frags in _indices(path))

    t2 = _with_deltas(str(tmp_path / "t2.lance"))
    t2.delete("id < 2000")  # every indexed fragment goes: the oldest entry of each name stays
    twin2 = str(tmp_path / "twin2.lance")
    shutil.copytree(t2.uri, twin2)
    t2.add_columns({"w": "id + 1"})
    lance.dataset(twin2).add_columns({"w": "id + 1"})
    assert _indices(t2.uri) == _indices(twin2)
    assert all(frags == (0, 1) for *_, frags in _indices(t2.uri))
    _clients_optimize(t2.uri)


def test_rename_keeps_the_indices_pylance_keeps(tmp_path):
    path = str(tmp_path / "t.lance")
    t = _with_deltas(path)
    t.create_index("z")
    t.delete("id < 1000")
    twin = _twin(path, tmp_path)

    t.rename_column("k", "kk")
    t.rename_column("z", "zz")
    ds = lance.dataset(twin)
    ds.alter_columns({"path": "k", "name": "kk"}, {"path": "z", "name": "zz"})

    assert _indices(path) == _indices(twin)
    cols = {i["name"]: i["columns"] for i in t.list_indices()}
    assert cols == {"k_idx": ["kk"], "vec_idx": ["vec"], "z_idx": ["zz"]}
    # the renamed column's zone map is still kept current by Tessera's writes
    t.append(_rows(9000, 128).rename_columns(["id", "kk", "vec", "s", "zz"]))
    (z,) = [i for i in t.list_indices() if i["name"] == "z_idx"]
    assert {f.id for f in t.fragments} <= set(z["fragments"])
    assert sorted(lance.dataset(path).to_table(filter="kk < 5", columns=["id"]).column("id").to_pylist()) == sorted(
        t.to_arrow(filter="kk < 5", columns=["id"]).column("id").to_pylist()
    )
    _clients_optimize(path)


def test_an_index_built_before_a_concurrent_drop_of_its_column_is_not_committed(tmp_path):
    path = str(tmp_path / "t.lance")
    t = Table.create(path, _rows(0, 256), max_rows_per_file=128)
    base = t.snapshot.mfile
    txn = build_index_transaction(t.snapshot, ["z"])  # the zone map's files are written, the entry not yet committed
    assert txn is not None
    Table.open(path).drop_columns(["z"])
    with pytest.raises(IndexReplacedError, match="dropped a column"):
        commit_transaction(t.store, txn, base)
    assert Table.open(path).list_indices() == []
    _clients_optimize(path)


def test_cleanup_removes_dropped_indices_with_their_folders(tmp_path):
    path = str(tmp_path / "t.lance")
    t = _indexed_table(path)
    t.tags.create("before-drop", t.version)
    tagged = t.version
    gone = {_uuid_of(path, "k_idx"), _uuid_of(path, "s.b_idx")}
    t.drop_columns(["k", "s"])
    t.append(_rows(5000, k=False).drop_columns(["s"]))
    t.drop_columns(["z"])  # the zone map, replaced by the append's maintenance, then dropped
    time.sleep(0.05)

    report = Table.open(path).cleanup(older_than=dt.timedelta(0), orphan_age=dt.timedelta(0))
    assert tagged in report.kept_versions and report.removed_versions

    dirs = _index_dirs(path)
    assert all(files for files in dirs.values()), f"empty index folders left: {dirs}"
    # what is left is exactly what the kept versions list
    kept_uuids = {i[2] for v in report.kept_versions for i in _indices(path, v)}
    assert set(dirs) == kept_uuids
    assert gone <= kept_uuids  # the tagged version still lists (and needs) the dropped columns' indices
    for v in report.kept_versions:
        ds = lance.dataset(path, version=v)
        assert ds.count_rows() == Table.open(path, version=v).count_rows()
        if "k" in ds.schema.names:  # the tagged version: its BTREE is read
            got = ds.to_table(filter="k = 3", columns=["id"]).column("id").to_pylist()
            assert sorted(got) == sorted(Table.open(path, version=v).to_arrow(filter="k = 3").column("id").to_pylist())
            assert "ScalarIndexQuery" in ds.scanner(filter="k = 3").explain_plan()

    # once the tag goes, the next clean-up removes those indices and their folders
    t.tags.delete("before-drop")
    Table.open(path).cleanup(older_than=dt.timedelta(0), orphan_age=dt.timedelta(0))
    dirs = _index_dirs(path)
    assert not gone & set(dirs) and all(files for files in dirs.values()), dirs
    assert set(dirs) == {i[2] for i in _indices(path)}
    _clients_optimize(path)


def test_orphan_cleanup_removes_index_folders(tmp_path):
    """An index written by a commit that never landed goes with its folder;
    an empty index folder an older clean-up left goes too, once old."""
    path = str(tmp_path / "t.lance")
    t = Table.create(path, _rows(0, 256))
    txn = build_index_transaction(t.snapshot, ["z"])  # written, never committed: an orphan
    assert txn is not None
    (orphan,) = _index_dirs(path)
    leftover = os.path.join(path, paths.INDICES_DIR, str(uuidlib.uuid4()))
    os.makedirs(leftover)
    old = time.time() - 7200
    for d, _, files in os.walk(os.path.join(path, paths.INDICES_DIR)):
        for f in files:
            os.utime(os.path.join(d, f), (old, old))
        os.utime(d, (old, old))
    report = t.cleanup_orphans(older_than=dt.timedelta(hours=1))
    assert [p.split("/")[1] for p in report.removed] == [orphan]
    assert _index_dirs(path) == {}


def test_cleanup_on_s3_leaves_no_object_of_a_dropped_index(moto_server):
    """On S3 an index is its objects (no folders, no marker objects): after the
    clean-up nothing remains under the dropped index's prefix."""
    bucket = moto_server.new_bucket()
    uri = f"s3://{bucket}/t.lance"
    opts = moto_server.storage_options()
    t = Table.create(uri, _rows(0, 256), storage_options=opts)
    ds = lance.dataset(uri, storage_options=moto_server.lance_storage_options())
    ds.create_scalar_index("k", "BTREE")
    t = Table.open(uri, storage_options=opts)
    t.create_index("z")
    k_uuid = next(i["uuid"] for i in t.list_indices() if i["name"] == "k_idx")
    z_uuid = next(i["uuid"] for i in t.list_indices() if i["name"] == "z_idx")
    t.drop_columns(["k"])
    time.sleep(0.05)
    t.cleanup(older_than=dt.timedelta(0), orphan_age=dt.timedelta(0))
    s3 = moto_server.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="t.lance/_indices/").get("Contents", [])]
    assert not [k for k in keys if k_uuid in k], keys
    assert keys and all(k.startswith(f"t.lance/_indices/{z_uuid}/") and not k.endswith("/") for k in keys), keys
    ds = lance.dataset(uri, storage_options=moto_server.lance_storage_options())
    assert [i["name"] for i in ds.list_indices()] == ["z_idx"]
    ds.optimize.optimize_indices()


def test_drop_columns_drops_data_files_left_without_a_column(tmp_path):
    """pylance's Project also removes from each fragment the data files none of
    whose fields is left (a column add_columns wrote to a file of its own)."""
    path = str(tmp_path / "t.lance")
    t = Table.create(path, _rows(0, 256), max_rows_per_file=128)
    t.add_columns({"w": "id * 3"})
    twin = _twin(path, tmp_path)
    t.drop_columns(["w"])
    lance.dataset(twin).drop_columns(["w"])
    mine = [[df.path for df in f.files] for f in Table.open(path).fragments]
    theirs = [[df.path for df in f.data_files()] for f in lance.dataset(twin).get_fragments()]
    assert mine == theirs and all(len(files) == 1 for files in mine)
    assert Table.open(path).to_arrow().equals(lance.dataset(path).to_table())
    time.sleep(0.05)
    report = Table.open(path).cleanup(older_than=dt.timedelta(0), orphan_age=None)
    assert len([p for p in report.removed_files if p.startswith("data/")]) == 2  # w's files
    assert Table.open(path).to_arrow().num_rows == lance.dataset(path).count_rows() == 256
