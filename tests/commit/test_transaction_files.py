"""Transaction files (``_transactions/{read_version}-{uuid}.txn``), as pylance 14 writes them.

Every commit path writes the file its manifest names, holding exactly the
manifest's inline transaction bytes, before the manifest can be seen.  Lance 13
cores (LanceDB 0.40) read only the file: a LanceDB table handle opened before a
Tessera commit must still ``add`` and ``delete`` (rebasing over it) on every
coordinator.  Clean-up removes the files of removed versions and keeps the live
ones'; ``Table.repair()`` rewrites a lost or emptied file from the inline copy.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import struct

import pyarrow as pa
import pytest
from tessera_test_services import new_dynamodb_store_url

import tessera
from tessera.catalog import Table
from tessera.commit import store as tstore
from tessera.commit.handlers import native as handlers
from tessera.format.table import manifest as mf
from tessera.format.table import paths
from tessera.stores.object_store import ObjectStore
from tessera.stores.registry import open_object_store

lance = pytest.importorskip("lance")
lancedb = pytest.importorskip("lancedb")
lance_namespace = pytest.importorskip("lance_namespace")


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"i": pa.array(range(lo, hi), pa.int64()), "s": [f"r{i}" for i in range(lo, hi)]})


def _inline(data: bytes, m) -> bytes:
    pos = m.transaction_section
    (n,) = struct.unpack_from("<I", data, pos)
    return data[pos + 4 : pos + 4 + n]


def check_transaction_files(store: ObjectStore, versions: list[int] | None = None) -> list[str]:
    """Every version (default: all listed) names a transaction file that holds
    exactly its inline transaction; returns the file names."""
    names, _ = tstore.list_versions(store)
    found = []
    for v in versions if versions is not None else sorted(names):
        path = paths.version_path(names[v])
        data = store.read(path)
        mfile = mf.read_manifest(data, path)
        name = mfile.manifest.transaction_file
        assert name == f"{mfile.transaction.read_version}-{mfile.transaction.uuid}.txn", f"version {v}: {name!r}"
        body = store.read(paths.transaction_path(name))
        assert body == _inline(data, mfile.manifest), f"version {v}: the file is not the inline copy"
        assert mf.read_transaction(body) == mfile.transaction
        found.append(name)
    return found


def _txn_dir(uri: str) -> set[str]:
    d = os.path.join(uri, "_transactions")
    return set(os.listdir(d)) if os.path.isdir(d) else set()


# -- a long-lived LanceDB handle across Tessera commits ---------------------------------


def test_a_lancedb_handle_by_path_adds_and_deletes_after_tessera_commits(tmp_path):
    db = lancedb.connect(str(tmp_path))
    tbl = db.create_table("t", _rows(0, 10))  # held across the Tessera commits below
    uri = str(tmp_path / "t.lance")
    stale = lance.dataset(uri)  # a pylance handle at version 1
    t = Table.open(uri)
    t.append(_rows(10, 12))
    t.delete("i = 3")
    tbl.add(_rows(100, 102))  # rebases over Tessera's append and delete
    tbl.delete("i = 4")
    t.refresh().update({"s": "'x'"}, where="i = 5")
    tbl.delete("i = 6")
    stale.delete("i = 7")  # pylance 14 rebases over all of it too
    want = sorted(set(range(12)) - {3, 4, 6, 7} | {100, 101})
    tbl.checkout_latest()  # the handle sees pylance's commit too
    assert sorted(tbl.to_arrow().column("i").to_pylist()) == want
    assert sorted(Table.open(uri).to_arrow().column("i").to_pylist()) == want
    check_transaction_files(open_object_store(uri))


@pytest.fixture(params=["native", "sqlite", "redis", "postgres"])
def plugin_warehouse(request, tmp_path):
    """Namespace properties of a warehouse whose tables one coordinator commits."""
    kind = request.param
    store = {
        "native": "native",
        "sqlite": f"sqlite:///{tmp_path}/commits.db",
    }.get(kind) or request.getfixturevalue(f"{kind}_url")
    props = {"warehouse": str(tmp_path / "wh"), "commit_store": store}
    yield props
    cat = tessera.connect(warehouse=props["warehouse"])
    with contextlib.suppress(Exception):
        for name in cat.list_tables("default"):
            cat.drop_table(name, purge=True)  # the store's rows too
    cat.close()


def test_a_lancedb_handle_through_the_plugin_adds_and_deletes_after_tessera_commits(plugin_warehouse):
    props = plugin_warehouse
    db = lancedb.connect_namespace("tessera", props)
    tbl = db.create_table("t", _rows(0, 10))
    cat = tessera.connect(warehouse=props["warehouse"])
    try:
        t = cat.load_table("default.t")
        t.append(_rows(10, 12))
        t.delete("i = 2")
        tbl.add(_rows(100, 103))
        tbl.delete("i = 8")
        cat.load_table("default.t").delete("i = 9")
        tbl.add(_rows(200, 201))
        want = sorted(set(range(12)) - {2, 8, 9} | {100, 101, 102, 200})
        assert sorted(tbl.to_arrow().column("i").to_pylist()) == want
        t = cat.load_table("default.t")
        assert sorted(t.to_arrow().column("i").to_pylist()) == want
        assert [v["version"] for v in t.versions()] == list(range(1, t.version + 1))
        check_transaction_files(t.store)
    finally:
        cat.close()


# -- every commit path writes the file -------------------------------------------------


def test_every_table_operation_writes_its_transaction_file(tmp_path):
    uri = str(tmp_path / "t")
    t = Table.create(uri, _rows(0, 20), max_rows_per_file=5)
    t.append(_rows(20, 25))  # append
    t.delete("i < 2")  # delete
    t.update({"s": "'u'"}, where="i = 7")  # update
    t.merge_insert("i").when_matched_update_all().when_not_matched_insert_all().execute(_rows(24, 27))
    t.add_columns({"j": "i * 2"})  # merge
    t.drop_columns(["j"])  # project
    t.set_properties({"k": "v"})  # update_config
    t.create_index("i")  # create_index (a zone map)
    t.compact(target_rows_per_fragment=100)  # reserve_fragments, rewrite
    t.restore(2)  # restore
    t.overwrite(_rows(0, 3))  # overwrite
    ops = [v["operation"] for v in t.versions()]
    for op in ("overwrite", "append", "delete", "update", "merge", "project", "update_config", "create_index"):
        assert op in ops
    assert {"rewrite", "restore"} <= set(ops)
    names = check_transaction_files(t.store)
    assert len(names) == t.version == len(set(names))
    assert _txn_dir(uri) == set(names)  # nothing else: no attempt was lost


def test_a_retry_after_a_rebase_rewrites_its_file_with_the_rebased_transaction(tmp_path, monkeypatch):
    """Racing without the commit lock, a delete loses its version to another
    delete of the same fragment, merges the two deletions and commits on top:
    its file (same name) holds the rebased transaction, as its manifest does."""
    monkeypatch.setattr(handlers, "local_commit_lock", lambda store, deadline: contextlib.nullcontext(False))
    uri = str(tmp_path / "t")
    Table.create(uri, _rows(0, 10))
    behind, other = Table.open(uri), Table.open(uri)
    other.delete("i = 1")
    behind.delete("i = 2")  # built on version 1: loses, rebases (merging the deletion files), wins version 3
    assert Table.open(uri).count_rows() == 8
    check_transaction_files(open_object_store(uri))


def test_external_stores_and_s3_write_the_file(tmp_path, redis_url, moto_server):
    cases = [
        (str(tmp_path / "sqlite"), f"sqlite:///{tmp_path}/commits.db", None),
        (str(tmp_path / "redis"), redis_url, None),
        (f"s3://{moto_server.new_bucket()}/native", None, moto_server.storage_options()),
        (f"s3://{moto_server.new_bucket()}/ddb", new_dynamodb_store_url(moto_server), moto_server.storage_options()),
    ]
    for uri, store, opts in cases:
        t = Table.create(uri, _rows(0, 5), commit_store=store, storage_options=opts)
        t.append(_rows(5, 7))
        t.delete("i = 1")
        assert len(check_transaction_files(t.store)) == 3, uri
        if store is not None:
            t._handler.ms.delete_table(t._handler.table_key)


def test_multi_table_and_namespace_commits_write_the_file(tmp_path):
    from tessera.catalog.namespace import TesseraNamespace

    cat = tessera.connect(warehouse=str(tmp_path / "wh"))
    cat.create_namespace("s")
    a = cat.create_table("s.a", _rows(0, 3), commit_store="catalog")
    b = cat.create_table("s.b", _rows(0, 3), commit_store="catalog")
    with cat.transaction() as tx:
        tx.load_table("s.a").append(_rows(3, 4))
        tx.load_table("s.b").delete("i = 0")
    assert len(check_transaction_files(a.store)) == 2
    assert len(check_transaction_files(b.store)) == 2

    ns = TesseraNamespace(warehouse=str(tmp_path / "wh"))
    through = Table.open("s.a", namespace=ns)  # Tessera's NamespaceCommitHandler
    through.append(_rows(4, 5))
    through.delete("i = 1")
    ds = lance.dataset(namespace_client=ns, table_id=["s", "a"])
    ds.delete("i = 2")  # pylance through the namespace writes its own
    names = check_transaction_files(a.store)
    assert len(names) == 5
    for name in names[1:3]:
        a.store.delete(paths.transaction_path(name))
    assert through.repair() == []  # through the namespace, too
    assert check_transaction_files(a.store) == names
    ns.close()
    cat.close()


def test_the_spark_driver_commit_writes_the_file(tmp_path):
    pytest.importorskip("pyspark")
    from pyspark.sql import types as T

    from tessera.catalog import spark as tspark
    from tessera.catalog.spark.write import plan_write

    loc = tspark.TableLocation(str(tmp_path / "t"))
    schema = T.StructType([T.StructField("i", T.LongType()), T.StructField("s", T.StringType())])
    for overwrite in (False, False, True):
        w = plan_write(loc, schema, overwrite, {})
        w.commit([w.write(iter(_rows(0, 4).to_batches()))])
    assert len(check_transaction_files(open_object_store(loc.uri))) == 3


# -- durability and clean-up ----------------------------------------------------------


def test_a_lost_or_emptied_file_is_rewritten_by_repair(tmp_path):
    """The file is not fsynced: a power loss may leave it missing or empty.
    ``Table.repair()`` rewrites it from the manifest's inline copy, and a
    LanceDB handle then rebases over that version again."""
    db = lancedb.connect(str(tmp_path))
    tbl = db.create_table("t", _rows(0, 5))
    uri = str(tmp_path / "t.lance")
    t = Table.open(uri)
    t.append(_rows(5, 6))
    t.append(_rows(6, 7))
    lost, emptied = (t.checkout(v).manifest.transaction_file for v in (2, 3))
    os.remove(os.path.join(uri, "_transactions", lost))
    open(os.path.join(uri, "_transactions", emptied), "wb").close()
    with pytest.raises(Exception, match="(?i)transaction|decode|not found"):
        tbl.add(_rows(100, 101))  # the damage is real: Lance 13 cannot rebase
    assert Table.open(uri).repair() == []
    check_transaction_files(open_object_store(uri))
    tbl.add(_rows(100, 101))
    assert tbl.count_rows() == 8


def test_cleanup_removes_the_files_of_removed_versions_only(tmp_path):
    uri = str(tmp_path / "t.lance")
    t = Table.create(uri, _rows(0, 5))
    for i in range(4):
        t.append(_rows(10 * i + 10, 10 * i + 12))
    every = set(check_transaction_files(t.store))
    assert _txn_dir(uri) == every and len(every) == 5
    t.cleanup_orphans(older_than=dt.timedelta(0))  # every file is a live version's
    assert _txn_dir(uri) == every
    report = t.cleanup(older_than=dt.timedelta(0), orphan_age=dt.timedelta(0))
    assert report.removed_versions == [1, 2, 3, 4]
    assert _txn_dir(uri) == set(check_transaction_files(t.store)) == {t.manifest.transaction_file}
    assert sum(f.startswith("_transactions/") for f in report.removed_files) == 4
    ds = lance.dataset(uri)  # pylance, and a LanceDB handle, commit on what is left
    ds.delete("i = 0")
    tbl = lancedb.connect(str(tmp_path)).open_table("t")
    Table.open(uri).append(_rows(100, 101))
    tbl.delete("i = 1")
    assert sorted(Table.open(uri).to_arrow().column("i").to_pylist()) == [2, 3, 4] + [
        x for i in range(4) for x in (10 * i + 10, 10 * i + 11)
    ] + [100]
