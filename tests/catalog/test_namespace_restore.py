"""Restoring an older version through the namespace (issue 25, item 9).

A table LanceDB (or pylance) created through the namespace has a first manifest
without Tessera's incarnation (the first Tessera writer adopts one).  Restoring
that version commits a copy of the old manifest, which carries the old
config: the namespace must take it for what it is, an older manifest of the
same table, not a table dropped and recreated, on every coordinator, through
the plugin and over REST, for LanceDB's ``restore()``, pylance's and Tessera's
own ``Table.restore``."""

from __future__ import annotations

import contextlib

import pyarrow as pa
import pytest
from tessera_test_services import TesseraServer, new_dynamodb_store_url

import tessera
from tessera.catalog import Table
from tessera.catalog.namespace import TesseraNamespace

lance = pytest.importorskip("lance")
lancedb = pytest.importorskip("lancedb")
lance_namespace = pytest.importorskip("lance_namespace")


def _ids(t) -> list[int]:
    return sorted(t.to_arrow().column("i").to_pylist())


def _col(i: list[int]) -> pa.Table:
    return pa.table({"i": pa.array(i, pa.int64())})


@pytest.fixture(params=["native", "sqlite", "redis", "dynamodb"])
def plugin(request, tmp_path):
    """(namespace properties, LanceDB storage options, catalog) of a warehouse whose tables one coordinator commits
    (DynamoDB: on moto's S3)."""
    kind = request.param
    props: dict[str, str] = {"warehouse": str(tmp_path / "wh")}
    lopts = None
    copts = None
    if kind == "native":
        props["commit_store"] = "native"
    elif kind == "sqlite":
        props["commit_store"] = f"sqlite:///{tmp_path}/commits.db"
    elif kind == "redis":
        props["commit_store"] = request.getfixturevalue("redis_url")
    else:
        moto = request.getfixturevalue("moto_server")
        copts = moto.storage_options()
        lopts = moto.lance_storage_options()
        props.update(
            warehouse=f"s3://{moto.new_bucket()}/wh",
            uri=f"sqlite:///{tmp_path / 'catalog.db'}",
            commit_store=new_dynamodb_store_url(moto),
            **{f"storage.{k}": v for k, v in copts.items()},
        )
    cat = tessera.connect(warehouse=props["warehouse"], uri=props.get("uri"), storage_options=copts)
    yield props, lopts, cat
    with contextlib.suppress(Exception):
        for name in cat.list_tables("default"):
            cat.drop_table(name, purge=True)
    cat.close()


def test_lancedb_restores_an_old_version_through_the_plugin(plugin):
    props, lopts, cat = plugin
    db = lancedb.connect_namespace("tessera", props, storage_options=lopts)
    db.create_table("t", _col([1, 2]))  # version 1: LanceDB's manifest, no incarnation
    cat.load_table("default.t").append(_col([3]))  # version 2: Tessera adopts one
    cat.load_table("default.t").delete("i = 1")  # version 3
    t = db.open_table("t", storage_options=lopts)
    t.checkout(1)
    t.restore()  # version 4: a copy of version 1
    assert t.version == 4 and sorted(t.to_arrow().column("i").to_pylist()) == [1, 2]
    tt = cat.load_table("default.t")
    assert tt.version == 4 and _ids(tt) == [1, 2]
    assert [v["operation"] for v in tt.versions()][-1] == "restore"
    tt.append(_col([5]))  # both go on writing
    fresh = db.open_table("t", storage_options=lopts)
    fresh.add(_col([6]))
    fresh.delete("i = 2")
    tt = cat.load_table("default.t")
    assert _ids(tt) == [1, 5, 6] and [v["version"] for v in tt.versions()] == list(range(1, 8))


def test_pylance_and_tessera_restore_through_the_namespace(tmp_path):
    props = {"warehouse": str(tmp_path / "wh"), "commit_store": "native"}
    ns = TesseraNamespace(**props)
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["s"]))
    tid = ["s", "t"]
    lance.write_dataset(_col([1, 2]), namespace_client=ns, table_id=tid)  # no incarnation
    cat = tessera.connect(warehouse=props["warehouse"])
    cat.load_table("s.t").append(_col([3]))
    old = lance.dataset(namespace_client=ns, table_id=tid, version=1)
    old.restore()  # pylance: version 3 = version 1
    assert _ids(cat.load_table("s.t")) == [1, 2]
    cat.load_table("s.t").append(_col([4]))  # version 4 (incarnation again)
    through = Table.open("s.t", namespace=ns)  # Tessera's client of the namespace
    through.restore(1)  # version 5
    assert through.version == 5 and _ids(through) == [1, 2]
    assert _ids(cat.load_table("s.t")) == [1, 2]
    assert lance.dataset(namespace_client=ns, table_id=tid).version == 5
    cat.close()
    ns.close()


def test_only_a_restore_of_this_tables_own_version_skips_the_incarnation_check(tmp_path):
    """The check still stands where it must.  Staged manifests sent to
    ``create_table_version`` by hand, on a table whose version 1 (pylance's)
    has no incarnation and whose latest has one: a restore of version 1
    carrying version 1's config is accepted; a restore of version 1 carrying
    another incarnation, and a non-restore without one (a writer that read a
    table since dropped and recreated), are refused and change nothing."""
    from lance_namespace import CreateTableVersionRequest
    from lance_namespace import errors as nserr

    from tessera.commit.handlers.namespace_client import root_relative
    from tessera.commit.lineage import CONFIG_INCARNATION
    from tessera.commit.operation import new_transaction
    from tessera.format.table import manifest as mf
    from tessera.format.table import paths

    ns = TesseraNamespace(warehouse=str(tmp_path / "wh"), commit_store="native")
    ns.create_namespace(lance_namespace.CreateNamespaceRequest(id=["s"]))
    tid = ["s", "t"]
    lance.write_dataset(_col([1, 2]), namespace_client=ns, table_id=tid)  # no incarnation
    cat = tessera.connect(warehouse=str(tmp_path / "wh"))
    cat.load_table("s.t").append(_col([3]))  # version 2 adopts one
    t = cat.load_table("s.t")
    v1 = t.checkout(1).snapshot.mfile

    def send(op: str, incarnation: str | None) -> None:
        m = type(v1.manifest)()
        m.CopyFrom(v1.manifest)
        m.version = t.latest_version() + 1
        m.config.pop(CONFIG_INCARNATION, None)
        if incarnation is not None:
            m.config[CONFIG_INCARNATION] = incarnation
        txn = new_transaction(m.version - 1)
        if op == "restore":
            txn.restore.version = 1
        else:
            txn.append.SetInParent()
        final = paths.manifest_path(m.version, mf.NamingScheme.V2)
        staged = paths.staged_manifest_path(final)
        data = mf.write_manifest(m, txn, v1.index_section)
        t.store.put(staged, data)
        ns.create_table_version(
            CreateTableVersionRequest(
                id=tid, version=m.version, manifest_path=f"{root_relative(t.store)}/{staged}", naming_scheme="V2"
            )
        )

    with pytest.raises(nserr.InvalidTableStateError, match="restores version 1"):
        send("restore", "0123456789abcdef0123456789abcdef")
    with pytest.raises(nserr.InvalidTableStateError, match="dropped and recreated"):
        send("append", None)
    assert cat.load_table("s.t").version == 2
    send("restore", None)  # version 1's own config: the same table
    assert cat.load_table("s.t").version == 3 and _ids(cat.load_table("s.t")) == [1, 2]
    cat.close()
    ns.close()


def test_lancedb_restores_over_rest(tmp_path):
    srv = TesseraServer(tmp_path, token=None)
    try:
        db = lancedb.connect_namespace("rest", {"uri": srv.uri})
        db.create_table("t", _col([1, 2]))
        cat = tessera.connect(warehouse=srv.warehouse)
        cat.load_table("default.t").append(_col([3]))
        t = db.open_table("t")
        t.checkout(1)
        t.restore()
        assert _ids(cat.load_table("default.t")) == [1, 2]
        db.open_table("t").add(_col([4]))
        assert _ids(cat.load_table("default.t")) == [1, 2, 4]
        cat.close()
    finally:
        srv.stop()
